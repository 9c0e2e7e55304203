"""What PII redaction costs on the write path: ``Redactor.redact`` per turn (mask and hash
modes, best of 3 over 10,000 synthetic turns of 8-30 words, one in 10 with an e-mail address,
one in 25 with a phone number), and ``add_many`` turns/s on ``:memory:`` with the hash
embedder without redaction, masked and hashed (best of 3 each).

    .venv/bin/python bench/redaction_speed.py

Results go in docs/benchmarks.md ("PII redaction detectors").
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from memlane import AddBatch, AsyncMemory
from memlane.privacy.redaction import RedactionConfig, Redactor

WORDS = [
    "the",
    "a",
    "quartet",
    "rehearsal",
    "on",
    "tuesday",
    "booked",
    "room",
    "flight",
    "lisbon",
    "call",
    "me",
    "later",
    "thanks",
    "dinner",
    "at",
    "seven",
    "with",
    "ana",
]
TURNS = 10_000


def turns() -> list[str]:
    rng = random.Random(1)
    out = []
    for i in range(TURNS):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
        if i % 10 == 0:
            text += f" mail me at user{i}@example.org"
        if i % 25 == 0:
            text += f" or call +44 20 7946 {i % 10000:04d}"
        out.append(text)
    return out


def time_redact(texts: list[str], mode: str) -> float:
    """Best of 3: microseconds per text."""
    redactor = Redactor.from_config(RedactionConfig.model_validate({"mode": mode}), key=b"bench")
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for text in texts:
            redactor.redact(text)
        best = min(best, time.perf_counter() - t)
    return best / len(texts) * 1e6


async def ingest(texts: list[str], redact: Any) -> float:
    """Best of 3: turns per second through ``add_many`` (20 turns a session)."""
    best = float("inf")
    for _ in range(3):
        async with AsyncMemory(":memory:", embedder="hash", sessions="null", redact=redact) as m:
            batches = [
                AddBatch([{"role": "user", "content": x} for x in texts[i : i + 20]], user_id="u", session_id=f"s{i}")
                for i in range(0, len(texts), 20)
            ]
            t = time.perf_counter()
            await m.add_many(batches)
            best = min(best, time.perf_counter() - t)
    return len(texts) / best


def main() -> None:
    texts = turns()
    chars = sum(map(len, texts)) / len(texts)
    for mode in ("mask", "hash"):
        print(f"redact() {mode}: {time_redact(texts, mode):.1f} us per turn ({chars:.0f} characters on average)")
    for label, redact in (("off", None), ("mask", True), ("hash", {"mode": "hash"})):
        print(f"add_many, redaction {label}: {asyncio.run(ingest(texts, redact)):,.0f} turns/s")


if __name__ == "__main__":
    main()
