"""The inspector's shell and its memory pages in a real browser (headless Chromium), on SQLite
and PostgreSQL: log in, find a user, read their memories, open one with its provenance and
history, edit it, delete it; a read-only key's page offers no change (and the API refuses one);
a user-bound key's page shows only its user."""

from __future__ import annotations

from typing import Any

from inspector_helpers import Inspector, login, ok
from playwright.sync_api import expect


def seed(inspector: Inspector) -> dict[str, Any]:
    c = inspector.client
    ann = ok(c.post("/v1/memories", json={"text": "Ann is allergic to peanuts", "user_id": "ann"}), 201)["memories"][0]
    ok(c.post("/v1/memories", json={"text": "Ann lives in Lisbon", "user_id": "ann"}), 201)
    ok(c.post("/v1/memories", json={"text": "Bob plays the cello", "user_id": "bob"}), 201)
    return {"ann_fact": ann}


def test_a_wrong_key_is_refused_and_the_right_one_logs_in(page: Any, inspector: Inspector) -> None:
    page.goto(f"{inspector.url}/ui/")
    page.get_by_label("API key").fill("ml_nope_nope")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("not valid")
    login(page, inspector)
    expect(page.locator("#who")).to_contain_text("tenant default")
    expect(page.get_by_role("button", name="Log out")).to_be_visible()


def test_find_a_user_read_edit_and_delete_a_memory(page: Any, inspector: Inspector) -> None:
    fact = seed(inspector)["ann_fact"]
    login(page, inspector)
    users = page.get_by_role("table", name="Users")
    expect(users).to_contain_text("ann")
    expect(users).to_contain_text("bob")
    users.get_by_role("link", name="ann").click()
    expect(page.get_by_role("heading", name="User ann")).to_be_visible()
    memories = page.get_by_role("table", name="Memories")
    expect(memories).to_contain_text("Ann lives in Lisbon")
    expect(memories).not_to_contain_text("Bob plays the cello")
    memories.get_by_role("link", name="Ann is allergic to peanuts").click()
    expect(page.locator("#fact-content")).to_have_text("Ann is allergic to peanuts")
    expect(page.get_by_role("table", name="History")).to_contain_text("ADD")

    page.get_by_role("button", name="Edit").click()
    page.get_by_label("New text").fill("Ann is allergic to tree nuts")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#fact-content")).to_have_text("Ann is allergic to tree nuts")
    history = page.get_by_role("table", name="History")
    expect(history).to_contain_text("UPDATE")
    expect(history.locator("del").first).to_have_text("peanuts")
    stored = ok(inspector.client.get(f"/v1/memories/{fact['id']}", params={"user_id": "ann"}))
    assert stored["content"] == "Ann is allergic to tree nuts" and stored["version"] == 2

    page.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete this memory?")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.get_by_text("invalid since")).to_be_visible()
    expect(page.get_by_role("button", name="Edit")).to_have_count(0)
    stored = ok(inspector.client.get(f"/v1/memories/{fact['id']}", params={"user_id": "ann"}))
    assert stored["invalid_at"] is not None
    changes = ok(inspector.client.get(f"/v1/memories/{fact['id']}/history", params={"user_id": "ann"}))["history"]
    events = [e["event"] for e in changes]
    assert events == ["ADD", "UPDATE", "DELETE"]


def test_a_read_only_key_sees_everything_and_can_change_nothing(page: Any, inspector: Inspector) -> None:
    fact = seed(inspector)["ann_fact"]
    login(page, inspector, "ro")
    expect(page.locator("#who")).to_contain_text("read-only")
    page.get_by_role("table", name="Users").get_by_role("link", name="bob").click()
    expect(page.get_by_role("table", name="Memories")).to_contain_text("Bob plays the cello")
    page.goto(f"{inspector.url}/ui/#/users/ann/facts/{fact['id']}")
    expect(page.locator("#fact-content")).to_have_text("Ann is allergic to peanuts")
    expect(page.get_by_role("button", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    with inspector.client_for("ro") as ro:
        refused = ro.patch(f"/v1/memories/{fact['id']}", params={"user_id": "ann"}, json={"text": "changed"})
        assert refused.status_code == 403
    stored = ok(inspector.client.get(f"/v1/memories/{fact['id']}", params={"user_id": "ann"}))
    assert stored["content"] == "Ann is allergic to peanuts"


def test_a_user_bound_key_sees_only_its_user(page: Any, inspector: Inspector) -> None:
    seed(inspector)
    login(page, inspector, "ann")
    expect(page.get_by_role("heading", name="User ann")).to_be_visible()
    expect(page.get_by_role("table", name="Memories")).to_contain_text("Ann lives in Lisbon")
    page.goto(f"{inspector.url}/ui/#/users")
    users = page.get_by_role("table", name="Users")
    expect(users).to_contain_text("ann")
    expect(users).not_to_contain_text("bob")
    page.goto(f"{inspector.url}/ui/#/users/bob/facts")
    expect(page.get_by_role("alert")).to_contain_text("one user only")
    expect(page.get_by_text("Bob plays the cello")).to_have_count(0)


def test_the_memory_pages_work_with_the_keyboard_alone(page: Any, inspector: Inspector) -> None:
    seed(inspector)
    page.goto(f"{inspector.url}/ui/")
    expect(page.get_by_label("API key")).to_be_focused()
    page.keyboard.type(inspector.keys["rw"])
    page.keyboard.press("Enter")
    expect(page.get_by_role("table", name="Users")).to_contain_text("ann")
    page.reload()
    expect(page.get_by_role("table", name="Users")).to_contain_text("ann")
    page.keyboard.press("Tab")  # the first stop is the skip link; it moves focus, not the route
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    expect(page).to_have_url(f"{inspector.url}/ui/#/users")
    page.get_by_role("table", name="Users").get_by_role("link", name="ann").focus()
    page.keyboard.press("Enter")
    tab = page.get_by_role("tab", name="Memories")
    expect(tab).to_have_attribute("aria-selected", "true")
    tab.focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Timeline")).to_be_focused()
    expect(page).to_have_url(f"{inspector.url}/ui/#/users/ann/timeline")
    page.keyboard.press("ArrowLeft")
    expect(page.get_by_role("tab", name="Memories")).to_have_attribute("aria-selected", "true")
    memories = page.get_by_role("table", name="Memories")
    memories.get_by_role("link", name="Ann lives in Lisbon").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#fact-content")).to_have_text("Ann lives in Lisbon")
    page.get_by_role("button", name="Delete").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_be_hidden()
    assert ok(inspector.client.get("/v1/memories", params={"user_id": "ann"}))["total"] == 2
