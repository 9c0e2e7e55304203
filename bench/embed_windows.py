"""Ingest cost of windowed embeddings (issue 22): turns/s of short and long texts, windows on
and off, side by side in one run (the ratios are what to read on a shared machine).

    .venv/bin/python bench/embed_windows.py [--short 400] [--long 80] [--rounds 3]

Short turns are LoCoMo-sized chat lines (~60-120 characters); long ones are 3,950-character
notes (four 254-token windows with MiniLM). Each cell is the best of ``--rounds`` runs of
``add_many(embed="now")`` into a fresh in-memory database with the local MiniLM embedder.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from memlane import AsyncMemory
from memlane.retrieval.hybrid import RetrievalConfig

WORDS = [
    "budget",
    "review",
    "travel",
    "office",
    "lease",
    "marketing",
    "campaign",
    "slides",
    "standup",
    "server",
    "migration",
    "weekend",
    "vendor",
    "contract",
    "clause",
    "hiring",
    "engineering",
    "interviews",
    "design",
    "mockups",
    "onboarding",
    "support",
    "volume",
    "help",
    "center",
    "garden",
    "tomatoes",
    "compost",
    "basil",
    "sourdough",
    "roast",
    "ginger",
    "laptop",
    "battery",
    "router",
    "firmware",
    "backup",
]


def sentence(rnd: random.Random) -> str:
    return " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(8, 16))).capitalize() + "."


def texts(n: int, chars: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        parts: list[str] = []
        while sum(len(p) + 1 for p in parts) < chars:
            parts.append(sentence(rnd))
        out.append(" ".join(parts)[:chars])
    return out


async def cell(batch: list[str], windows: bool, rounds: int) -> tuple[float, int]:
    best = float("inf")
    vectors = 0
    for r in range(rounds):
        async with AsyncMemory(
            ":memory:", embedder="local", sessions="null", retrieval=RetrievalConfig(embed_windows=windows)
        ) as m:
            await m.add("warm up", user_id="w")
            t = time.perf_counter()
            await m.add_many([{"messages": [{"role": "user", "content": x} for x in batch], "user_id": f"u{r}"}])
            best = min(best, time.perf_counter() - t)
            vectors = len(batch) + await m.facts._query(_count())  # type: ignore[attr-defined]
    return len(batch) / best, vectors


def _count():  # type: ignore[no-untyped-def]
    row = yield from __import__("memlane.stores.sql.stmt", fromlist=["one"]).one("SELECT count(*) FROM fact_windows")
    return int(row[0])


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--short", type=int, default=400)
    ap.add_argument("--long", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sets = {"short (~100 chars)": texts(a.short, 100, 1), "long (3,950 chars)": texts(a.long, 3950, 2)}
    print("| texts | windows | turns/s | vectors stored |")
    print("|---|---|---|---|")
    for name, batch in sets.items():
        for windows in (False, True):
            rate, vectors = await cell(batch, windows, a.rounds)
            print(f"| {name} x {len(batch)} | {'on' if windows else 'off'} | {rate:.0f} | {vectors} |")


if __name__ == "__main__":
    asyncio.run(main())
