"""The inspector's memory tabs in a real browser (headless Chromium), on SQLite and PostgreSQL:
the timeline with its point-in-time slider, search with its debug view, the context block with
its token count under a budget, the profile, reflections and consolidated memory after a
consolidation run from the page, documents and their fragments, and the stats with the growth
chart. Each test checks what the page shows against what the API says."""

from __future__ import annotations

from typing import Any

from inspector_helpers import Inspector, login, ok
from playwright.sync_api import expect


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

    api = ok(inspector.client.post("/v1/search", json={"query": "cello", "user_id": "ann", "mode": "keyword", "debug": True}))
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
    before = ok(inspector.client.get(f"/v1/memories/{fact['id']}/history", params={"user_id": "ann"}))["history"][0]["at"]
    ok(inspector.client.patch(f"/v1/memories/{fact['id']}", params={"user_id": "ann"}, json={"text": "Ann lives in Porto"}))
    login(page, inspector, "ro")
    open_tab(page, inspector, "profile")
    expect(page.locator("#profile-text")).to_contain_text("Ann lives in Porto")
    page.get_by_label("As of").fill(before)
    page.get_by_role("button", name="Show").click()
    expect(page.locator("#profile-text")).to_contain_text("Ann lives in Lisbon")
    then = ok(inspector.client.get("/v1/profile", params={"user_id": "ann", "as_of": before}))
    assert "Lisbon" in then["profile"] and "Porto" not in then["profile"]
