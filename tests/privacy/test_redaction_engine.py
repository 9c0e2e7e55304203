"""Redaction's behaviour in the engine: hash mode's key (kept by the store so tokens survive a
restart, or from ``MEMLANE_REDACT_KEY`` / the config), search matching redacted values in
hash and mask modes, drop mode's empty texts, the sync facade and ``:memory:``, bad
configuration refused before anything is created, and the YAML / environment settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memlane import AsyncMemory, Event, Memory
from memlane.config import load_settings
from memlane.engine.redaction import KEY_ENV, META_KEY
from memlane.errors import ConfigError, ConflictError, InvalidInputError
from memlane.privacy.redaction import RedactionConfig
from memlane.stores.base import MetaStore

HASH = RedactionConfig(mode="hash")


@pytest.fixture(params=["sqlite", "pg"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "m.db")
    url: str = request.getfixturevalue("pg_url")
    return url


async def first_content(m: AsyncMemory, text: str) -> str:
    return (await m.add(text, user_id="zoe"))[0].content


async def test_hash_key_is_kept_by_the_store_across_restarts(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    async with AsyncMemory(store, embedder="hash", redact=HASH) as m:
        before = await first_content(m, "mail zoe@example.org")
        assert isinstance(m.facts, MetaStore)
        key = await m.facts.meta_setdefault(META_KEY, "not this one")
        assert len(key) == 64 and key != "not this one"
    async with AsyncMemory(store, embedder="hash", redact=HASH) as m:
        after = await first_content(m, "write to ZOE@example.org")
        hits = (await m.search("zoe@example.org", user_id="zoe", mode="keyword")).hits
    token = before.split()[-1]
    assert token.startswith("[email:") and after.endswith(token)  # same value, same token, after a restart
    assert len(hits) == 2

    monkeypatch.setenv(KEY_ENV, "an operator's key")  # the environment's key wins over the stored one
    async with AsyncMemory(store, embedder="hash", redact=HASH) as m:
        from_env = await first_content(m, "env zoe@example.org")
    async with AsyncMemory(store, embedder="hash", redact=RedactionConfig(mode="hash", key="cfg")) as m:  # type: ignore[arg-type]
        from_config = await first_content(m, "cfg zoe@example.org")
    assert len({token, from_env.split()[-1], from_config.split()[-1]}) == 3


async def test_mask_mode_search_matches_the_mask(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", redact=["email"]) as m:
        await m.add("Zoe's address is zoe@example.org", user_id="zoe")
        await m.add("Zoe plays the cello", user_id="zoe")
        hits = (await m.search("bob@example.com", user_id="zoe", mode="keyword")).hits
        assert [h.fact.content for h in hits] == ["Zoe's address is [email]"]
        # texts differing only in their values are one text once masked: stored once
        again = await m.add("Zoe's address is zoe@other.example", user_id="zoe")
        assert again[0].id == hits[0].fact.id


async def test_hash_mode_metadata_filters_match(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", redact=HASH) as m:
        stored = (await m.add("a note", user_id="zoe", metadata={"contact": "zoe@example.org"}))[0]
        assert stored.metadata["contact"].startswith("[email:")
        hits = (await m.search("note", user_id="zoe", filters={"contact": "zoe@example.org"})).hits
        assert [h.fact.id for h in hits] == [stored.id]
        assert (await m.search("note", user_id="zoe", filters={"contact": "bob@example.org"})).hits == []


async def test_drop_mode(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", redact={"mode": "drop"}) as m:
        assert await m.add("zoe@example.org", user_id="zoe") == []  # nothing left: nothing stored
        assert await m.add("zoe@example.org", user_id="zoe", infer=True, wait=False) == []  # and no job
        assert await m.list_jobs() == []
        assert await first_content(m, "write to zoe@example.org today") == "write to today"
        facts = await m.add(
            [{"role": "user", "content": "+44 20 7946 0958"}, {"role": "user", "content": "hello"}],
            user_id="zoe",
            session_id="s",
        )
        assert [f.content for f in facts] == ["hello"]
        assert await m.add([{"role": "user", "content": "10.0.0.1"}], user_id="zoe") == []
        await m.sessions.create_session(session_id="s1", user_ids=["zoe"])
        event = await m.add_event("s1", Event(content="zoe@example.org", author="zoe"))
        assert event.content == ""  # the event is kept (the log's order and ids), its value is not
        with pytest.raises(InvalidInputError):
            await m.update(facts[0].id, "zoe@example.org", user_id="zoe")
        with pytest.raises(InvalidInputError):
            await m.add_document("zoe@example.org", user_id="zoe")
        assert (await m.list(user_id="zoe")).total == 2


def test_sync_facade_and_in_memory_store() -> None:
    with Memory(":memory:", embedder="hash", redact=["ip", r"TICKET-\d+"]) as m:
        stored = m.add("host 10.1.2.3 in TICKET-991", user_id="u")
        assert stored[0].content == "host [ip] in [custom]"
        assert m.sessions.create_session(session_id="s", state={"ip": "10.1.2.3"}).state == {"ip": "[ip]"}


def test_bad_configuration_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not a valid regular expression"):
        AsyncMemory(tmp_path / "m.db", redact=["email", "EMP-(\\d"])
    with pytest.raises(InvalidInputError, match="unknown redaction kind"):
        Memory(tmp_path / "m.db", redact={"kinds": ["passport"]})
    assert list(tmp_path.iterdir()) == []


def test_yaml_and_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "memlane.yaml"
    cfg.write_text(
        "memory:\n  redact:\n    kinds: [email, iban]\n    mode: hash\n    patterns:\n      badge: 'EMP-\\d{6}'\n"
    )
    s = load_settings(cfg, env={})
    assert s.memory.redact == RedactionConfig(kinds=("email", "iban"), mode="hash", patterns={"badge": r"EMP-\d{6}"})
    with Memory.from_settings(s) as m:
        text = m.add("zoe@example.org EMP-123456 10.0.0.1", user_id="u")[0].content
    assert text.startswith("[email:") and "[badge:" in text and text.endswith("10.0.0.1")

    cfg.write_text("memory:\n  redact:\n    mode: hash\n    key: abc\n")
    with pytest.raises(ConfigError, match="MEMLANE_REDACT_KEY"):
        load_settings(cfg, env={})
    cfg.write_text("memory:\n  redact: [phone, 'EMP-\\d+']\n")
    listed = RedactionConfig(kinds=("phone",), patterns={"custom": r"EMP-\d+"})
    assert load_settings(cfg, env={}).memory.redact == listed
    cfg.write_text("memory:\n  redact:\n    kinds: [fax]\n")
    with pytest.raises(ConfigError, match=r"memlane.yaml:2: memory.redact"):
        load_settings(cfg, env={})

    env = load_settings(env={"MEMLANE_REDACT": json.dumps({"mode": "drop", "kinds": ["ip"]})})
    assert env.memory.redact == RedactionConfig(mode="drop", kinds=("ip",))
    assert load_settings(env={"MEMLANE_REDACT": "true"}).memory.redact == RedactionConfig()
    assert load_settings(env={"MEMLANE_REDACT": "none"}).memory.redact is None
    with pytest.raises(ConfigError, match="MEMLANE_REDACT"):
        load_settings(env={"MEMLANE_REDACT": "email,fax"})
    shown = load_settings(env={"MEMLANE_REDACT": '{"mode": "hash", "key": "s3cret"}', KEY_ENV: "x"}).redacted()
    assert "s3cret" not in json.dumps(shown) and shown["secrets"][KEY_ENV] == "set (redacted)"
    assert shown["values"]["memory.redact"]["value"]["mode"] == "hash"


@pytest.mark.parametrize(
    ("wrapper", "protocol"),
    [("RedactingSessions", "SessionStore"), ("RedactingModel", "FormationModel")],
)
def test_the_wrappers_cover_every_protocol_method(wrapper: str, protocol: str) -> None:
    """A method added to the session store or formation model contract must be wrapped (a
    write or a model output passed through unredacted would leak): the wrappers define every
    method of their protocol themselves, none is left to ``__getattr__``."""
    import inspect

    from memlane.engine import redaction
    from memlane.formation.model import FormationModel
    from memlane.stores.base import SessionStore

    proto = {"SessionStore": SessionStore, "FormationModel": FormationModel}[protocol]
    methods = {n for n, v in vars(proto).items() if inspect.iscoroutinefunction(v) or inspect.isfunction(v)}
    methods -= {n for n in methods if n.startswith("_")}
    assert methods, protocol
    own = vars(getattr(redaction, wrapper))
    assert methods <= set(own), f"{wrapper} does not wrap {sorted(methods - set(own))}"
    for name in methods:  # and takes the same arguments
        assert inspect.signature(own[name]) == inspect.signature(vars(proto)[name]), f"{wrapper}.{name}"


async def test_ids_in_metadata_are_kept_so_forget_still_finds_a_users_turns(tmp_path: Path) -> None:
    """A user id that looks like PII (an e-mail address) stays as given in ``metadata["user_id"]``:
    ``forget`` finds the user's turns in a group session by it."""
    user = "zoe@example.org"
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", redact=True) as m:
        await m.sessions.create_session(session_id="group", user_ids=[user, "bob"])
        await m.add_event("group", Event(content="mine: zoe@example.org", author="zoe", metadata={"user_id": user}))
        await m.add_event("group", Event(content="bob's turn", author="bob"))
        [mine, _] = await m.sessions.get_events("group")
        assert mine.metadata["user_id"] == user and mine.content == "mine: [email]"
        fact = (await m.add("note", user_id=user, metadata={"user_id": user, "mail": user}))[0]
        assert fact.metadata == {"user_id": user, "mail": "[email]"}
        await m.forget(user)
        assert [e.content for e in await m.sessions.get_events("group")] == ["bob's turn"]


async def test_memlane_migrate_copies_the_hash_key(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store copied to another backend keeps its generated hash key: a value written after the
    copy gets the token it got before."""
    from memlane.stores.transfer import migrate

    monkeypatch.delenv(KEY_ENV, raising=False)
    src = str(tmp_path / "a.db")
    async with AsyncMemory(src, embedder="hash", redact=HASH) as m:
        before = await first_content(m, "mail zoe@example.org")
    report = await migrate(src, pg_url)
    assert report.ok, report.problems
    async with AsyncMemory(pg_url, embedder="hash", redact=HASH) as m:
        after = await first_content(m, "again zoe@example.org")
        hits = (await m.search("zoe@example.org", user_id="zoe", mode="keyword")).hits
    assert after.split()[-1] == before.split()[-1] and len(hits) == 2
    async with AsyncMemory(tmp_path / "b.db", embedder="hash", redact=HASH) as m:  # another store, another key
        await first_content(m, "other zoe@example.org")
    with pytest.raises(ConflictError, match="redaction key"):
        await migrate(str(tmp_path / "b.db"), pg_url, force=True)
