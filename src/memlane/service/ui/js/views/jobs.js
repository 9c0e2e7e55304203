// Background jobs (#/jobs?status=): newest first, filtered by status; each opens its page.

import { get, seg } from "../api.js";
import { fill, h, link, table, time } from "../dom.js";
import { statusBadge } from "../jobs.js";
import { paged } from "../pager.js";

const STATUSES = ["", "queued", "running", "done", "failed"];

export async function render(main, _params, ctx) {
  const current = ctx.query.get("status") || "";
  const select = h("select", { id: "job-status" },
    STATUSES.map((s) => h("option", { value: s, selected: s === current }, s || "any status")));
  const form = h("form", { class: "inline" },
    h("label", { for: "job-status" }, "Status", select), h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ctx.go(`#/jobs${select.value ? `?status=${seg(select.value)}` : ""}`);
  });
  const results = h("div", { id: "jobs-list" });
  fill(main, h("h1", {}, "Jobs"), form, results);
  // The API answers the newest jobs up to its page size (no cursor): shown a page at a time.
  const { jobs } = await get("/v1/jobs", { status: current });
  paged(results, jobs, (slice) => table(["Job", "Kind", "Status", "User", "Session", "Attempts", "Updated"],
    slice.map((j) => [
      link(`#/jobs/${seg(j.id)}`, j.id), j.kind, statusBadge(j.status), j.user_id || "",
      j.session_id ? link(`#/sessions/${seg(j.app || "default")}/${seg(j.session_id)}`, j.session_id) : "",
      `${j.attempts}/${j.max_attempts}`, time(j.updated_at),
    ]), { label: "Jobs" }));
}
