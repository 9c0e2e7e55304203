// A user's memories (GET /v1/memories): newest first, with scope, kind, version, validity,
// access count; each opens its detail page (provenance, history, edit, delete).

import { get, seg } from "../../api.js";
import { fill, h, link, table, time } from "../../dom.js";

const KINDS = ["", "fact", "message", "summary", "document", "fragment", "description", "custom"];

export async function render(panel, { userId, agentId }, ctx) {
  const kind = h("select", { id: "facts-kind" }, KINDS.map((k) => h("option", { value: k }, k || "any kind")));
  const invalid = h("input", { id: "facts-invalid", type: "checkbox" });
  const results = h("div", { id: "facts-list" });
  const form = h("form", { class: "inline" },
    h("label", { for: "facts-kind" }, "Kind", kind),
    h("label", { for: "facts-invalid" }, h("span", {}, "Include invalidated"), invalid),
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(results, { userId, agentId, kind: kind.value, invalid: invalid.checked }, null, ctx);
  });
  fill(panel, form, results);
  await show(results, { userId, agentId, kind: "", invalid: false }, null, ctx);
}

async function show(el, { userId, agentId, kind, invalid }, cursor, ctx) {
  const page = await get("/v1/memories", {
    user_id: userId, agent_id: agentId, kind, include_invalid: invalid ? "true" : null, cursor, limit: 50,
  });
  const suffix = agentId ? `?agent_id=${seg(agentId)}` : "";
  const rows = page.memories.map((m) => [
    link(`#/users/${seg(userId)}/facts/${seg(m.id)}${suffix}`, m.content.length > 140 ? `${m.content.slice(0, 140)}…` : m.content),
    m.kind, m.scope, `v${m.version}`,
    m.invalid_at ? h("span", { class: "badge bad" }, `invalid since ${time(m.invalid_at)}`) : h("span", { class: "badge good" }, "valid"),
    String(m.access_count), time(m.formed_at),
  ]);
  const next = page.next_cursor
    ? h("button", { type: "button", onclick: () => show(el, { userId, agentId, kind, invalid }, page.next_cursor, ctx) }, "Next page")
    : null;
  fill(el,
    h("p", { class: "muted" }, `${page.total} memories`),
    table(["Memory", "Kind", "Scope", "Version", "Validity", "Accessed", "Formed"], rows, {
      label: "Memories",
      rowAttrs: (i) => (page.memories[i].invalid_at ? { class: "invalid" } : {}),
    }),
    next);
}
