"""The committed OpenAPI schema (docs/openapi.json) is the one the code serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from memlane.service.openapi import REGENERATE, schema, schema_text
from service_server import make_hub, serve

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"


def test_committed_schema_matches_the_code() -> None:
    committed = COMMITTED.read_text(encoding="utf-8")
    if committed != schema_text():
        current = schema()
        old = json.loads(committed)
        added = sorted(set(current["paths"]) - set(old["paths"]))
        removed = sorted(set(old["paths"]) - set(current["paths"]))
        pytest.fail(
            f"docs/openapi.json differs from the app's schema (paths added {added}, removed {removed}); "
            f"regenerate it: {REGENERATE}"
        )


def test_schema_text_is_stable() -> None:
    assert schema_text() == schema_text()
    assert schema_text().endswith("}\n")


def test_served_schema_is_the_committed_one(tmp_path: Path) -> None:
    from memlane.config import load_settings
    from memlane.service.app import create_app

    with serve(create_app(load_settings(env={}), hub=make_hub(tmp_path))) as srv:
        served = srv.client.get("/openapi.json")
    assert served.status_code == 200
    assert served.json() == json.loads(COMMITTED.read_text(encoding="utf-8"))


def test_every_route_documents_the_error_shape() -> None:
    doc = schema()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status in ("400", "422", "429"):
                ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorResponse"), (method, path, status)
