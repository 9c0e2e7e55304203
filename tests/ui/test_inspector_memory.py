"""The inspector's memory tabs in a real browser (headless Chromium), on SQLite and PostgreSQL:
the timeline with its point-in-time slider, search with its debug view, the context block with
its token count under a budget, the profile, reflections and consolidated memory after a
consolidation run from the page, documents and their fragments, and the stats with the growth
chart. Each test checks what the page shows against what the API says."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pytest
from inspector_helpers import Inspector, login, ok
from playwright.sync_api import expect

from memlane import AsyncMemory
from memlane.models import Reflection


def add(inspector: Inspector, text: str, user: str = "ann") -> dict[str, Any]:
    body = ok(inspector.client.post("/v1/memories", json={"text": text, "user_id": user}), 201)
    return body["memories"][0]  # type: ignore[no-any-return]


def open_tab(page: Any, inspector: Inspector, tab: str, user: str = "ann") -> None:
    page.goto(f"{inspector.url}/ui/#/users/{user}/{tab}")
    expect(page.get_by_role("heading", name=f"User {user}")).to_be_visible()


def test_search_shows_results_with_their_ranks_and_the_debug_view(page: Any, inspector: Inspector) -> None:
    add(inspector, "Ann lives in Lisbon")
    add(inspector, "Ann plays the cello on Sundays")
    tea = add(inspector, "Ann likes green tea")["id"]
    add(inspector, "Bob plays the cello too", user="bob")
    login(page, inspector)
    open_tab(page, inspector, "search")
    page.get_by_label("Query").fill("cello")
    page.get_by_label("Mode").select_option("keyword")
    page.get_by_role("button", name="Search").click()
    results = page.get_by_role("table", name="Search results")
    expect(results).to_contain_text("Ann plays the cello on Sundays")
    expect(results).not_to_contain_text("Bob")

    asked = {"query": "cello", "user_id": "ann", "mode": "keyword", "debug": True}
    api = ok(inspector.client.post("/v1/search", json=asked))
    rows = results.locator("tbody tr")
    expect(rows).to_have_count(len(api["hits"]))
    top = api["hits"][0]
    assert top["fact"]["content"] == "Ann plays the cello on Sundays" and top["vector_rank"] is None
    cells = rows.first.locator("td")
    expect(cells.nth(1)).to_have_text(top["fact"]["content"])
    expect(cells.nth(3)).to_have_text(str(top["keyword_rank"]))  # keyword rank
    expect(cells.nth(5)).to_have_text("—")  # vector rank: keyword mode leaves vectors out

    timings = page.get_by_role("table", name="Stage timings")
    expect(timings).to_contain_text("keyword")
    expect(timings).to_contain_text("total")
    candidates = page.get_by_role("table", name="Candidates")
    expect(candidates.locator("tbody tr")).to_have_count(len(api["debug"]["keyword"][0]))
    expect(candidates).to_contain_text("Ann plays the cello on Sundays")
    expect(page.get_by_text("Vectors used: no (keyword only)")).to_be_visible()

    # hybrid: the vector side's candidates appear too, each with the rank the API gave it
    page.get_by_label("Mode").select_option("hybrid")
    page.get_by_role("button", name="Search").click()
    expect(page.get_by_text("Vectors used: yes")).to_be_visible()
    api = ok(inspector.client.post("/v1/search", json={"query": "cello", "user_id": "ann", "debug": True}))
    keyword_ids = [fid for fid, _ in api["debug"]["keyword"][0]]
    vector_ids = [fid for fid, _ in api["debug"]["vector"][0]]
    assert tea in vector_ids and tea not in keyword_ids, api["debug"]
    cand = page.get_by_role("table", name="Candidates")
    expect(cand.locator("tbody tr")).to_have_count(len(set(vector_ids) | set(keyword_ids)))
    row = cand.locator("tbody tr").filter(has_text="Ann likes green tea").locator("td")
    expect(row.nth(1)).to_have_text("—")  # no keyword rank: "cello" is not in it
    expect(row.nth(3)).to_have_text(str(vector_ids.index(tea) + 1))  # its vector rank
    floor = api["debug"]["config"]["min_vector_score"]
    assert dict(api["debug"]["vector"][0])[tea] < floor and tea not in [h["fact"]["id"] for h in api["hits"]]
    expect(row.nth(5)).to_have_text(f"not returned: vector score under min_vector_score ({floor})")


def test_context_shows_the_block_and_its_token_count_under_a_budget(page: Any, inspector: Inspector) -> None:
    for i in range(12):
        add(inspector, f"Ann went to concert number {i} in Lisbon with her cousin Maria last spring")
    login(page, inspector)
    open_tab(page, inspector, "context")
    block = page.locator("#context-block")
    expect(block).to_contain_text("<MemoryContext>")
    full = ok(inspector.client.get("/v1/context", params={"user_id": "ann"}))
    expect(block).to_have_text(full["context"])
    expect(page.locator("#context-tokens")).to_have_text(str(full["tokens"]))
    expect(page.locator("#context-profile")).to_contain_text("Ann went to concert")

    page.get_by_label("Token budget").fill("60")
    page.get_by_role("button", name="Show").click()
    cut = ok(inspector.client.get("/v1/context", params={"user_id": "ann", "budget_tokens": 60}))
    assert cut["tokens"] < full["tokens"] and cut["budget_tokens"] == 60
    expect(page.locator("#context-tokens")).to_have_text(str(cut["tokens"]))
    expect(page.locator("#context-size")).to_contain_text("budget 60")
    expect(block).to_have_text(cut["context"])


def test_profile_now_and_as_of_before_a_change(page: Any, inspector: Inspector) -> None:
    fact = add(inspector, "Ann lives in Lisbon")
    ann = {"user_id": "ann"}
    before = ok(inspector.client.get(f"/v1/memories/{fact['id']}/history", params=ann))["history"][0]["at"]
    ok(inspector.client.patch(f"/v1/memories/{fact['id']}", params=ann, json={"text": "Ann lives in Porto"}))
    login(page, inspector, "ro")
    open_tab(page, inspector, "profile")
    expect(page.locator("#profile-text")).to_contain_text("Ann lives in Porto")
    page.get_by_label("As of").fill(before)
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#profile-text")).to_contain_text("Ann lives in Lisbon")
    then = ok(inspector.client.get("/v1/profile", params={"user_id": "ann", "as_of": before}))
    assert "Lisbon" in then["profile"] and "Porto" not in then["profile"]


def test_documents_and_their_fragments(page: Any, inspector: Inspector) -> None:
    text = "\n\n".join(
        f"## Part {i}\n\n" + " ".join(f"Paragraph {i} sentence {j} about the garden and its roses." for j in range(40))
        for i in range(3)
    )
    body = {"text": text, "title": "Garden notes", "user_id": "ann"}
    doc = ok(inspector.client.post("/v1/documents", json=body), 201)
    add(inspector, "Ann lives in Lisbon")
    login(page, inspector, "ann")
    open_tab(page, inspector, "documents")
    docs = page.get_by_role("table", name="Documents")
    expect(docs.locator("tbody tr")).to_have_count(1)
    expect(docs).to_contain_text("Garden notes")
    expect(docs).not_to_contain_text("Ann lives in Lisbon")
    listed = ok(inspector.client.get("/v1/documents", params={"user_id": "ann"}))["documents"]
    assert [d["id"] for d in listed] == [doc["id"]]

    docs.get_by_role("button", name="Fragments of Garden notes").click()
    fragments = ok(inspector.client.get(f"/v1/documents/{doc['id']}/fragments", params={"user_id": "ann"}))["fragments"]
    assert len(fragments) == doc["metadata"]["fragments"] > 1
    expect(page.get_by_role("heading", name=f"Fragments of Garden notes ({len(fragments)})")).to_be_focused()
    shown = page.locator("#fragments pre.fragment")
    expect(shown).to_have_count(len(fragments))
    expect(shown.first).to_have_text(fragments[0]["content"])
    expect(docs.locator("tbody tr")).to_contain_text(str(len(fragments)))


def test_timeline_and_the_as_of_slider(page: Any, inspector: Inspector) -> None:
    home = add(inspector, "Ann lives in Lisbon")
    add(inspector, "Ann likes green tea")
    scope = {"user_id": "ann"}
    ok(inspector.client.patch(f"/v1/memories/{home['id']}", params=scope, json={"text": "Ann lives in Porto"}))
    ok(inspector.client.delete(f"/v1/memories/{home['id']}", params=scope))
    events = ok(inspector.client.get("/v1/users/ann/timeline"))["events"]
    assert [e["event"] for e in events if e["fact_id"] == home["id"]] == ["DELETE", "UPDATE", "ADD"]

    login(page, inspector, "ro")
    open_tab(page, inspector, "timeline")
    timeline = page.get_by_role("table", name="Timeline")
    expect(timeline.locator("tbody tr")).to_have_count(len(events))
    update = timeline.locator("tbody tr").filter(has_text="UPDATE")
    expect(update.locator("del")).to_have_text("Lisbon")
    expect(update.locator("ins")).to_have_text("Porto")
    expect(timeline.locator("tbody tr").first).to_contain_text("DELETE")  # newest first

    def shown() -> list[str]:
        return sorted(page.locator("#asof-memories li a").all_inner_texts())

    def held(at: str | None) -> list[str]:
        got = ok(inspector.client.get("/v1/memories", params={**scope, "as_of": at} if at else scope))
        return sorted(m["content"] for m in got["memories"])

    label = page.locator("#asof-label")
    expect(label).to_have_text("now")
    expect(page.locator("#asof-memories")).to_have_attribute("data-as-of", "now")
    assert shown() == held(None) == ["Ann likes green tea"]

    # the slider's stops are the changes' times, oldest first, then now; the arrow keys walk them
    stops = sorted({e["at"] for e in events}, key=lambda at: at)
    slider = page.get_by_label("Point in time (arrows move it)")
    slider.focus()
    page.keyboard.press("Home")
    seen = []
    for i, at in enumerate(stops):
        if i:
            page.keyboard.press("ArrowRight")
        expect(page.locator("#asof-memories")).to_have_attribute("data-as-of", at)
        expect(page.locator("#asof-time")).to_have_value(at)
        assert shown() == held(at), at
        seen.append(shown())
    assert seen[0] == ["Ann lives in Lisbon"]
    assert ["Ann likes green tea", "Ann lives in Porto"] in seen
    assert seen[-1] == ["Ann likes green tea"]
    page.keyboard.press("ArrowRight")
    expect(label).to_have_text("now")

    # a typed time: the memory as it was just after the update
    update_at = next(e["at"] for e in events if e["event"] == "UPDATE")
    page.get_by_label("Or a time (ISO 8601)").fill(update_at)
    page.get_by_role("button", name="Show then").click()
    expect(page.locator("#asof-memories")).to_have_attribute("data-as-of", update_at)
    assert shown() == ["Ann likes green tea", "Ann lives in Porto"]
    expect(slider).to_have_value(str(stops.index(update_at)))

    # paged by time: two changes a page, older ones on "Next page" (the slider gains their stops)
    page.goto(f"{inspector.url}/ui/#/users/ann/timeline?page_size=2")
    rows = page.get_by_role("table", name="Timeline").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(slider).to_have_attribute("max", "2")
    page.get_by_role("button", name="Next page", exact=True).click()
    expect(rows).to_have_count(4)
    expect(slider).to_have_attribute("max", str(len(stops)))
    more = page.get_by_role("button", name="Next page", exact=True)
    if more.count():  # a full last page may not know it was the last
        more.click()
    expect(more).to_have_count(0)
    expect(rows).to_have_count(4)
    assert rows.locator("td:nth-child(2)").all_inner_texts() == [e["event"] for e in events]


def store_location(request: pytest.FixtureRequest, inspector: Inspector) -> str:
    """The store the server reads (the ``inspector`` fixture's)."""
    if inspector.backend == "sqlite":
        return str(request.getfixturevalue("tmp_path") / "memlane.db")
    return str(request.getfixturevalue("pg_url"))


def backdate(request: pytest.FixtureRequest, inspector: Inspector, fact_id: str, when: datetime) -> None:
    """Make a memory look formed at ``when`` (growth counts by formation day)."""
    where = store_location(request, inspector)
    if inspector.backend == "sqlite":
        with sqlite3.connect(where) as db:
            db.execute("UPDATE facts SET formed_at=? WHERE id=?", (when.isoformat(), fact_id))
        return
    import psycopg

    parts = urlsplit(where)
    schema = dict(parse_qsl(parts.query))["schema"]
    with psycopg.connect(urlunsplit(parts._replace(query="")), autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".facts SET formed_at=%s WHERE id=%s', (when, fact_id))


def reflect(request: pytest.FixtureRequest, inspector: Inspector, *texts: str) -> None:
    """Put user-scope reflections of ann in the store the server reads (as formation would)."""
    where = store_location(request, inspector)

    async def put() -> None:
        async with AsyncMemory(where, embedder="hash", sessions="sqlite") as m:
            for text in texts:
                await m.reflection_store.put_reflection(Reflection(content=text, scope="user", user_id="ann"))

    # Playwright's sync API keeps an event loop running in this thread: run the engine in another
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, put()).result()


def test_reflections_and_consolidated_memory_after_consolidating_from_the_page(
    page: Any, inspector: Inspector, request: pytest.FixtureRequest
) -> None:
    add(inspector, "Ann lives in Lisbon")
    reflect(request, inspector, "Ann keeps bees on her roof.", "Ann prefers short answers.")
    login(page, inspector)
    open_tab(page, inspector, "reflections")
    expect(page.locator("#refl-count")).to_have_text("2 reflections, 2 pending")
    expect(page.get_by_role("table", name="Reflections")).to_contain_text("Ann keeps bees on her roof.")

    open_tab(page, inspector, "blobs")
    expect(page.locator("#blob-content")).to_have_text("Not consolidated yet.")
    page.get_by_role("button", name="Consolidate now").click()
    expect(page.locator("#blob-job")).to_contain_text("done")
    expect(page.locator("#blob-job .job-summary")).to_have_text("Consolidated the user memory: version 1")
    first = ok(inspector.client.get("/v1/consolidated", params={"scope": "user", "user_id": "ann"}))
    assert first["version"] == 1 and "bees" in first["content"]
    expect(page.locator("#blob-content")).to_have_text(first["content"])
    expect(page.get_by_role("table", name="Version history").locator("tbody tr")).to_have_count(1)
    pending = ok(inspector.client.get("/v1/reflections", params={"user_id": "ann", "absorbed": "false"}))
    assert pending["reflections"] == []

    reflect(request, inspector, "Ann is learning Portuguese.")
    page.get_by_role("button", name="Consolidate now").click()
    history = page.get_by_role("table", name="Version history")
    expect(history.locator("tbody tr")).to_have_count(2)
    versions = ok(inspector.client.get("/v1/consolidated/history", params={"user_id": "ann"}))["versions"]
    assert [v["version"] for v in versions] == [2, 1]
    expect(page.locator("#blob-content")).to_have_text(versions[0]["content"])
    expect(history.locator("tbody tr").first).to_contain_text("v2")
    expect(history.locator("tbody tr").first.locator("ins").first).to_be_visible()  # what v2 added
    status = page.get_by_role("table", name="Consolidation status")
    expect(status.locator("tbody tr").filter(has_text="user")).to_contain_text("2")

    open_tab(page, inspector, "reflections")
    expect(page.locator("#refl-count")).to_have_text("3 reflections, 0 pending")

    # a read-only key sees the same, with no button, and the API refuses it
    page.evaluate("sessionStorage.clear()")
    login(page, inspector, "ro")
    open_tab(page, inspector, "blobs")
    expect(page.locator("#blob-content")).to_have_text(versions[0]["content"])
    expect(page.get_by_role("button", name="Consolidate now")).to_have_count(0)
    with inspector.client_for("ro") as ro:
        refused = ro.post("/v1/consolidate", json={"scope": "user", "user_id": "ann", "wait": True})
    assert refused.status_code == 403
    assert ok(inspector.client.get("/v1/consolidated", params={"user_id": "ann"}))["version"] == 2


def test_stats_and_the_growth_chart(page: Any, inspector: Inspector, request: pytest.FixtureRequest) -> None:
    now = datetime.now(UTC)
    seeds = ((9, "Ann lives in Lisbon"), (9, "Ann likes green tea"), (4, "Ann plays the cello"), (0, "Ann reads"))
    for days, text in seeds:
        backdate(request, inspector, add(inspector, text)["id"], now - timedelta(days=days))
    gone = add(inspector, "Ann owns a red car")
    ok(inspector.client.delete(f"/v1/memories/{gone['id']}", params={"user_id": "ann"}))
    login(page, inspector, "ann")
    open_tab(page, inspector, "stats")
    stats = ok(inspector.client.get("/v1/stats", params={"user_id": "ann"}))
    assert (stats["valid_facts"], stats["facts"]) == (4, 5)
    expect(page.locator("#stat-valid")).to_have_text("4")
    expect(page.locator("#stat-facts")).to_have_text("5")
    expect(page.get_by_role("table", name="Consolidation status")).to_contain_text("user")

    growth = ok(inspector.client.get("/v1/users/ann/growth", params={"bucket": "day"}))["points"]
    assert len(growth) == 10 and growth[-1]["valid"] == 4
    chart = page.get_by_role("img", name="Memory growth per day")
    expect(chart.locator("circle.point")).to_have_count(len(growth))
    expect(chart.locator("rect.bar")).to_have_count(len(growth))
    expect(chart.locator("desc")).to_contain_text("4 valid memories at the end, 5 added in all")

    page.get_by_role("button", name="Show the data as a table").click()
    data = page.get_by_role("table", name="Memory growth data")
    expect(data.locator("tbody tr")).to_have_count(len(growth))
    expect(data.locator("tbody tr").first.locator("td")).to_have_text(
        [str(growth[0]["start"]), str(growth[0]["added"]), str(growth[0]["invalidated"]), str(growth[0]["valid"])]
    )
    expect(page.get_by_role("button", name="Hide the table")).to_have_attribute("aria-expanded", "true")

    page.get_by_label("Bucket").select_option("week")
    weeks = ok(inspector.client.get("/v1/users/ann/growth", params={"bucket": "week"}))["points"]
    expect(page.get_by_role("img", name="Memory growth per week").locator("circle.point")).to_have_count(len(weeks))


MY_TABS = ["timeline", "search", "context", "profile", "reflections", "blobs", "documents", "stats"]

#: Every form control of the panel that has no label (``<label for>``, a wrapping label or aria-label).
UNLABELLED = """() => [...document.querySelectorAll('#panel input, #panel select, #panel textarea, #panel button')]
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
  .map((el) => el.outerHTML)"""


def test_every_tab_has_a_heading_labelled_controls_and_no_write_control_for_a_read_only_key(
    page: Any, inspector: Inspector
) -> None:
    add(inspector, "Ann lives in Lisbon")
    add(inspector, "Bob plays the cello", user="bob")
    login(page, inspector, "ro")
    for tab in MY_TABS:
        open_tab(page, inspector, tab)
        expect(page.locator("#panel h2").first).to_be_visible()
        expect(page.locator("#panel .muted", has_text="Loading")).to_have_count(0)
        assert page.evaluate(UNLABELLED) == [], tab
        expect(page.get_by_role("alert"), tab).to_have_count(0)
        expect(page.get_by_role("button", name="Consolidate now"), tab).to_have_count(0)

    # a user-bound key: its own user's tabs work; another user's show the API's refusal
    page.evaluate("sessionStorage.clear()")
    login(page, inspector, "ann")
    open_tab(page, inspector, "timeline")
    expect(page.get_by_role("table", name="Timeline")).to_contain_text("Ann lives in Lisbon")
    for tab in ("timeline", "context", "stats"):
        open_tab(page, inspector, tab, user="bob")
        expect(page.get_by_role("alert").first).to_be_visible()
        expect(page.locator("#panel")).not_to_contain_text("Bob plays the cello")
    with inspector.client_for("ann") as ann:
        assert ann.get("/v1/users/bob/timeline").status_code == 403
