// Users of the tenant (GET /v1/users); a user-bound key sees only its own user.

import { get, seg } from "../api.js";
import { fill, h, link, table, time } from "../dom.js";

export async function render(main, _params, ctx) {
  const filter = h("input", { id: "user-filter", type: "search", placeholder: "user id", value: ctx.query.get("q") || "" });
  const results = h("div");
  const form = h("form", { class: "inline", role: "search" },
    h("label", { for: "user-filter" }, "Find a user", filter),
    h("button", { type: "submit" }, "Open"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const id = filter.value.trim();
    if (id) ctx.go(`#/users/${seg(id)}/facts`);
  });
  fill(main, h("h1", {}, "Users"), form, results);
  await showPage(results, ctx, null);
}

async function showPage(el, ctx, cursor) {
  const agent = ctx.query.get("agent_id");
  const page = await get("/v1/users", { agent_id: agent, cursor, limit: 100 });
  const rows = page.users.map((u) => [
    link(`#/users/${seg(u.user_id)}/facts`, u.user_id),
    String(u.valid_facts), String(u.facts), String(u.sessions), time(u.last_activity),
  ]);
  const more = page.next_cursor
    ? h("button", { type: "button", onclick: () => showPage(el, ctx, page.next_cursor) }, "Next page")
    : null;
  fill(el, table(["User", "Valid memories", "All memories", "Sessions", "Last activity"], rows, { label: "Users" }), more);
}
