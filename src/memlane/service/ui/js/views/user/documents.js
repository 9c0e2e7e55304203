// The user's documents (GET /v1/documents, paged): each opens its fragments in reading order
// (GET /v1/documents/{id}/fragments), the pieces search finds.

import { get, seg } from "../../api.js";
import { errorText, fill, h, link, table, time } from "../../dom.js";

export async function render(panel, { userId, agentId }) {
  const list = h("div", { id: "documents-list" });
  const fragments = h("section", { id: "fragments", "aria-live": "polite" });
  fill(panel, h("h2", {}, "Documents"), list, fragments);
  await show(list, fragments, { userId, agentId }, null);
}

const title = (doc) => (doc.metadata && doc.metadata.title) || doc.content.split("\n")[0].slice(0, 80) || doc.id;

async function show(el, fragments, { userId, agentId }, cursor) {
  const page = await get("/v1/documents", { user_id: userId, agent_id: agentId, cursor, limit: 25 });
  const suffix = agentId ? `?agent_id=${seg(agentId)}` : "";
  fill(el,
    h("p", { class: "muted" }, `${page.total ?? page.documents.length} documents`),
    table(["Document", "Source", "Fragments", "Added", ""], page.documents.map((doc) => [
      link(`#/users/${seg(userId)}/facts/${seg(doc.id)}${suffix}`, title(doc)),
      (doc.metadata && doc.metadata.source) || "—",
      String((doc.metadata && doc.metadata.fragments) ?? "—"),
      time(doc.formed_at),
      h("button", { type: "button", onclick: () => open(fragments, doc, { userId, agentId }), "aria-label": `Fragments of ${title(doc)}` }, "Fragments"),
    ]), { label: "Documents" }),
    page.next_cursor
      ? h("button", { type: "button", onclick: () => show(el, fragments, { userId, agentId }, page.next_cursor) }, "Next page")
      : null);
}

async function open(el, doc, { userId, agentId }) {
  fill(el, h("p", { class: "muted" }, "Loading…"));
  try {
    const { fragments } = await get(`/v1/documents/${seg(doc.id)}/fragments`, { user_id: userId, agent_id: agentId });
    const heading = h("h3", { id: "fragments-h", tabindex: "-1" }, `Fragments of ${title(doc)} (${fragments.length})`);
    fill(el, heading,
      h("ol", { class: "fragments" }, fragments.map((f) => h("li", {}, h("pre", { class: "fragment" }, f.content)))));
    heading.focus();
  } catch (err) {
    fill(el, errorText(err));
  }
}
