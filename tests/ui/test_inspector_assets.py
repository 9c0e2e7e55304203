"""The inspector's files are served by the app itself, offline, from inside the package: only
known file types under the asset folder, with a same-origin Content-Security-Policy, and no
page asks for anything outside the server (no CDN)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from memlane.service.routes.ui import ASSETS, CSP
from service_server import ServiceServer


def test_the_page_and_its_files_are_served_with_a_same_origin_policy(service: ServiceServer) -> None:
    root = service.client.get("/ui", follow_redirects=False)
    assert root.status_code == 308 and root.headers["location"] == "/ui/"
    page = service.client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CSP
    assert "default-src 'self'" in CSP and "connect-src 'self'" in CSP
    assert '<script type="module" src="js/app.js">' in page.text
    script = service.client.get("/ui/js/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert service.client.get("/ui/app.css").headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "path",
    ["/ui/nope.js", "/ui/js/../../routes/ui.py", "/ui/%2e%2e/routes/ui.py", "/ui/__init__.py", "/ui/.secret.js"],
)
def test_nothing_else_is_served(service: ServiceServer, path: str) -> None:
    r = service.client.get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert r.json()["error"]["code"] == "not_found"


def test_the_page_loads_nothing_from_other_origins() -> None:
    files = [p for p in ASSETS.rglob("*") if p.suffix in {".html", ".js", ".css"}]
    assert len(files) >= 5
    for file in files:
        text = file.read_text(encoding="utf-8")
        assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", text), file
        assert not re.search(r"""(?:import|fetch)\s*\(?\s*["'](?:https?:)?//""", text), file
        assert "@import url(http" not in text, file


def test_the_assets_are_inside_the_package() -> None:
    assert ASSETS.is_dir()
    assert (ASSETS / "index.html").is_file()
    assert Path(ASSETS).resolve().parent.name == "service"
