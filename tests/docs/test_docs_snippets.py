"""Every ```python block in docs/ runs, and every ``curl`` line of docs/http.md answers as shown.

A block either runs in a test or is marked as a fragment with the info string
```` ```python fragment ```` (code that needs servers or names that only make sense inside a
larger program). Pages whose blocks have their own tests are listed in :data:`ELSEWHERE`; the
blocks of every other page run here, each as a script in a fresh folder, twice in a row (the
second run on the first one's files), and print their ``# ->`` comments when they have any.

docs/http.md's ``curl`` lines (a ```bash block's lines starting with ``curl``, continuation
lines joined) are sent to a real server on a loopback port: a block that uses ``$KEY`` goes to a
server with an API key (``$KEY`` is that key), the others to a server without keys. The host
and port become the test server's; a shown answer (the ``# {...}`` lines under a command) must
match the real one: every ``"key":value`` pair it shows is in the answer, a value ending in
``...`` is a placeholder (``"job_id":"5b15..."``) whose real value replaces it in later
commands (``/v1/jobs/5b15...``). A command answers 2xx unless its shown answer is an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from memlane.config import load_settings
from memlane.service.app import create_app
from memlane.service.keys import KeyStore
from service_server import ServiceServer, make_hub, serve

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(?P<lang>\w*)(?P<info>[^\n]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_EXPECT = re.compile(r"#\s*->\s?(?P<line>.*)$")

#: Pages whose python blocks run in another test (the page's name appears in that file).
ELSEWHERE = {
    "agent.md": "tests/docs/test_docs_agent.py",
    "state.md": "tests/docs/test_docs_agent.py",
    "adapters.md": "tests/docs/test_docs_agent.py",  # its Google ADK block: tests/adapters/test_adapter_adk.py
    "tools.md": "tests/agent/test_tools.py",
    "documents.md": "tests/ingest/test_documents_eliza.py",
    "mcp.md": "tests/service/test_service_mcp.py",
    "http.md": "tests/docs/test_docs_snippets.py",  # with the curl lines, against a real server (below)
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    info: str
    body: str

    @property
    def fragment(self) -> bool:
        return "fragment" in self.info.split()


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, m.start()) + 1, m["lang"], m["info"], m["body"]) for m in _FENCE.finditer(text)
    ]


def python_blocks(page: str) -> list[Block]:
    return [b for b in blocks(page) if b.lang == "python" and not b.fragment]


def _pages() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md"))


def _run_here() -> list[pytest.ParameterSet]:
    return [
        pytest.param(page, index, id=f"{page}:{block.line}")
        for page in _pages()
        if page not in ELSEWHERE
        for index, block in enumerate(python_blocks(page))
    ]


def test_every_python_block_runs_somewhere_or_is_a_fragment() -> None:
    """The blocks this file does not run belong to a test that names their page."""
    for page, test in ELSEWHERE.items():
        assert (DOCS / page).exists(), page
        assert page in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not run docs/{page}"
    here = _run_here()
    assert len(here) >= 5  # backends.md, configuration.md, formation.md: the cases cannot vanish
    assert {p.values[0] for p in here} >= {"backends.md", "configuration.md", "formation.md"}
    for page in _pages():
        for block in blocks(page):  # "```py" or "```python3" would escape every runner
            assert block.lang not in ("py", "python3", "pycon"), f"docs/{page}:{block.line}: write ```python"


def _env(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMLANE_", "XDG_", "MEMORY_"))}
    # MEMLANE_CACHE_DIR: the run's built ONNX graphs (conftest), not a rebuild in each fresh HOME
    return env | {
        "HOME": str(cwd),
        "MEMLANE_DB": str(cwd / "default.db"),
        "OPENBLAS_NUM_THREADS": "1",
        "MEMLANE_CACHE_DIR": os.environ["MEMLANE_CACHE_DIR"],
    }


def _run_script(body: str, cwd: Path, where: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", body], cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stderr[-4000:]}"
    assert "Traceback" not in done.stderr, f"{where}:\n{done.stderr[-4000:]}"
    return [line.rstrip() for line in done.stdout.splitlines()]


@pytest.mark.parametrize(("page", "index"), _run_here())
def test_python_block_runs_twice_and_prints_what_it_shows(
    tmp_path: Path, request: pytest.FixtureRequest, page: str, index: int
) -> None:
    block = python_blocks(page)[index]
    body = block.body
    if "redis://localhost:6379" in body:  # the Redis the tests use, under a prefix of this test's
        redis_url: str = request.getfixturevalue("redis_url")
        body = body.replace("redis://localhost:6379", redis_url)
    expected = [m["line"].rstrip() for m in map(_EXPECT.search, block.body.splitlines()) if m]
    for attempt in ("first run", "second run"):
        out = _run_script(body, tmp_path, f"docs/{page}:{block.line} ({attempt})")
        if expected:
            assert out == expected, f"docs/{page}:{block.line} ({attempt}) printed:\n" + "\n".join(out)


# ---------------------------------------------------------------------------- docs/http.md against a server
@dataclass
class Curl:
    line: int
    command: str
    shown: str  # the answer shown under it ("" when none)


def curls(block: Block) -> list[Curl]:
    """The block's curl commands (continuation lines joined) with the answers shown under them."""
    out: list[Curl] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        start = i
        if not text.startswith("curl "):
            i += 1
            continue
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and lines[i].lstrip().startswith("# "):
            shown.append(lines[i].lstrip()[2:])
            i += 1
        out.append(Curl(block.line + 1 + start, text, " ".join(shown)))
    return out


def request_of(command: str, base: str) -> tuple[str, str, dict[str, str], str | None]:
    """(method, url, headers, body) of a curl command; an option this does not know fails."""
    args = shlex.split(command, comments=True)[1:]
    method, url, headers, data = None, None, {}, None
    it = iter(args)
    for arg in it:
        if arg in ("-s", "-S", "-sS", "-i", "-v", "-f", "--silent", "--show-error", "--include", "--fail"):
            continue  # output only
        if arg in ("-o", "--output", "-w", "--write-out"):
            next(it)  # output only
            continue
        if arg in ("-X", "--request"):
            method = next(it)
        elif arg in ("-H", "--header"):
            name, _, value = next(it).partition(":")
            headers[name.strip()] = value.strip()
        elif arg in ("-d", "--data", "--data-raw"):
            data = next(it)
        elif arg == "--json":
            data = next(it)
            headers.setdefault("content-type", "application/json")
        elif arg.startswith("-"):
            raise AssertionError(f"curl option {arg} is not understood by this test: teach request_of() about it")
        else:
            url = arg
    assert url is not None, command
    url = re.sub(r"^(?:https?://)?(?:localhost|127\.0\.0\.1):\d+", base, url)
    assert url.startswith(base), f"{command}: the URL does not name the local server"
    return method or ("POST" if data is not None else "GET"), url, headers, data


_PAIR = re.compile(r'"(?P<key>\w+)":(?P<value>"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:e-?\d+)?|true|false|null|\.\.\.)')


def check_answer(curl: Curl, response: httpx.Response, placeholders: dict[str, str]) -> None:
    where = f"docs/http.md:{curl.line}: {curl.command}"
    text = response.text
    with contextlib.suppress(ValueError):  # not JSON: compared as it is
        text = json.dumps(response.json(), separators=(",", ":"), ensure_ascii=False)
    status = re.match(r"(\d{3})\b", curl.shown)  # a status shown (curl -w '%{http_code}')
    if status is not None:
        assert response.status_code == int(status.group(1)), f"{where}: answered {response.status_code}"
    elif '"error"' in curl.shown:
        assert response.status_code >= 400, f"{where}: shown as an error, answered {response.status_code}"
    else:
        assert response.status_code < 400, f"{where}: answered {response.status_code} {response.text[:500]}"
    for m in _PAIR.finditer(curl.shown):
        key, value = m["key"], m["value"]
        assert f'"{key}":' in text, f"{where}: the answer has no {key!r} (shown: {curl.shown})\n{text[:1000]}"
        if value.endswith('..."') and value != '"..."':  # a placeholder: remember the real value
            real = re.search(rf'"{key}":"([^"]*)"', text)
            assert real is not None, f"{where}: {key!r} is not text in the answer"
            placeholders.setdefault(value.strip('"'), real.group(1))
        elif value not in ('"..."', "..."):
            assert f'"{key}":{value}' in text, f'{where}: expected "{key}":{value}\n{text[:1000]}'


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServiceServer, ServiceServer, str]]:
    """A server without keys and one with an API key (its secret returned too)."""
    settings = load_settings(env={"MEMLANE_RATE_LIMIT": "0"})
    (tmp_path / "open").mkdir()
    (tmp_path / "keyed").mkdir()
    with KeyStore(tmp_path / "keys.db") as keys:
        secret = keys.create("acme", name="docs").secret
        with (
            serve(create_app(settings, hub=make_hub(tmp_path / "open"))) as open_server,
            serve(create_app(settings, hub=make_hub(tmp_path / "keyed"), keys=keys)) as keyed_server,
        ):
            yield open_server, keyed_server, secret


def test_http_md_curl_lines_and_python_run_against_a_real_server(
    servers: tuple[ServiceServer, ServiceServer, str], tmp_path: Path
) -> None:
    open_server, keyed_server, secret = servers
    ran = 0
    for block in blocks("http.md"):
        if block.lang != "bash" or not curls(block):
            continue
        keyed = "$KEY" in block.body
        server = keyed_server if keyed else open_server
        placeholders: dict[str, str] = {}
        with httpx.Client(timeout=60) as client:
            for curl in curls(block):
                command = curl.command.replace("$KEY", secret)
                for placeholder, real in placeholders.items():
                    command = command.replace(placeholder, real)
                assert "$" not in command, f"docs/http.md:{curl.line}: unknown variable in {curl.command}"
                method, url, headers, data = request_of(command, server.url)
                response = client.request(method, url, headers=headers, content=data)
                check_answer(curl, response, placeholders)
                ran += 1
    assert ran >= 10  # the curl tour and the key examples
    for block in python_blocks("http.md"):  # the httpx example, with a real key
        body = block.body.replace("http://127.0.0.1:8000", keyed_server.url)
        _run_script(f"KEY = {secret!r}\n{body}", tmp_path, f"docs/http.md:{block.line}")
        ran += 1
    assert ran >= 11


_ROW = re.compile(r"^\| (?P<methods>[A-Z /]+) \| `(?P<path>/[^`]*)` \| (?P<what>.*) \|$", re.M)


def test_http_md_request_fields_are_the_schemas() -> None:
    """Every body a POST / PATCH row of the routes table shows (``add {text or messages, ...}``)
    names only fields the route's request schema has (it said ``content``: a 422)."""
    schema = create_app(load_settings(env={})).openapi()
    models = schema["components"]["schemas"]
    checked = 0
    for row in _ROW.finditer((DOCS / "http.md").read_text(encoding="utf-8")):
        methods = {m.strip().lower() for m in row["methods"].split("/")}
        # the body leads the cell ("add `{text or messages, ...}`", "adk-rs: body `{...}`"); a brace
        # further on is an answer or an error shape
        shown = re.match(r"(?:[\w:-]+ ){0,3}`\{(?P<fields>[^}]*)\}", row["what"])
        if not methods & {"post", "patch"} or shown is None:
            continue
        pattern = re.sub(r"\\\{\w+\\\}", r"{\\w+}", re.escape(row["path"].split("?")[0]))
        paths = [p for p in schema["paths"] if re.fullmatch(pattern, p)]
        assert len(paths) == 1, f"docs/http.md: {row['path']} is no route ({paths})"
        ops = [op for m, op in schema["paths"][paths[0]].items() if m in methods]
        body = ops[0]["requestBody"]["content"]["application/json"]["schema"]
        assert "$ref" in body, f"docs/http.md: {row['path']} shows a body; the route takes any object"
        known = set(models[body["$ref"].rsplit("/", 1)[1]]["properties"])
        for part in shown["fields"].split(","):
            names = part.split(" or ") if re.fullmatch(r"\s*\w+ or \w+\s*", part) else [part]
            for name in names:
                field = re.match(r'\s*"?(\w+)', name)
                assert field is not None, f"docs/http.md: {row['path']}: cannot read {part!r}"
                assert field.group(1) in known, (
                    f"docs/http.md: {row['path']} shows {field.group(1)!r}; the schema has {sorted(known)}"
                )
        checked += 1
    assert checked >= 5  # sessions, events, memories, search, import, adk-rs ingest


def test_readme_explains_the_design_names_and_promises_nothing_stale() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Where the names come from", 1)[1].split("\n#", 1)[0]
    for name in ("Gaia", "Eden", "KAOS", "elizaOS", "adk-rs"):
        assert name in readme.replace(section, ""), f"{name} is not used outside the note: drop its row"
        assert f"| **{name}**" in section, f"README uses {name} without saying what it is"
    assert "Coming next" not in readme and "(later:" not in readme
