// One job (#/jobs/<id>): its fields and what it did, read again every ~500 ms while it is queued
// or running; a failed job has "Retry" for a key that may write (POST /v1/jobs/{id}/retry).

import { post, seg } from "../api.js";
import { errorText, fill, h, kv, link, toast } from "../dom.js";
import { jobFields, watchJob } from "../jobs.js";

export async function render(main, [jobId], ctx) {
  const fields = h("div", { id: "job-fields" });
  const actions = h("div", { class: "toolbar" });
  const status = h("section", { "aria-labelledby": "job-result-h" });
  const result = h("div", { id: "job-watch" });
  fill(status, h("h2", { id: "job-result-h" }, "Status and result"), result);
  fill(main, h("p", {}, link("#/jobs", "← Jobs")), h("h1", {}, "Job"), fields, actions, status);
  await watch();

  async function watch() {
    fill(actions);
    const job = await watchJob(result, jobId, { link: false, onUpdate: (j) => fill(fields, kv(jobFields(j))) });
    if (job && job.status === "failed" && ctx.canWrite) {
      fill(actions, h("button", { type: "button", id: "retry-job", class: "primary", onclick: retry }, "Retry"));
    }
  }

  async function retry() {
    try {
      await post(`/v1/jobs/${seg(jobId)}/retry`);
      toast("Job queued again");
      await watch();
    } catch (err) {
      actions.append(errorText(err));
    }
  }
}
