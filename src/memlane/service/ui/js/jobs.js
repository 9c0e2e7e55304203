// Watch a background job (formation, consolidation, ...): GET /v1/jobs/{id} every ~500 ms while
// it is queued or running, shown in `el` as a status line (announced to screen readers) and, once
// finished, what it did. Used by the job page, the session page and the consolidation buttons.

import { get, seg } from "./api.js";
import { errorText, fill, h, link, table, time } from "./dom.js";

/** How often a queued or running job is asked about (ms). */
export const POLL_MS = 500;

const FINISHED = new Set(["done", "failed"]);

const BADGES = { queued: "badge warn", running: "badge warn", done: "badge good", failed: "badge bad" };

/** A job's status as a badge. */
export const statusBadge = (status) => h("span", { class: BADGES[status] || "badge" }, status);

/**
 * Show job `jobId` in `el` and poll it until it is done or failed; resolves to the finished job
 * (or null when `el` left the page first, or the job could not be read). Options: `onUpdate(job)`
 * after every read; `link: false` leaves out the link to the job's page; `result: false` leaves
 * out what the job did.
 */
export async function watchJob(el, jobId, { onUpdate, link: withLink = true, result = true } = {}) {
  const line = h("p", { class: "job-status", role: "status", "aria-live": "polite" }, "Job queued…");
  const body = h("div", { class: "job-result" });
  fill(el, line, body);
  for (;;) {
    let job;
    try {
      job = await get(`/v1/jobs/${seg(jobId)}`);
    } catch (err) {
      fill(body, errorText(err));
      return null;
    }
    fill(line, withLink ? link(`#/jobs/${seg(job.id)}`, `Job ${job.id}`) : `Job ${job.id}`, ": ",
      statusBadge(job.status), job.status === "failed" || job.attempts > 1 ? ` (attempt ${job.attempts}/${job.max_attempts})` : "");
    if (onUpdate) onUpdate(job);
    if (FINISHED.has(job.status)) {
      if (result) fill(body, jobResult(job));
      return job;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    if (!el.isConnected) return null;
  }
}

/** What a finished job did: its error, or its changes, reflections and consolidations. */
export function jobResult(job) {
  if (job.status === "failed") {
    return h("p", { class: "error", role: "alert" }, `Failed: ${job.last_error || "unknown error"}`);
  }
  const r = job.result || {};
  const out = [];
  if (job.kind === "consolidate") {
    // a consolidation job (POST /v1/consolidate): the blob it wrote, not formation's counts
    const blobs = Array.isArray(r.consolidated) ? r.consolidated : (r.consolidated ? [r.consolidated] : []);
    out.push(h("p", { class: "job-summary" }, blobs.length
      ? blobs.map((b) => `Consolidated the ${b.scope || ""} memory: version ${b.version}`).join(" · ")
      : `Nothing consolidated${r.skipped ? `: ${r.skipped}` : "."}`));
    for (const b of blobs) {
      const text = typeof b.consolidated_content === "string" ? b.consolidated_content : b.content;
      if (typeof text === "string") out.push(h("blockquote", { class: "card" }, text));
    }
    return out;
  }
  const changes = Array.isArray(r.changes) ? r.changes : [];
  const counts = [];
  if (typeof r.turns === "number") counts.push(`${r.turns} turns formed`);
  if (typeof r.turns === "number" || changes.length) counts.push(`${changes.length} memory changes`);
  if (Array.isArray(r.reflections)) counts.push(`${r.reflections.length} reflections`);
  if (Array.isArray(r.consolidated)) counts.push(`${r.consolidated.length} consolidations`);
  else if (r.consolidated && typeof r.consolidated === "object") {
    // a consolidation job (POST /v1/consolidate): the blob it wrote
    counts.push(`consolidated${r.consolidated.version ? ` (version ${r.consolidated.version})` : ""}`);
  }
  if (Array.isArray(r.proposed) && r.proposed.length) counts.push(`${r.proposed.length} proposals for review`);
  out.push(h("p", { class: "job-summary" }, counts.join(" · ") || "Done."));
  if (r.consolidated && !Array.isArray(r.consolidated) && typeof r.consolidated.content === "string") {
    out.push(h("blockquote", { class: "card" }, r.consolidated.content));
  }
  if (r.skipped) out.push(h("p", { class: "muted" }, `Nothing formed: ${r.skipped}`));
  if (changes.length) {
    out.push(table(["Change", "Memory", "Before"], changes.map((c) => {
      const fact = c.fact || {};
      const text = fact.content || "";
      const href = fact.user_id && fact.id
        ? `#/users/${seg(fact.user_id)}/facts/${seg(fact.id)}${fact.agent_id ? `?agent_id=${seg(fact.agent_id)}` : ""}`
        : null;
      return [c.event, href ? link(href, text, { class: "formed-memory" }) : text, c.previous || ""];
    }), { label: "Memory changes" }));
  }
  out.push(h("details", {}, h("summary", {}, "Raw result"), h("pre", {}, JSON.stringify(r, null, 2))));
  return out;
}

/** A job's fields for a detail view. */
export function jobFields(job) {
  return [
    ["id", h("code", {}, job.id)], ["kind", job.kind], ["status", statusBadge(job.status)],
    ["user", job.user_id ? link(`#/users/${seg(job.user_id)}/facts`, job.user_id) : "—"],
    ["session", job.session_id
      ? link(`#/sessions/${seg(job.app || "default")}/${seg(job.session_id)}`, `${job.app || "default"} / ${job.session_id}`)
      : "—"],
    ["attempts", `${job.attempts} of ${job.max_attempts}`],
    ["created", time(job.created_at)], ["updated", time(job.updated_at)], ["next run", time(job.next_run_at)],
    job.last_error ? ["last error", h("span", { class: "error" }, job.last_error)] : null,
  ];
}
