// Export & purge (a user's tab). Export: GET /v1/users/{u}/export, offered as a JSON file to
// download, with the size of each section. Purge (keys that may write): DELETE /v1/users/{u}
// after the user's id is typed in the confirmation; options keep the agent's memories formed from
// the user's words (shared=keep) and keep the user's sessions (sessions=false).

import { del, get, seg } from "../../api.js";
import { confirmAction, errorText, fill, h, table } from "../../dom.js";

let lastUrl = null; // the previous export's Blob URL, released when another is made

export async function render(panel, { userId }, ctx) {
  const exportOut = h("div", { id: "export-result" });
  const exportButton = h("button", { type: "button", id: "export-user", onclick: () => exportUser() }, "Export");
  fill(panel,
    h("section", { "aria-labelledby": "export-h", class: "card" },
      h("h2", { id: "export-h" }, "Export"),
      h("p", {}, `Everything memlane holds about ${userId}, as one JSON file.`),
      exportButton, exportOut));
  if (ctx.canWrite) panel.append(purgeSection());

  async function exportUser() {
    exportButton.disabled = true;
    fill(exportOut, h("p", { class: "muted", role: "status" }, "Exporting…"));
    try {
      const data = await get(`/v1/users/${seg(userId)}/export`);
      const text = JSON.stringify(data, null, 2);
      if (lastUrl) URL.revokeObjectURL(lastUrl);
      lastUrl = URL.createObjectURL(new Blob([text], { type: "application/json" }));
      const name = `memlane-export-${userId.replace(/[^A-Za-z0-9._-]/g, "_")}.json`;
      const sections = Object.entries(data).filter(([, v]) => Array.isArray(v));
      fill(exportOut,
        h("p", {}, h("a", { href: lastUrl, download: name, id: "export-download", class: "button" }, `Download ${name}`),
          ` (${text.length.toLocaleString()} bytes)`),
        table(["Section", "Items", "Bytes"], sections.map(([k, v]) => [k, String(v.length), JSON.stringify(v).length.toLocaleString()]),
          { label: "Export sections" }));
      exportOut.querySelector("#export-download").focus();
    } catch (err) {
      fill(exportOut, errorText(err));
    } finally {
      exportButton.disabled = false;
    }
  }

  function purgeSection() {
    const keepShared = h("input", { type: "checkbox", id: "purge-keep-shared" });
    const keepSessions = h("input", { type: "checkbox", id: "purge-keep-sessions" });
    const out = h("div", { id: "purge-result" });
    const button = h("button", { type: "button", id: "purge-user", class: "danger", onclick: () => purge() }, "Purge user…");
    return h("section", { "aria-labelledby": "purge-h", class: "card" },
      h("h2", { id: "purge-h" }, "Purge"),
      h("p", {}, `Erase ${userId}'s memories, reflections, consolidated memory, proposals, jobs and sessions for good (no history is kept).`),
      h("div", { class: "field" }, h("label", { for: "purge-keep-shared" }, keepShared,
        " Keep the agents' shared memories formed from their words")),
      h("div", { class: "field" }, h("label", { for: "purge-keep-sessions" }, keepSessions, " Keep their sessions")),
      h("div", { class: "toolbar" }, button), out);

    async function purge() {
      const ok = await confirmAction({
        title: `Purge user ${userId}?`,
        body: "This cannot be undone.",
        confirmLabel: "Purge",
        typed: userId,
      });
      if (!ok) {
        button.focus();
        return;
      }
      try {
        const done = await del(`/v1/users/${seg(userId)}`, {
          shared: keepShared.checked ? "keep" : "erase", sessions: keepSessions.checked ? "false" : "true",
        });
        const left = await get("/v1/memories", { user_id: userId, limit: 1 });
        fill(out, h("p", { role: "status", id: "purge-done" },
          `Purged ${done.user_id}: ${done.removed} records removed. `,
          left.total === 0 ? `${userId} has no memories.` : `${left.total} memories remain.`));
      } catch (err) {
        fill(out, errorText(err));
      }
      button.focus();
    }
  }
}
