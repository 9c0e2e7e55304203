"""A short bounded load on real ``memlane serve`` processes (bench/service_load.py, issue 9 proof).

The generator runs in a second process; one server process, then two server processes on one
SQLite file. Asserts 0 errors, no lost write (every 201 add is counted by every server's list
afterwards) and bounded RSS growth. No timing asserts: latency figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import service_load

#: RSS growth allowed per server process over the measured run (a leak of a few KiB per request
#: over 240 requests stays far below; a per-request leak of the request body/response does not).
MAX_RSS_GROWTH_MIB = 48.0


@pytest.mark.parametrize("servers", [1, 2])
def test_bounded_load_has_no_errors_and_bounded_memory(tmp_path: Path, servers: int) -> None:
    result = service_load.run_case(
        tmp_path,
        servers=servers,
        tenants=2,
        users=2,
        requests=240,
        duration=60.0,
        concurrency=8,
        warmup=40,
        seed=3,
    )
    assert result["errors"] == 0, result["first_errors"]
    assert result["requests_sent"] == 240
    assert result["lost_writes"] == 0
    assert sum(sum(u.values()) for u in result["added"].values()) > 0
    assert {"add", "search", "list", "event", "events"} <= set(result["ops"])
    assert len(result["server_pids"]) == servers and result["generator_pid"] not in result["server_pids"]
    assert all(growth < MAX_RSS_GROWTH_MIB for growth in result["rss_growth_mib"]), result["rss_growth_mib"]


def test_an_error_is_counted(tmp_path: Path) -> None:
    """The generator counts an unexpected status as an error (here: a key the server refuses)."""
    deployment = service_load.Deployment(tmp_path, tenants=1, users_per_tenant=1)
    deployment.setup()
    try:
        deployment.start(1)
        bad = [service_load.Caller("tenant0", "ml_0000000000000000_not-a-key", ("u",))]
        summary = service_load.run_generator([deployment.servers[0].url], bad, tmp_path, 10, 10.0, 2, 1)
        assert summary["requests_sent"] == 10
        assert summary["errors"] == 10 + service_load.SESSIONS_PER_USER  # every request and session creation
        assert "401" in str(summary["first_errors"])
    finally:
        deployment.stop()
