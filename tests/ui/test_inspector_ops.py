"""The inspector's operations views in a real browser, on SQLite and PostgreSQL: sessions and
their events, forming memories from a session and watching the job, a formed memory's
provenance link landing on its source turn, jobs, the review queue, export and purge, apps and
agents, tenants (admin keys), and what read-only and user-bound keys see (and that the API
refuses them)."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from inspector_helpers import Inspector, login, ok
from playwright.sync_api import expect

from memlane import AsyncMemory

LISBON = "I live in Lisbon and I love jazz music."


def seed_sessions(inspector: Inspector) -> dict[str, str]:
    """bob's session s-bob (a user turn and the agent's answer) and ann's s-ann, in app
    ``shop``; returns the user turn's event id."""
    c = inspector.client
    shop = {"app": "shop"}
    ok(c.post("/v1/sessions", json={**shop, "session_id": "s-bob", "user_ids": ["bob"]}), 201)
    ok(c.post("/v1/sessions", json={**shop, "session_id": "s-ann", "user_ids": ["ann"]}), 201)
    turn = ok(c.post("/v1/sessions/s-bob/events", params=shop, json={"content": LISBON}), 201)
    answer = {"type": "agent_response", "content": "Lisbon is lovely.", "author": "bot"}
    ok(c.post("/v1/sessions/s-bob/events", params=shop, json=answer), 201)
    ok(c.post("/v1/sessions/s-ann/events", params=shop, json={"content": "Hello there"}), 201)
    return {"turn": turn["id"]}


def tab_to(page: Any, target: Any, most: int = 40) -> None:
    """Press Tab until ``target`` has the focus (fails when it is not reachable so)."""
    target.wait_for()
    for _ in range(most):
        page.keyboard.press("Tab")
        if target.evaluate("el => el === document.activeElement"):
            return
    raise AssertionError(f"{target} is not reachable with Tab")


def memories(inspector: Inspector, user: str) -> list[str]:
    page = ok(inspector.client.get("/v1/memories", params={"user_id": user, "kind": "fact"}))
    return sorted(m["content"] for m in page["memories"])


def test_a_session_and_its_events(inspector: Inspector, page: Any) -> None:
    seed_sessions(inspector)
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/sessions?app=shop")
    sessions = page.get_by_role("table", name="Sessions")
    expect(sessions.get_by_role("row", name="s-ann ann 1")).to_be_visible()  # id, users, events
    expect(sessions.get_by_role("row", name="s-bob bob 2")).to_be_visible()
    listed = ok(inspector.client.get("/v1/sessions", params={"app": "shop"}))["sessions"]
    assert {s["id"]: s["event_count"] for s in listed} == {"s-ann": 1, "s-bob": 2}
    sessions.get_by_role("link", name="s-bob").click()
    expect(page.get_by_role("heading", name="Session s-bob")).to_be_visible()
    rows = page.get_by_role("table", name="Events").locator("tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text(LISBON)  # oldest first
    expect(rows.nth(1)).to_contain_text("Lisbon is lovely.")
    expect(rows.nth(1)).to_contain_text("agent_response")
    stored = ok(inspector.client.get("/v1/sessions/s-bob/events", params={"app": "shop"}))
    assert [e["content"] for e in stored["events"]] == [LISBON, "Lisbon is lovely."]

    page.get_by_role("button", name="End session").click()  # a final formation, watched to its end
    status = page.locator("#session-job .job-status")
    expect(status).to_contain_text("done")
    job_id = status.get_by_role("link").inner_text().removeprefix("Job ")
    assert ok(inspector.client.get(f"/v1/jobs/{job_id}"))["result"]["reason"] == "end"


def test_form_memories_watch_the_job_and_follow_provenance_to_the_source_turn(inspector: Inspector, page: Any) -> None:
    ids = seed_sessions(inspector)
    assert memories(inspector, "bob") == []
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/sessions/shop/s-bob")
    tab_to(page, page.get_by_role("button", name="Form memories now"))
    page.keyboard.press("Enter")  # reached and pressed with the keyboard alone
    status = page.locator("#session-job .job-status")
    expect(status).to_contain_text("done")
    formed = page.get_by_role("table", name="Memory changes")
    expect(formed).to_contain_text("Bob lives in Lisbon")
    # the offline model formed the memories the page shows, from the session's user turn
    assert memories(inspector, "bob") == ["Bob lives in Lisbon", "Bob loves jazz music"]
    job_id = status.get_by_role("link").inner_text().removeprefix("Job ")
    assert ok(inspector.client.get(f"/v1/jobs/{job_id}"))["status"] == "done"

    formed.get_by_role("link", name="Bob lives in Lisbon").click()
    expect(page.locator("#fact-content")).to_have_text("Bob lives in Lisbon")
    page.locator("#provenance-session").click()
    expect(page.get_by_role("heading", name="Session s-bob")).to_be_visible()
    source = page.locator(f"#event-{ids['turn']}")
    expect(source).to_have_class("highlight")
    expect(source).to_contain_text(LISBON)
    expect(source).to_be_focused()
    expect(page.locator("tr.highlight")).to_have_count(1)  # the agent's answer is not a source

    page.goto(f"{inspector.url}/ui/#/jobs?status=done")
    page.get_by_role("table", name="Jobs").get_by_role("link", name=job_id).click()
    expect(page.get_by_role("heading", name="Job", exact=True)).to_be_visible()
    expect(page.locator("#job-fields")).to_contain_text("s-bob")
    expect(page.locator("#job-watch .job-status")).to_contain_text("done")
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)  # only failed jobs


def failed_formation_job(location: str) -> str:
    """A formation job of s-bob that failed (its one attempt taken and failed here, as a worker
    whose model was down would), written through a second engine on the same store (no worker
    of its own); returns its id."""

    async def run() -> str:
        memory = AsyncMemory(location, embedder="hash", sessions="sqlite")
        await memory.open()
        try:
            payload = {"app": "shop", "session_id": "s-bob", "reason": "manual", "user_ids": ["bob"]}
            job = await memory.jobs.enqueue("form", "session\x1fshop\x1fs-bob", payload, user_id="bob", max_attempts=1)
            assert await memory.jobs.claim("test", lease_seconds=60, job_id=job.id) is not None
            assert (await memory.jobs.fail(job.id, "model unreachable", retry_in=None)).status == "failed"
            return job.id
        finally:
            await memory.close()

    with ThreadPoolExecutor(1) as pool:  # its own event loop, beside Playwright's
        return pool.submit(asyncio.run, run()).result()


def test_a_failed_job_shows_its_error_and_is_retried_from_its_page(
    inspector: Inspector, page: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed_sessions(inspector)
    location = str(tmp_path / "memlane.db") if inspector.backend == "sqlite" else request.getfixturevalue("pg_url")
    job_id = failed_formation_job(location)
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/jobs?status=failed")
    page.get_by_role("table", name="Jobs").get_by_role("link", name=job_id).click()
    expect(page.get_by_role("alert")).to_contain_text("Failed: model unreachable")
    expect(page.locator("#job-fields")).to_contain_text("1 of 1")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("#job-watch .job-status")).to_contain_text("done")
    expect(page.get_by_role("table", name="Memory changes")).to_contain_text("Bob lives in Lisbon")
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)
    assert ok(inspector.client.get(f"/v1/jobs/{job_id}"))["status"] == "done"
    assert memories(inspector, "bob") == ["Bob lives in Lisbon", "Bob loves jazz music"]
    with inspector.client_for("ro") as ro:  # the API refuses a read-only key's retry
        assert ro.post(f"/v1/jobs/{job_id}/retry").status_code == 403


def test_approve_reject_and_edit_proposals(inspector: Inspector, page: Any) -> None:
    c = inspector.client
    for text in ("Bob likes tea", "Bob likes coffee", "Bob has a cat"):
        ok(c.post("/v1/proposals", json={"text": text, "user_id": "bob", "reason": "test"}), 201)
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/users/bob/proposals")
    table = page.get_by_role("table", name="Proposals")
    expect(table.locator("tbody tr")).to_have_count(3)
    table.get_by_role("button", name='Approve "Bob likes tea"', exact=True).click()
    expect(table.locator("tbody tr")).to_have_count(2)
    table.get_by_role("button", name='Reject "Bob likes coffee"').click()
    expect(table.locator("tbody tr")).to_have_count(1)
    edit = table.get_by_role("button", name='Edit then approve "Bob has a cat"')
    edit.click()
    editor = page.get_by_label("Text to approve")
    expect(editor).to_be_focused()
    page.keyboard.press("Escape")  # closes the editor, back on its button
    expect(editor).to_have_count(0)
    expect(edit).to_be_focused()
    page.keyboard.press("Enter")
    expect(editor).to_be_focused()
    editor.fill("Bob has two cats")
    page.get_by_role("button", name="Approve edited").click()
    expect(table.locator("tbody tr")).to_have_text(["Nothing here yet."])

    assert memories(inspector, "bob") == ["Bob has two cats", "Bob likes tea"]
    done = ok(c.get("/v1/proposals", params={"user_id": "bob", "status": "all"}))["proposals"]
    assert sorted((p["text"], p["status"]) for p in done) == [
        ("Bob has two cats", "approved"),
        ("Bob likes coffee", "rejected"),
        ("Bob likes tea", "approved"),
    ]
    page.get_by_label("Status").select_option("all")
    page.get_by_role("button", name="Show").click()
    expect(table.locator("tbody tr")).to_have_count(3)
    expect(table).to_contain_text("rejected")


def test_export_downloads_json_and_purge_needs_the_typed_user_id(
    inspector: Inspector, page: Any, tmp_path: Path
) -> None:
    seed_sessions(inspector)
    ok(inspector.client.post("/v1/memories", json={"text": "Bob plays chess", "user_id": "bob"}), 201)
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/users/bob/manage")
    page.get_by_role("button", name="Export").click()
    with page.expect_download() as download:
        page.locator("#export-download").click()
    saved = tmp_path / "export.json"
    download.value.save_as(saved)
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["user_id"] == "bob"
    assert [f["content"] for f in data["facts"]] == ["Bob plays chess"]
    assert [s["id"] for s in data["sessions"]] == ["s-bob"]
    sections = page.get_by_role("table", name="Export sections")
    expect(sections.get_by_role("row", name="facts 1")).to_be_visible()

    page.get_by_role("button", name="Purge user…").click()
    dialog = page.get_by_role("dialog")
    typed = dialog.get_by_label("Type bob to confirm")
    expect(typed).to_be_focused()
    confirm = dialog.get_by_role("button", name="Purge")
    expect(confirm).to_be_disabled()
    typed.fill("bo")
    expect(confirm).to_be_disabled()
    page.keyboard.press("Escape")  # closes it: nothing purged
    expect(dialog).to_be_hidden()
    assert memories(inspector, "bob") == ["Bob plays chess"]

    page.get_by_role("button", name="Purge user…").click()
    typed.fill("bob")
    expect(confirm).to_be_enabled()
    confirm.click()
    expect(page.locator("#purge-done")).to_contain_text("bob has no memories.")
    assert ok(inspector.client.get("/v1/memories", params={"user_id": "bob"}))["total"] == 0
    assert ok(inspector.client.get("/v1/sessions", params={"app": "shop", "user_id": "bob"}))["total"] == 0
    assert ok(inspector.client.get("/v1/sessions", params={"app": "shop", "user_id": "ann"}))["total"] == 1

    # "Keep their sessions": ann's memories go, her session stays
    ok(inspector.client.post("/v1/memories", json={"text": "Ann likes tea", "user_id": "ann"}), 201)
    page.goto(f"{inspector.url}/ui/#/users/ann/manage")
    page.get_by_label("Keep their sessions").check()
    page.get_by_role("button", name="Purge user…").click()
    dialog.get_by_label("Type ann to confirm").fill("ann")
    dialog.get_by_role("button", name="Purge").click()
    expect(page.locator("#purge-done")).to_contain_text("ann has no memories.")
    assert ok(inspector.client.get("/v1/memories", params={"user_id": "ann"}))["total"] == 0
    assert ok(inspector.client.get("/v1/sessions", params={"app": "shop", "user_id": "ann"}))["total"] == 1


def test_a_read_only_key_sees_no_write_controls_and_the_api_refuses(inspector: Inspector, page: Any) -> None:
    seed_sessions(inspector)
    proposal = ok(inspector.client.post("/v1/proposals", json={"text": "Bob likes tea", "user_id": "bob"}), 201)
    login(page, inspector, "ro")
    page.goto(f"{inspector.url}/ui/#/sessions/shop/s-bob")
    expect(page.get_by_role("table", name="Events")).to_contain_text(LISBON)
    expect(page.get_by_role("button", name="Form memories now")).to_have_count(0)
    expect(page.get_by_role("button", name="End session")).to_have_count(0)
    page.goto(f"{inspector.url}/ui/#/users/bob/proposals")
    expect(page.get_by_role("table", name="Proposals")).to_contain_text("Bob likes tea")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_role("button", name="Reject")).to_have_count(0)
    page.goto(f"{inspector.url}/ui/#/users/bob/manage")
    expect(page.get_by_role("button", name="Export")).to_be_visible()
    expect(page.get_by_role("button", name="Purge user…")).to_have_count(0)

    with inspector.client_for("ro") as ro:
        assert ro.post("/v1/sessions/s-bob/form", params={"app": "shop"}).status_code == 403
        assert ro.post(f"/v1/proposals/{proposal['id']}/review", json={"approve": True}).status_code == 403
        assert ro.delete("/v1/users/bob").status_code == 403
    assert ok(inspector.client.get(f"/v1/proposals/{proposal['id']}"))["status"] == "pending"
    assert ok(inspector.client.get("/v1/jobs"))["jobs"] == []
    assert ok(inspector.client.get("/v1/sessions", params={"app": "shop", "user_id": "bob"}))["total"] == 1


def test_a_user_bound_key_sees_only_its_sessions(inspector: Inspector, page: Any) -> None:
    seed_sessions(inspector)
    login(page, inspector, "ann")
    page.goto(f"{inspector.url}/ui/#/sessions?app=shop")
    sessions = page.get_by_role("table", name="Sessions")
    expect(sessions.get_by_role("link", name="s-ann")).to_be_visible()
    expect(sessions.locator("tbody tr")).to_have_count(1)
    expect(page.get_by_label("User")).to_have_count(0)  # no user filter: it is always ann
    page.goto(f"{inspector.url}/ui/#/sessions/shop/s-bob")
    expect(page.get_by_role("alert")).to_contain_text("no session 's-bob'")
    expect(page.get_by_role("table", name="Events")).to_have_count(0)
    with inspector.client_for("ann") as ann:
        assert [s["id"] for s in ok(ann.get("/v1/sessions", params={"app": "shop"}))["sessions"]] == ["s-ann"]


def test_apps_and_agents_lead_to_sessions_and_users(inspector: Inspector, page: Any) -> None:
    seed_sessions(inspector)
    chess = {"text": "Bob plays chess", "user_id": "bob", "agent_id": "coach"}
    ok(inspector.client.post("/v1/memories", json=chess), 201)
    login(page, inspector)
    page.goto(f"{inspector.url}/ui/#/agents")
    expect(page.get_by_role("heading", name="Apps & agents")).to_be_visible()
    agents = page.get_by_role("table", name="Agents")
    expect(agents.get_by_role("row", name="coach 1")).to_be_visible()
    expect(page.get_by_role("table", name="Apps").get_by_role("row", name="shop 2")).to_be_visible()
    page.get_by_role("table", name="Apps").get_by_role("link", name="shop").click()
    expect(page.get_by_role("table", name="Sessions").locator("tbody tr")).to_have_count(2)
    page.get_by_role("navigation").get_by_role("link", name="Sessions").click()  # app "default": none
    expect(page.get_by_role("table", name="Sessions")).to_contain_text("Nothing here yet.")
    page.locator("#sessions-apps-known").get_by_role("link", name="shop (2)").click()
    expect(page.get_by_role("table", name="Sessions").locator("tbody tr")).to_have_count(2)
    page.goto(f"{inspector.url}/ui/#/agents")
    agents.get_by_role("link", name="coach").click()
    users = page.get_by_role("table", name="Users")
    expect(users.locator("tbody tr")).to_have_count(1)
    expect(users).to_contain_text("bob")
    listed = ok(inspector.client.get("/v1/agents"))
    assert {a["agent_id"]: a["facts"] for a in listed["agents"]} == {"coach": 1}


def test_an_admin_key_lists_tenants_and_switches_to_another(inspector: Inspector, page: Any) -> None:
    admin = inspector.key_store.create("default", admin=True, name="inspector admin").secret
    acme = inspector.key_store.create("acme", name="acme rw").secret
    with inspector.server.new_client(headers={"Authorization": f"Bearer {acme}"}) as client:
        ok(client.post("/v1/memories", json={"text": "Zed likes rain", "user_id": "zed"}), 201)
    ok(inspector.client.post("/v1/memories", json={"text": "Bob plays chess", "user_id": "bob"}), 201)
    inspector.keys["admin"] = admin
    login(page, inspector, "admin")
    page.get_by_role("navigation").get_by_role("link", name="Tenants").click()
    tenants = page.get_by_role("table", name="Tenants")
    expect(tenants.get_by_role("row", name="default current")).to_be_visible()
    tenants.get_by_role("button", name="Open tenant acme").click()
    expect(page.locator("#who")).to_contain_text("tenant acme")
    users = page.get_by_role("table", name="Users")
    expect(users.get_by_role("link", name="zed")).to_be_visible()
    expect(users.locator("tbody tr")).to_have_count(1)  # bob is in the default tenant
    expect(page.get_by_label("Tenant")).to_have_value("acme")

    # a key that is not an admin's has no Tenants entry, and the API refuses the list
    page.goto(f"{inspector.url}/ui/")
    page.get_by_role("button", name="Log out").click()
    login(page, inspector)
    expect(page.get_by_role("navigation").get_by_role("link", name="Tenants")).to_have_count(0)
    assert inspector.client.get("/v1/tenants").status_code == 403
