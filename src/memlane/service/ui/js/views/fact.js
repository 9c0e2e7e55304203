// One memory: its fields, where it came from (the source turns of its session), its history
// with the diff of each change, and (for a key that may write) edit and delete.

import { del, get, patch, seg } from "../api.js";
import { confirmAction, errorText, fill, h, kv, link, table, time, toast } from "../dom.js";
import { diff } from "../diff.js";

export async function render(main, [userId, factId], ctx) {
  const agentId = ctx.query.get("agent_id");
  const scope = { user_id: userId, agent_id: agentId };
  const back = `#/users/${seg(userId)}/facts${agentId ? `?agent_id=${seg(agentId)}` : ""}`;
  const fact = await get(`/v1/memories/${seg(factId)}`, scope);
  const body = h("div");
  fill(main, h("p", {}, link(back, `← ${userId}'s memories`)), h("h1", {}, "Memory"), body);

  const content = h("blockquote", { class: "card", id: "fact-content" }, fact.content);
  const actions = h("div", { class: "toolbar" });
  if (ctx.canWrite && !fact.invalid_at) {
    actions.append(
      h("button", { type: "button", id: "edit-fact", onclick: () => edit() }, "Edit"),
      h("button", { type: "button", id: "delete-fact", class: "danger", onclick: () => remove() }, "Delete"));
  }
  const editor = h("div");
  const provenance = h("section", { "aria-labelledby": "prov-h" });
  const history = h("section", { "aria-labelledby": "hist-h" });
  fill(body,
    content, actions, editor,
    kv([
      ["id", h("code", {}, fact.id)],
      ["kind", fact.kind], ["scope", fact.scope], ["user", fact.user_id], ["agent", fact.agent_id],
      ["author", fact.author], ["version", String(fact.version)], ["accessed", String(fact.access_count)],
      ["occurred", time(fact.occurred_at)], ["formed", time(fact.formed_at)], ["updated", time(fact.updated_at)],
      ["valid from", time(fact.valid_from)],
      ["invalid since", fact.invalid_at ? h("span", { class: "badge bad" }, time(fact.invalid_at)) : "still valid"],
      ["metadata", Object.keys(fact.metadata || {}).length ? h("pre", {}, JSON.stringify(fact.metadata, null, 2)) : "—"],
    ]),
    provenance, history);
  await Promise.all([showProvenance(provenance, fact, userId), showHistory(history, fact, scope)]);

  function edit() {
    const area = h("textarea", { id: "edit-text", "aria-label": "New text" }, fact.content);
    const save = h("button", { type: "submit", class: "primary" }, "Save");
    const form = h("form", { class: "card" }, h("label", { for: "edit-text" }, "New text"), area,
      h("div", { class: "toolbar" }, save, h("button", { type: "button", onclick: () => fill(editor) }, "Cancel")));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        await patch(`/v1/memories/${seg(fact.id)}`, { text: area.value }, scope);
        toast("Memory updated");
        ctx.refresh();
      } catch (err) {
        editor.append(errorText(err));
      }
    });
    fill(editor, form);
    area.focus();
  }

  async function remove() {
    const ok = await confirmAction({
      title: "Delete this memory?",
      body: "It is invalidated (kept in history, no longer recalled).",
      confirmLabel: "Delete",
    });
    if (!ok) return;
    try {
      await del(`/v1/memories/${seg(fact.id)}`, scope);
      toast("Memory deleted");
      ctx.refresh();
    } catch (err) {
      editor.append(errorText(err));
    }
  }
}

/** Where the memory came from: its job (for formed memories) and the source turns. */
async function showProvenance(el, fact, userId) {
  const ids = fact.source_event_ids || [];
  const origin = (fact.metadata && fact.metadata.provenance) || {};
  const jobId = origin.job || (fact.metadata && fact.metadata.job);
  const parts = [h("h2", { id: "prov-h" }, "Provenance")];
  if (!fact.session_id && !ids.length) {
    parts.push(h("p", { class: "muted" }, "Added directly (not from a session)."));
    fill(el, parts);
    return;
  }
  let app = (fact.metadata && fact.metadata.app) || "default";
  if (jobId) {
    try {
      const job = await get(`/v1/jobs/${seg(jobId)}`);
      app = job.app || (job.payload && job.payload.app) || app;
      parts.push(h("p", {}, "Formed by job ", link(`#/jobs/${seg(job.id)}`, job.id), ` (${job.status}).`));
    } catch (err) {
      parts.push(h("p", { class: "muted" }, `Formed by job ${jobId} (no longer available).`));
    }
  }
  if (fact.session_id) {
    const href = `#/sessions/${seg(app)}/${seg(fact.session_id)}${ids.length ? `?highlight=${ids.map(seg).join(",")}` : ""}`;
    parts.push(h("p", {}, "Session ", link(href, fact.session_id, { id: "provenance-session" })));
  }
  if (ids.length && fact.session_id) {
    try {
      const events = await get(`/v1/sessions/${seg(fact.session_id)}/events`, { app });
      const list = (events.events || events).filter((e) => ids.includes(e.id));
      parts.push(table(["Turn", "Author", "When"], list.map((e) => [
        h("span", { class: "source-turn" }, eventText(e)), e.author || "", time(e.timestamp),
      ]), { label: "Source turns" }));
    } catch (err) {
      parts.push(h("p", { class: "muted" }, `Source turns: ${ids.join(", ")} (${err.message})`));
    }
  } else if (ids.length) {
    parts.push(h("p", {}, `Source turns: ${ids.join(", ")}`));
  }
  fill(el, parts);
}

/** A session event's text (content parts joined). */
export function eventText(event) {
  const content = event.content;
  if (!content) return "";
  if (typeof content === "string") return content;
  if (typeof content.text === "string") return content.text;
  if (Array.isArray(content.parts)) return content.parts.map((p) => p.text || "").join(" ");
  return JSON.stringify(content);
}

async function showHistory(el, fact, scope) {
  const { history } = await get(`/v1/memories/${seg(fact.id)}/history`, scope);
  fill(el, h("h2", { id: "hist-h" }, "History"),
    table(["When", "Change", "By", "Diff"], history.map((e) => [
      time(e.at), e.event, e.actor, diff(e.old_content || "", e.new_content || ""),
    ]), { label: "History" }));
}
