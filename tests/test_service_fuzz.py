"""schemathesis against the COMMITTED docs/openapi.json and a real loopback server (issue 9 proof).

For every operation of the committed schema, schemathesis generates requests (positive: valid
by the schema; negative: invalid bodies and parameters) and sends them with a valid key to a
real uvicorn server (tests/service_server.py) over a fresh store. Every response must pass:
no 5xx, a documented status code, a JSON body matching the schema documented for that status.

CI budget: a few examples per operation and mode, derandomized (< ~60 s). Long mode:
``MEMLANE_FUZZ_LONG=1`` (random seeds, ``MEMLANE_FUZZ_EXAMPLES`` per operation and mode,
default 100); its run is recorded in docs/reliability.md.

The auth-bypass attempts (no key, wrong key, revoked key, another tenant's key, a read-only
key writing, a user-bound key naming another user) live in tests/test_service_auth_bypass.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

import requests  # noqa: E402  (schemathesis' transport)
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.core.result import Ok  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service_server import ServiceServer, make_hub, serve  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPENAPI = Path(os.environ.get("MEMLANE_FUZZ_SCHEMA", ROOT / "docs" / "openapi.json"))
LONG = os.environ.get("MEMLANE_FUZZ_LONG") == "1"
EXAMPLES = int(os.environ.get("MEMLANE_FUZZ_EXAMPLES", "100" if LONG else "6"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _schema() -> Any:
    return schemathesis.openapi.from_path(OPENAPI)


def _operations() -> list[Any]:
    return [r.ok() for r in _schema().get_all_operations() if isinstance(r, Ok)]


OPERATIONS = _operations() if OPENAPI.exists() else []


def test_committed_schema_is_there_and_has_the_service_routes() -> None:
    """The fuzz run below covers the committed schema; it must exist and hold the routes."""
    assert OPENAPI.exists(), f"{OPENAPI} is not committed"
    paths = set(json.loads(OPENAPI.read_text())["paths"])
    for path in ("/health", "/memory/events", "/memory/sessions"):
        assert path in paths, path
    assert len(OPERATIONS) >= 3


def _app(tmp: Path, keys: Any) -> Any:
    """The app over ``tmp`` (hash embedder, offline formation model), rate limit off (the fuzzer
    sends hundreds of requests a minute with one key; 429 is covered by the auth tests)."""
    from memlane.config import load_settings
    from memlane.service.app import create_app

    return create_app(load_settings(env={"MEMLANE_RATE_LIMIT": "0"}), hub=make_hub(tmp), keys=keys)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServiceServer, dict[str, str]]]:
    """A real server over a fresh store with API keys; yields it with a full-access key's headers."""
    from memlane.service.keys import KeyStore

    tmp = tmp_path_factory.mktemp("fuzz")
    with KeyStore(tmp / "keys.db") as keys:
        headers = {"Authorization": f"Bearer {keys.create('fuzz').secret}"}
        with serve(_app(tmp, keys)) as srv:
            yield srv, headers


def _fuzz(op: Any, mode: Any, server: ServiceServer, headers: dict[str, str]) -> None:
    session = requests.Session()
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if LONG else [])

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=not LONG,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=server.url, session=session, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)

    try:
        run()
    finally:
        session.close()


def _negatable(op: Any) -> bool:
    """An operation has invalid inputs to generate: a body, a query/header parameter, or a path
    parameter with a constraint (a plain string path parameter accepts every string)."""
    raw = op.definition.raw
    if raw.get("requestBody"):
        return True
    return any(p["in"] != "path" or p.get("schema") != {"title": p.get("schema", {}).get("title"), "type": "string"}
               for p in raw.get("parameters", []))  # fmt: skip


CASES = [(op, "positive") for op in OPERATIONS] + [(op, "negative") for op in OPERATIONS if _negatable(op)]


@pytest.mark.parametrize(("op", "mode"), CASES, ids=[f"{op.label} {mode}" for op, mode in CASES])
def test_fuzz_operation(op: Any, mode: str, fuzz_server: tuple[ServiceServer, dict[str, str]]) -> None:
    """Positive cases (valid by the schema) and negative ones (invalid input: an operation
    without parameters or body has none) of one operation."""
    server, headers = fuzz_server
    _fuzz(op, schemathesis.GenerationMode(mode), server, headers)


# --------------------------------------------------------------------------- the fuzzer is not vacuous


def test_fuzzer_fails_on_a_body_the_schema_does_not_allow(tmp_path: Path) -> None:
    """Against a schema whose Health requires a field the server never sends, the same harness fails."""
    raw = json.loads(OPENAPI.read_text())
    raw["components"]["schemas"]["Health"]["required"] = ["status", "not_sent"]
    raw["components"]["schemas"]["Health"]["properties"]["not_sent"] = {"type": "string"}
    schema = schemathesis.openapi.from_dict(raw)
    op = schema["/health"]["GET"]
    with serve(_app(tmp_path, None)) as srv, pytest.raises(BaseException) as caught:
        _fuzz(op, schemathesis.GenerationMode.POSITIVE, srv, {})
    assert "JsonSchemaError" in _failure_types(caught.value) and "not_sent" in repr(_leaves(caught.value))


def test_fuzzer_fails_on_a_server_error(tmp_path: Path) -> None:
    """A server whose engine is broken answers 500: the harness reports it."""
    from memlane.service.app import create_app

    class BrokenHub:
        async def get(self, tenant: str) -> Any:
            raise RuntimeError("boom")

        async def aclose(self) -> None:
            return None

    op = _schema()["/v1/stats"]["GET"]
    with serve(create_app(hub=BrokenHub())) as srv, pytest.raises(BaseException) as caught:  # type: ignore[arg-type]
        _fuzz(op, schemathesis.GenerationMode.POSITIVE, srv, {})
    assert "ServerError" in _failure_types(caught.value)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _failure_types(exc: BaseException) -> set[str]:
    return {type(leaf).__name__ for leaf in _leaves(exc)}
