// A user's proposals (the review queue, docs/review.md): GET /v1/proposals?user_id=&status=.
// A key that may write approves, rejects, or edits then approves a pending one
// (POST /v1/proposals/{id}/review); a read-only key sees the queue and no buttons.

import { get, post, seg } from "../../api.js";
import { errorText, fill, h, link, table, time, toast } from "../../dom.js";
import { paged } from "../../pager.js";

const STATUSES = ["pending", "approved", "rejected", "stale", "all"];
const BADGES = { pending: "badge warn", approved: "badge good", rejected: "badge bad", stale: "badge bad" };

export async function render(panel, { userId, agentId }, ctx) {
  const status = h("select", { id: "proposals-status" }, STATUSES.map((s) => h("option", { value: s }, s)));
  const results = h("div", { id: "proposals-list" });
  const form = h("form", { class: "inline" },
    h("label", { for: "proposals-status" }, "Status", status), h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show();
  });
  fill(panel, h("h2", {}, "Proposals"), form, results);
  await show();

  async function show() {
    let proposals;
    try {
      ({ proposals } = await get("/v1/proposals", { user_id: userId, agent_id: agentId, status: status.value }));
    } catch (err) {
      fill(results, errorText(err));
      return;
    }
    const suffix = agentId ? `?agent_id=${seg(agentId)}` : "";
    const factLink = (id) => link(`#/users/${seg(userId)}/facts/${seg(id)}${suffix}`, id);
    paged(results, proposals, (slice) => table(["Change", "Text", "Reason", "Scope", "Proposed", "Status", ""],
      slice.map((p) => [
        [p.action, p.target_id ? [" of ", factLink(p.target_id)] : null],
        h("span", { class: "proposal-text" }, p.text || ""),
        p.reason || "", p.scope, time(p.created_at),
        [h("span", { class: BADGES[p.status] || "badge" }, p.status),
          p.result_id ? [" → ", factLink(p.result_id)] : null,
          p.reviewer ? h("div", { class: "muted" }, `by ${p.reviewer} ${time(p.reviewed_at)}`) : null],
        p.status === "pending" && ctx.canWrite ? actions(p) : "",
      ]), { label: "Proposals" }));
  }

  function actions(p) {
    const box = h("div", { class: "toolbar" });
    const what = p.text ? `"${p.text.slice(0, 60)}"` : p.action;
    const decide = async (approve, edit) => {
      try {
        const done = await post(`/v1/proposals/${seg(p.id)}/review`, edit === undefined ? { approve } : { approve, edit });
        toast(`Proposal ${done.status}`);
        await show();
      } catch (err) {
        box.append(errorText(err));
      }
    };
    const editButton = h("button", { type: "button", "aria-label": `Edit then approve ${what}`, onclick: () => {
      const id = `edit-${p.id}`;
      document.getElementById(id)?.closest("form")?.remove(); // one editor per proposal
      const area = h("textarea", { id }, p.text || "");
      const close = () => { editor.remove(); editButton.focus(); };
      const editor = h("form", { class: "card" }, h("label", { for: id }, "Text to approve"), area,
        h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Approve edited"),
          h("button", { type: "button", onclick: close }, "Cancel")));
      editor.addEventListener("submit", (event) => {
        event.preventDefault();
        decide(true, area.value);
      });
      editor.addEventListener("keydown", (event) => { if (event.key === "Escape") close(); });
      box.after(editor);
      area.focus();
    } }, "Edit…");
    fill(box,
      h("button", { type: "button", class: "primary", "aria-label": `Approve ${what}`, onclick: () => decide(true) }, "Approve"),
      h("button", { type: "button", "aria-label": `Reject ${what}`, onclick: () => decide(false) }, "Reject"),
      editButton);
    return box;
  }
}
