"""Cost of assembling the ``<MemoryContext>`` block (agent/context.py), cold and cached.

Run::

    .venv/bin/python bench/context.py            # 1k and 10k facts, 200 calls per case
    .venv/bin/python bench/context.py --quick    # smoke test

One user under one agent in a fresh SQLite file (``--workdir``, default /tmp/memlane-bench):
N facts (kind ``fact``, all formed in the last 7 days), the agent's and the user's
consolidated blobs at their word limits (1,200 and 300 words) with 10 and 4 pending
reflections, a session blob (200 words) with 4 pending reflections; the offline formation
model distils the profile. Cases, each timed over the same number of calls, side by side in
one run (absolute times on this shared machine are noisy; compare the ratios):

* ``cold, profile``: ``use_cache=False`` (gather everything, one profile distillation).
* ``cold, no profile``: ``use_cache=False, profile=False``.
* ``cold, budget 500``: ``use_cache=False, profile=False, budget_tokens=500`` (packing).
* ``cached``: a hit (the two memory stamps are read and compared, nothing else).
* ``after a write``: one new fact, then the call (the stamp moved: a rebuild).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import log, remove_db

from memlane import AsyncMemory, ConsolidatedMemory, Reflection
from memlane.models import Fact, content_hash


def _words(n: int, tag: str) -> str:
    lines, words = [], [f"{tag}{i}" for i in range(n)]
    for i in range(0, n, 12):
        lines.append("- " + " ".join(words[i : i + 12]))
    return "VERSION: 1\n" + "\n".join(lines)


async def _fill(m: AsyncMemory, n: int) -> None:
    facts = [
        Fact(
            content=f"Fact {i}: the user mentioned item {i} at place {i % 97}",
            user_id="u",
            agent_id="bot",
            hash=content_hash(f"Fact {i}: the user mentioned item {i} at place {i % 97}"),
        )
        for i in range(n)
    ]
    for i in range(0, n, 5000):
        await m.facts.put_facts(facts[i : i + 5000], None)
    rs = m.reflection_store
    blobs = [
        ("agent", 1200, {"agent_id": "bot"}),
        ("user", 300, {"agent_id": "bot", "user_id": "u"}),
        ("session", 200, {"agent_id": "bot", "user_id": "u", "session_id": "s"}),
    ]
    for scope, words, ids in blobs:
        await rs.put_consolidated(
            ConsolidatedMemory(
                scope=scope,
                consolidated_content=_words(words, scope[0]),  # type: ignore[arg-type]
                word_limit=words,
                version=1,
                **ids,
            )
        )
        for j in range(10 if scope == "agent" else 4):
            await rs.put_reflection(Reflection(content=f"{scope} reflection {j} about the project", scope=scope, **ids))  # type: ignore[arg-type]


async def _time(n: int, call: object) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()  # type: ignore[operator]
        out.append((time.perf_counter() - t) * 1000)
    return out


def _row(name: str, ms: list[float], base: float) -> str:
    p50 = statistics.median(ms)
    p95 = sorted(ms)[int(len(ms) * 0.95) - 1]
    return f"| {name} | {p50:.2f} | {p95:.2f} | {p50 / base:.1f}x |"


async def _run(path: Path, n: int, calls: int) -> None:
    async with AsyncMemory(path, embedder="hash", llm="offline") as m:
        log(f"filling {n} facts")
        await _fill(m, n)
        ids = {"session_id": "s", "user_id": "u", "agent_id": "bot"}
        text = await m.context(**ids)
        cases = {
            "cold, profile": lambda: m.context(**ids, use_cache=False),
            "cold, no profile": lambda: m.context(**ids, use_cache=False, profile=False),
            "cold, budget 500": lambda: m.context(**ids, use_cache=False, profile=False, budget_tokens=500),
            "cached": lambda: m.context(**ids),
        }
        results = {name: await _time(calls, fn) for name, fn in cases.items()}
        after: list[float] = []
        for i in range(calls):
            await m.add(f"new fact {i}", user_id="u", agent_id="bot")
            t = time.perf_counter()
            await m.context(**ids)
            after.append((time.perf_counter() - t) * 1000)
        results["after a write"] = after
    base = statistics.median(results["cached"])
    print(f"\n{n} facts, {calls} calls per case, block {len(text):,} chars\n")
    print("| case | p50 ms | p95 ms | p50 vs cached |\n|---|---|---|---|")
    for name, ms in results.items():
        print(_row(name, ms, base))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    args = ap.parse_args()
    sizes = [200] if args.quick else [int(s) for s in args.sizes.split(",")]
    calls = 20 if args.quick else args.calls
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    for n in sizes:
        path = Path(args.workdir) / f"context-{n}.db"
        remove_db(path)
        await _run(path, n, calls)
        remove_db(path)


if __name__ == "__main__":
    asyncio.run(main())
