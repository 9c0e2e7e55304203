"""docs/inspector.md's commands run as written: the key it creates logs in to the page that
``memlane serve`` serves at /ui/ (a real server process on a loopback port), and the screenshot
script it names photographs the views (into a temporary folder)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from memlane.devserver import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "inspector.md"
#: Runs the memlane CLI in a child process, as the console script does.
CLI = [sys.executable, "-c", "import sys; from memlane.cli.main import main; sys.exit(main(sys.argv[1:]))"]
_BASH = re.compile(r"^```bash\n(?P<body>.*?)^```", re.M | re.S)


def commands() -> list[str]:
    lines = []
    for block in _BASH.finditer(PAGE.read_text(encoding="utf-8")):
        lines += [line.split("#")[0].strip() for line in block["body"].splitlines() if line.strip()]
    return lines


def env_for(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "XDG_"))}
    return env | {
        "HOME": str(tmp_path / "home"),
        "MEMLANE_DB": str(tmp_path / "memlane.db"),
        "MEMLANE_KEYS_FILE": str(tmp_path / "keys.db"),
        "MEMLANE_EMBEDDER": "hash",
        "MEMLANE_CACHE_DIR": os.environ.get("MEMLANE_CACHE_DIR", str(tmp_path / "cache")),
    }


def test_the_page_shows_its_commands() -> None:
    found = commands()
    assert any(c.startswith("memlane keys create") for c in found)
    assert "memlane serve" in found
    assert any("scripts/inspector_screenshots.py" in c for c in found)


def test_the_documented_key_opens_the_page_memlane_serve_serves(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    (tmp_path / "home").mkdir()
    create = next(c for c in commands() if c.startswith("memlane keys create"))
    made = subprocess.run(
        [*CLI, *shlex.split(create)[1:]], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert made.returncode == 0, made.stderr
    key = re.search(r"ml_[A-Za-z0-9_-]+", made.stdout)
    assert key, made.stdout
    port = free_port()
    serve = [*shlex.split(next(c for c in commands() if c.startswith("memlane serve"))), "--port", str(port)]
    server = subprocess.Popen([*CLI, *serve[1:]], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None:
                pytest.fail(f"memlane serve exited: {server.communicate()[1]}")
            time.sleep(0.1)
        page = httpx.get(f"{url}/ui/", timeout=10)
        assert page.status_code == 200 and "memlane inspector" in page.text
        me = httpx.get(f"{url}/v1/whoami", headers={"Authorization": f"Bearer {key.group(0)}"}, timeout=10)
        assert me.status_code == 200, me.text
        assert me.json()["read_only"] is True and me.json()["tenant"] == "default"
        assert httpx.get(f"{url}/v1/whoami", timeout=10).status_code == 401
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "inspector: /ui/" in err


def test_the_screenshot_script_photographs_the_views(tmp_path: Path, browser: object) -> None:
    line = next(c for c in commands() if "scripts/inspector_screenshots.py" in c)
    argv = shlex.split(line)
    out = tmp_path / "images"
    argv[argv.index("--out") + 1] = str(out)
    env = env_for(tmp_path)
    done = subprocess.run(
        [sys.executable, str(ROOT / argv[1]), *argv[2:], "--embedder", "hash"],
        env=env, capture_output=True, text=True, timeout=600, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    pictures = sorted(p.name for p in out.glob("*.png"))
    assert "inspector-memories.png" in pictures and len(pictures) >= 6, pictures
    for picture in out.glob("*.png"):
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 10_000


def test_the_pictures_the_readme_and_the_page_show_are_committed() -> None:
    shown = []
    for page in (ROOT / "README.md", PAGE):
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text(encoding="utf-8")):
            shown.append((page.parent / target).resolve())
    assert len(shown) >= 3
    for picture in shown:
        assert picture.is_file(), picture
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture
