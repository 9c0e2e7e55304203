"""Canary PII for the redaction tests, a formation model that leaks it, and scanners that
look for the raw values where each backend keeps data: a SQLite file's bytes (main, -wal,
-shm, -journal) and every cell, every PostgreSQL table of the test's schema (each row as
text), and every Redis key under the test's prefix (names and values of every type)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from memlane.formation.offline import OfflineModel
from memlane.formation.schemas import (
    ConsolidationInput,
    DedupInput,
    DedupOutput,
    ExtractedFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
)
from memlane.privacy.redaction import RedactionConfig
from services import redis_key_bytes

EMAIL = "zoequartz77@example.org"
PHONE = "+447700900461"
CARD = "4539578763621486"  # Luhn-valid
IBAN = "GB82WEST12345698765432"  # mod-97-valid
IP = "203.0.113.77"
BADGE = "EMP-884213"  # a user pattern
PII = f"Reach Zoe at {EMAIL} or {PHONE}, card {CARD}, IBAN {IBAN}, host {IP}, badge {BADGE}."

#: What to look for (lower case): each value whole, and the distinctive words a keyword index
#: keeps of it (FTS5 stores terms prefix-compressed: a tail too).
NEEDLES = [
    EMAIL,
    "zoequartz77",
    "quartz77",
    PHONE,
    "447700900461",
    "7700900461",
    CARD,
    CARD[3:],
    IBAN.lower(),
    "west12345698765432",
    "12345698765432",
    IP,
    BADGE.lower(),
    "884213",
]

#: Every detector, hash mode (equal values still match), and a user pattern.
CONFIG = RedactionConfig(mode="hash", patterns={"badge": r"EMP-\d{6}"})


class LeakyModel(OfflineModel):
    """The offline model, plus what a real LLM might add from its own knowledge: canary PII
    in extracted facts, merged texts, reflections, consolidated blobs and profile bullets."""

    name = "leaky"

    def __init__(self) -> None:
        super().__init__()
        self.profile_inputs: list[ProfileInput] = []

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        out = await super().extract_facts(inp)
        leak = ExtractedFact(content=f"Zoe pays with card {CARD} from {IP}", scope="user", sources=[0])
        return out.model_copy(update={"facts": [*out.facts, leak]})

    async def decide(self, inp: DedupInput) -> DedupOutput:
        out = await super().decide(inp)
        leaked = [d.model_copy(update={"text": f"{d.text} ({EMAIL})"}) if d.text else d for d in out.decisions]
        return out.model_copy(update={"decisions": leaked})

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        out = await super().reflect(inp)
        return out.model_copy(
            update={"user": [*out.user, f"Zoe's e-mail is {EMAIL}"], "session": [*out.session, f"Call {PHONE}"]}
        )

    async def consolidate(self, inp: ConsolidationInput) -> str:
        return (await super().consolidate(inp)) + f"\n- Zoe's IBAN is {IBAN}, badge {BADGE}"

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        self.profile_inputs.append(inp)
        out = await super().distill_profile(inp)
        return out.model_copy(update={"bullets": [*out.bullets, f"Phone {PHONE}"]})


def _found(blob: bytes) -> list[str]:
    low = blob.lower()
    return [n for n in NEEDLES if n.encode() in low]


def sqlite_hits(db: Path) -> list[str]:
    """``file: needle`` for every raw canary in the database's files or cells."""
    hits = []
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{db}{suffix}")
        if p.exists():
            hits += [f"{p.name}: {n}" for n in _found(p.read_bytes())]
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            if table == "facts_fts":  # the virtual table: its shadow tables are read
                continue
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    data = cell if isinstance(cell, bytes) else str(cell).encode()
                    hits += [f"{table}: {n}" for n in _found(data)]
    finally:
        conn.close()
    return hits


def pg_hits(url: str) -> list[str]:
    """``table: needle`` for every raw canary in any table of the URL's schema."""
    import psycopg
    from psycopg import sql

    from memlane.stores.postgres.db import parse_pg_location

    base, schema, _, _ = parse_pg_location(url)
    hits = []
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema or "public")))
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        assert "facts" in tables and "events" in tables, tables
        for table in tables:
            for (text,) in conn.execute(sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(table))):
                hits += [f"{table}: {n}" for n in _found(text.encode())]
    return hits


def redis_hits(url: str) -> list[str]:
    """``key: needle`` for every raw canary in a key (name or value) under the URL's prefix."""
    import redis

    from memlane.stores.redis.url import parse_redis_url

    loc = parse_redis_url(url)
    client: Any = redis.Redis.from_url(url.split("?")[0])
    hits = []
    try:
        keys = list(client.scan_iter(match=f"{loc.prefix}*", count=1000))
        assert keys, "nothing under the test's Redis prefix"
        for key in keys:
            hits += [f"redis {key.decode()}: {n}" for n in _found(redis_key_bytes(client, key))]
    finally:
        client.close()
    return hits
