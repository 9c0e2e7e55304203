// Consolidated memory: a scope's current blob (GET /v1/consolidated), its version history with
// the diff between consecutive versions (GET /v1/consolidated/history), the consolidation status
// of every scope (GET /v1/consolidation-status), and "Consolidate now" (POST /v1/consolidate,
// keys that may write), watched as a job until it is done.

import { get, post } from "../../api.js";
import { errorText, fill, h, kv, table, time, toast } from "../../dom.js";
import { diff } from "../../diff.js";
import { watchJob } from "../../jobs.js";
import { statusTable } from "../../consolidation.js";

export async function render(panel, { userId, agentId }, ctx) {
  const scope = h("select", { id: "blob-scope" },
    h("option", { value: "user" }, "user"),
    h("option", { value: "agent", disabled: !agentId }, agentId ? "agent" : "agent (pick an agent above)"),
    h("option", { value: "session" }, "session"));
  const session = h("input", { id: "blob-session", size: 16, placeholder: "session id" });
  const out = h("div", { id: "blob-out" });
  const status = h("div", { id: "blob-status" });
  const job = h("div", { id: "blob-job" });
  const form = h("form", { class: "inline" },
    h("label", { for: "blob-scope" }, "Scope", scope),
    h("label", { for: "blob-session" }, "Session (session scope)", session),
    h("button", { type: "submit" }, "Show"));
  const ids = () => ({
    scope: scope.value, user_id: userId, agent_id: agentId,
    session_id: scope.value === "session" ? session.value.trim() || null : null,
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(out, ids());
  });
  const consolidate = ctx.canWrite
    ? h("button", { type: "button", id: "consolidate-now", class: "primary", onclick: () => run() }, "Consolidate now")
    : null;
  fill(panel, h("h2", {}, "Consolidated memory"), form,
    consolidate ? h("div", { class: "toolbar" }, consolidate) : null, job, out,
    h("h3", {}, "Consolidation status"), status);
  await Promise.all([show(out, ids()), statusTable(status, { userId, agentId })]);

  async function run() {
    const body = { ...ids(), wait: false };
    consolidate.disabled = true;
    try {
      const accepted = await post("/v1/consolidate", body);
      const done = await watchJob(job, accepted.job_id);
      if (done && done.status === "done") toast("Consolidation done");
      await Promise.all([show(out, ids()), statusTable(status, { userId, agentId })]);
    } catch (err) {
      fill(job, errorText(err));
    } finally {
      consolidate.disabled = false;
    }
  }
}

async function show(el, query) {
  try {
    const [blob, { versions }] = await Promise.all([
      get("/v1/consolidated", query),
      get("/v1/consolidated/history", query),
    ]);
    fill(el,
      h("h3", {}, `Current blob (${query.scope})`),
      blob.content === null || blob.content === undefined
        ? h("p", { class: "muted", id: "blob-content" }, "Not consolidated yet.")
        : [
          kv([
            ["version", String(blob.version)],
            ["words", `${blob.word_count ?? blob.content.split(/\s+/).filter(Boolean).length} of ${blob.word_limit}`],
            ["last consolidated", time(blob.last_consolidated_at)],
          ]),
          h("pre", { id: "blob-content", "aria-label": "Consolidated memory" }, blob.content),
        ],
      h("h3", {}, "Version history"),
      table(["Version", "When", "Words", "Change from the version before"], versions.map((v, i) => {
        const before = versions[i + 1];
        return [`v${v.version}`, time(v.consolidated_at), String(v.word_count),
          h("div", { class: "blob-diff" },
            before ? diff(before.content, v.content) : h("span", { class: "diff" }, h("ins", {}, v.content)))];
      }), { label: "Version history" }));
  } catch (err) {
    fill(el, errorText(err));
  }
}
