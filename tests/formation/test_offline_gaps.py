"""Offline formation gaps (issue 11), through the real engine: AsyncMemory on a SQLite file, the
offline model, sessions -> form -> facts and profile.

- a contradiction in one batch (or across batches) leaves only the newer statement;
- "my new email is ..." (and "changed my X to", "is now") updates a single-valued detail;
- "we moved to Porto", "our dog is called Rex": the speaker's own facts; moving replaces the residence;
- facts name the user (their name once known, else "the user"), never an account id such as
  ``u_8f3a``, and keep companions ("My wife Lena and I live in Zurich");
- turns the offline model cannot read (German, Chinese, unmatched "we ..." statements) are reported
  in ``FormationResult.unread`` and logged once per batch, never dropped without a word.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from memlane import AsyncMemory, Event, EventType, FormationConfig, FormationResult
from memlane.formation.names import name_in_facts, person_name
from memlane.formation.offline import OfflineModel
from memlane.formation.offline.language import _language
from memlane.formation.schemas import ExtractionInput, Turn, UnreadTurn


def cfg() -> FormationConfig:
    return FormationConfig(background=False)


async def say(m: AsyncMemory, sid: str, *texts: str, author: str = "Sam") -> None:
    """User turns, each answered by a short assistant turn."""
    for text in texts:
        await m.add_event(sid, Event(type=EventType.USER_MESSAGE, author=author, content=text))
        await m.add_event(sid, Event(type=EventType.AGENT_RESPONSE, author="gaia", content="Noted."))


async def session(m: AsyncMemory, sid: str, *texts: str) -> FormationResult:
    await m.sessions.create_session(user_ids=["sam"], session_id=sid)
    await say(m, sid, *texts)
    res = await m.end_session(sid)
    assert isinstance(res, FormationResult)
    return res


async def facts(m: AsyncMemory) -> list[str]:
    """Every memory of Sam's but the sessions' summaries (docs/summaries.md)."""
    return sorted(f.content for f in (await m.list(user_id="sam")).items if f.kind != "summary")


async def profile(m: AsyncMemory) -> list[str]:
    text = await m.profile("sam")
    return [line.removeprefix("- ") for line in (text or "").splitlines()]


ALLERGIC = re.compile(r"\bis allergic to shellfish", re.I)


# --------------------------------------------------------------------------- 1. contradictions


async def test_contradiction_in_one_batch_keeps_only_the_negation(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "a.db", embedder="hash", formation=cfg()) as m:
        res = await session(
            m, "s1", "I'm allergic to shellfish.", "I live in Lisbon.", "I'm not allergic to shellfish anymore."
        )
        assert [(c.event, c.fact.content) for c in res.changes] == [
            ("ADD", "Sam lives in Lisbon"),
            ("ADD", "Sam is not allergic to shellfish"),
        ]
        assert await facts(m) == ["Sam is not allergic to shellfish", "Sam lives in Lisbon"]
        bullets = await profile(m)
        assert "Sam is not allergic to shellfish" in bullets
        assert not [b for b in bullets if ALLERGIC.search(b)]


async def test_contradiction_across_batches_deletes_the_old_fact(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "b.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "I'm allergic to shellfish.")
        assert await facts(m) == ["Sam is allergic to shellfish"]
        res = await session(m, "s2", "Good news: I'm not allergic to shellfish anymore.")
        assert [c.event for c in res.changes] == ["DELETE"]
        assert await facts(m) == ["Sam is not allergic to shellfish"]
        assert not [b for b in await profile(m) if ALLERGIC.search(b)]


async def test_a_later_restatement_wins_back(tmp_path: Path) -> None:
    """The newest mention decides: allergic, then not, then allergic again -> allergic."""
    async with AsyncMemory(tmp_path / "c.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "I'm not allergic to shellfish.", "Actually, I'm allergic to shellfish.")
        assert await facts(m) == ["Sam is allergic to shellfish"]


# --------------------------------------------------------------------------- 2. single-valued updates


async def test_new_email_in_one_batch_keeps_only_the_new_one(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "d.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "my email is bob@old.example", "my new email is bob@new.example")
        assert await facts(m) == ["Sam's email is bob@new.example"]
        assert [b for b in await profile(m) if "@" in b] == ["Sam's email is bob@new.example"]


async def test_new_email_in_a_later_batch_updates_the_old_fact(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "e.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "my email is bob@old.example")
        [old] = (await m.list(user_id="sam", kind="fact")).items
        res = await session(m, "s2", "FYI my new email is bob@new.example")
        [change] = res.changes
        assert (change.event, change.fact.id) == ("UPDATE", old.id)
        assert change.fact.content == "Sam's email is bob@new.example"
        assert change.previous == "Sam's email is bob@old.example"
        assert await facts(m) == ["Sam's email is bob@new.example"]
        assert [b for b in await profile(m) if "@" in b] == ["Sam's email is bob@new.example"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "My phone number is +351 912 345 678.",
            "I changed my number to +351 933 000 111.",
            "Sam's phone number is +351 933 000 111",
        ),
        (
            "My address is 3 Elm Street, Lisbon.",
            "I've changed my address to 12 Rua Augusta, Porto.",
            "Sam's address is 12 Rua Augusta, Porto",
        ),
        ("My email is sam@old.example", "I updated my email to sam@new.example", "Sam's email is sam@new.example"),
        (
            "My job title is junior designer.",
            "My new job title is senior designer.",
            "Sam's job title is senior designer",
        ),
        ("I work at Acme.", "I now work at Globex.", "Sam works at Globex"),
        ("I live in Lisbon.", "I live in Porto now.", "Sam lives in Porto"),
    ],
)
async def test_changed_single_valued_details_update(tmp_path: Path, old: str, new: str, expected: str) -> None:
    async with AsyncMemory(tmp_path / "f.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", old)
        assert len(await facts(m)) == 1
        res = await session(m, "s2", new)
        assert [(c.event, c.fact.content) for c in res.changes] == [("UPDATE", expected)]
        assert await facts(m) == [expected]


async def test_a_multi_valued_detail_is_not_replaced(tmp_path: Path) -> None:
    """Languages and sisters are not single-valued: a second one is added, not swapped in."""
    async with AsyncMemory(tmp_path / "g.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "My sister is called Ana.", "I speak Portuguese.")
        await session(m, "s2", "My sister is called Rita.", "I speak German.")
        assert await facts(m) == sorted(
            [
                "Sam's sister is named Ana",
                "Sam speaks Portuguese",
                "Sam's sister is named Rita",
                "Sam speaks German",
            ]
        )


# --------------------------------------------------------------------------- 3. first person plural


async def test_we_moved_replaces_the_residence(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "h.db", embedder="hash", formation=cfg()) as m:
        await session(m, "s1", "I live in Lisbon.")
        res = await session(m, "s2", "Big news: we moved to Porto last month!", "Our dog is called Rex.")
        # a relative date is anchored to the day it was said
        moved = re.compile(r"Sam moved to Porto last month \(said on \d{1,2} \w+ \d{4}\)")
        assert [c.event for c in res.changes] == ["UPDATE", "ADD"]
        assert moved.fullmatch(res.changes[0].fact.content)
        assert res.changes[0].previous == "Sam lives in Lisbon"
        assert res.changes[1].fact.content == "Sam's dog is named Rex"
        assert res.unread == []
        bullets = await profile(m)
        assert [b for b in bullets if moved.fullmatch(b)]
        assert not [b for b in bullets if "Lisbon" in b]


async def test_we_sentences_in_one_batch(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "i.db", embedder="hash", formation=cfg()) as m:
        await session(
            m,
            "s1",
            "I live in Lisbon.",
            "We're moving to Porto in June.",
            "We have two kids.",
            "We got married in 2019.",
            "Our address is 12 Rua Augusta, Porto.",
        )
        assert await facts(m) == sorted(
            [
                "Sam is moving to Porto in June",
                "Sam has two kids",
                "Sam got married in 2019",
                "Sam's address is 12 Rua Augusta, Porto",
            ]
        )


async def test_we_is_not_the_speaker_everywhere() -> None:
    """Only frames where the meaning is the speaker's too: "we are a small team" is no fact about Sam.
    A plural statement about a personal detail that no rule reads is reported; other small talk is not."""
    texts = ("We are a small team of engineers.", "We launched v2 last week.", "We both work remotely from home.")
    conv = [Turn(role="user", author="Sam", text=t) for t in texts]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert out.facts == []
    assert [(u.index, u.reason) for u in out.unread] == [(2, "no pattern matched")]


# --------------------------------------------------------------------------- 4. what it could not read


async def test_unread_turns_are_reported_logged_and_stored_in_the_job(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memlane.formation.offline")
    async with AsyncMemory(tmp_path / "j.db", embedder="hash", formation=cfg()) as m:
        with caplog.at_level(logging.INFO, logger="memlane.formation.offline"):
            res = await session(
                m,
                "s1",
                "Ich wohne in Berlin und arbeite bei Siemens.",  # 0
                "我对花生过敏。",  # 2
                "I live in Lisbon.",  # 4
                "Our kids go to school in Porto now.",  # 6: a family detail no rule reads
                "Haha ok, thanks!",  # 8: small talk, nothing to read: not reported
                "Where should I eat tonight?",  # 10: a question: not reported
            )
        assert [c.fact.content for c in res.changes] == ["Sam lives in Lisbon"]
        session_events = [u.event_id for u in res.unread]
        assert [(u.index, u.role, u.reason, u.language) for u in res.unread] == [
            (0, "user", "language not supported: de", "de"),
            (2, "user", "language not supported: zh", "zh"),
            (6, "user", "no pattern matched", None),
        ]
        assert all(session_events)
        # once per batch, a WARNING since a language is not supported
        lines = [r for r in caplog.records if r.name == "memlane.formation.offline"]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert "could not read 3 of 12 turns" in lines[0].getMessage()
        # the job's stored result carries them (the HTTP job route and `memlane jobs` read this)
        [job] = [j for j in await m.list_jobs() if j.id == res.job_id]
        assert job.result is not None
        assert [u["reason"] for u in job.result["unread"]] == [u.reason for u in res.unread]
        assert "Berlin" not in str(job.result["unread"])  # positions and ids, never the text


async def test_only_no_pattern_turns_log_at_info(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with AsyncMemory(tmp_path / "k.db", embedder="hash", formation=cfg()) as m:
        with caplog.at_level(logging.INFO, logger="memlane.formation.offline"):
            res = await session(m, "s1", "Our kids go to school in Porto now.", "We launched v2 last week.")
        assert [u.reason for u in res.unread] == ["no pattern matched"]
        [line] = [r for r in caplog.records if r.name == "memlane.formation.offline"]
        assert line.levelno == logging.INFO


async def test_an_english_batch_reports_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async with AsyncMemory(tmp_path / "l.db", embedder="hash", formation=cfg()) as m:
        with caplog.at_level(logging.INFO, logger="memlane.formation.offline"):
            res = await session(m, "s1", "I'm vegetarian.", "Thanks!", "What's the weather like?")
        assert res.unread == []
        assert not [r for r in caplog.records if r.name == "memlane.formation.offline"]


async def test_add_infer_reports_unread(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "m.db", embedder="hash", formation=cfg()) as m:
        job = await m.add("Je suis végétarien et j'habite à Lyon.", user_id="sam", infer=True, wait=False)
        await m.run_jobs()
        done = await m.get_job(job.id)
        assert done.result is not None
        res = FormationResult.model_validate(done.result)
        assert res.facts == []
        assert [(u.index, u.reason) for u in res.unread] == [(0, "language not supported: fr")]


async def test_a_mixed_turn_is_read_in_english_and_reported_for_the_rest() -> None:
    conv = [Turn(role="user", author="Sam", text="I live in Lisbon. Mein Hund heißt Rex und ist sehr lieb.")]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert [f.content for f in out.facts] == ["Sam lives in Lisbon"]
    assert [(u.index, u.language) for u in out.unread] == [(0, "de")]


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("Ich wohne in Berlin.", "de"),
        ("Wir sind nach Porto umgezogen.", "de"),
        ("我住在上海。", "zh"),
        ("私は東京に住んでいます", "ja"),
        ("저는 서울에 살아요", "ko"),
        ("Je suis végétarien.", "fr"),
        ("Yo vivo en Madrid con mi familia.", "es"),
        ("Eu moro em Lisboa.", "pt"),
        ("Ik woon in Amsterdam.", "nl"),
        ("Я живу в Москве", "ru"),
        ("I live in Lisbon.", "en"),
        ("My son José lives in Madrid.", "en"),
        ("I love Die Hard.", "en"),
        ("Je me suis marié en juin.", "fr"),
        ("Me llamo Juan y vivo en Madrid.", "es"),
        ("We moved to Porto.", "en"),
        ("Danke!", None),
        ("ok", None),
        ("🙂", None),
    ],
)
async def test_language_guess(text: str, lang: str | None) -> None:
    assert _language(text) == lang


def test_memlane_form_prints_the_unread_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memlane import Memory
    from memlane.cli.main import main
    from memlane.cli.worker_cmd import _describe

    db = tmp_path / "cli.db"
    with Memory(db, embedder="hash", formation=FormationConfig(background=False, idle_minutes=None)) as m:
        m.sessions.create_session(user_ids=["sam"], session_id="a")
        for text in ("I live in Lisbon.", "Ich bin Vegetarierin und wohne in Berlin."):
            m.add_event("a", Event(type=EventType.USER_MESSAGE, author="Sam", content=text))
        second = m.sessions.get_session("a").events[1].id
    assert main(["form", "a", "--end", "--db", str(db), "--embedder", "hash", "-q"]) == 0
    out = capsys.readouterr().out
    assert "ADD" in out and "Sam lives in Lisbon" in out
    assert f"UNREAD turn 1 ({second}): language not supported: de" in out
    assert main(["form", "a", "--db", str(db), "--embedder", "hash", "-q", "--json"]) == 0  # nothing new: no unread
    assert json.loads(capsys.readouterr().out)["unread"] == []
    res = FormationResult(job_id="j", reason="end", unread=[UnreadTurn(index=0, reason="no pattern matched")])
    assert _describe(res) == "1 turns not read"


# --------------------------------------------------------------------------- 5. whom facts are about


async def _formed(m: AsyncMemory, user_id: str, author: str, sid: str, *texts: str) -> list[str]:
    await m.sessions.create_session(user_ids=[user_id], session_id=sid)
    await say(m, sid, *texts, author=author)
    res = await m.end_session(sid)
    assert isinstance(res, FormationResult)
    return [c.fact.content for c in res.changes]


async def test_an_author_id_is_never_the_subject(tmp_path: Path) -> None:
    """Author ``u_8f3a`` said "My name is Alice": the name fact is the user's, later facts (in the
    batch, a later session, add(infer=True)) use the name; no fact holds the account id."""
    async with AsyncMemory(tmp_path / "id.db", embedder="hash", formation=cfg()) as m:
        first = await _formed(m, "u_8f3a", "u_8f3a", "s1", "My name is Alice.", "I work at Acme.")
        assert first == ["The user's name is Alice", "Alice works at Acme"]
        assert await _formed(m, "u_8f3a", "u_8f3a", "s2", "I love hiking.") == ["Alice loves hiking"]
        assert [f.content for f in await m.add("I'm vegetarian", user_id="u_8f3a", infer=True)] == [
            "Alice is vegetarian"
        ]
        everything = [f.content for f in (await m.list(user_id="u_8f3a")).items]
        assert not [t for t in everything if "u_8f3a" in t]


async def test_without_a_name_the_subject_is_the_user(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "anon.db", embedder="hash", formation=cfg()) as m:
        assert await _formed(m, "u_8f3a", "user-42", "s1", "I work at Acme.") == ["The user works at Acme"]


def test_person_names_and_account_ids() -> None:
    assert [person_name(a) for a in ("Sam", "ana lima", "O'Neil", "Jean-Luc")] == [
        "Sam",
        "Ana Lima",
        "O'Neil",
        "Jean-Luc",
    ]
    assert [person_name(a) for a in ("u_8f3a", "user-42", "5f2c9e01", "sam@example.org", "user", "")] == [None] * 6
    assert name_in_facts(["Alice works at Acme", "The user's name is Alice"]) == "Alice"
    assert name_in_facts(["The user goes by Al.", "The user's name is Alice"]) == "Al"  # newest first
    assert name_in_facts(["The user's name is u_8f3a"]) is None


@pytest.mark.parametrize(
    ("said", "fact"),
    [
        ("My wife Lena and I live in Zurich.", "The user lives in Zurich with their wife Lena"),
        ("Lena and I live in Zurich.", "The user lives in Zurich with Lena"),
        ("Me and my wife live in Zurich.", "The user lives in Zurich with their wife"),
        ("My sister Ana and I run a bakery.", "The user runs a bakery with their sister Ana"),
        ("My husband and I moved to Porto last year.", "The user moved to Porto last year with their husband"),
        ("So my wife and I are moving to Berlin in May.", "The user is moving to Berlin in May with their wife"),
    ],
)
async def test_companions_are_kept(said: str, fact: str) -> None:
    conv = [Turn(role="user", author="user", text=said)]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert out.facts and out.facts[0].content == fact
    assert out.unread == []


async def test_a_shared_state_is_the_speakers_own() -> None:
    """ "My wife and I are vegetarian": the speaker is vegetarian (it was not read at all)."""
    conv = [Turn(role="user", author="user", text="My wife and I are vegetarian.")]
    out = await OfflineModel().extract_facts(ExtractionInput(conversation=conv, instructions=""))
    assert [f.content for f in out.facts] == ["The user is vegetarian"]
