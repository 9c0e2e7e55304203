// One session (#/sessions/<app>/<id>?highlight=<event ids>): its participants and its events,
// oldest first. The events named in `highlight` (a memory's source turns: the provenance link of
// a memory's page lands here) are marked, and the first is scrolled into view and focused.
// A key that may write can form the session's new turns into memory now, or end the session
// (a final formation, then consolidation), and watch the job.

import { get, post, seg } from "../api.js";
import { errorText, fill, h, kv, link, table, time } from "../dom.js";
import { watchJob } from "../jobs.js";
import { paged } from "../pager.js";
import { eventText } from "./fact.js";

const PAGE = 50;

export async function render(main, [app, sessionId], ctx) {
  const session = await get(`/v1/sessions/${seg(sessionId)}`, { app });
  const marked = new Set((ctx.query.get("highlight") || "").split(",").filter(Boolean));
  const events = session.events || [];
  const jobArea = h("div", { id: "session-job" });
  const actions = h("div", { class: "toolbar" });
  if (ctx.canWrite) {
    actions.append(
      h("button", { type: "button", id: "form-session", class: "primary", onclick: () => run("form") }, "Form memories now"),
      h("button", { type: "button", id: "end-session", onclick: () => run("end") }, "End session"));
  }
  const list = h("div", { id: "session-events" });
  fill(main,
    h("p", {}, link(`#/sessions?app=${seg(app)}`, `← Sessions of ${app}`)),
    h("h1", {}, `Session ${sessionId}`),
    kv([
      ["app", app],
      ["users", session.user_ids.length
        ? session.user_ids.map((u, i) => [i ? ", " : "", link(`#/users/${seg(u)}/facts`, u)]) : "—"],
      ["agent", session.agent_id || "—"], ["channel", session.channel || "—"],
      ["created", time(session.created_at)], ["last activity", time(session.updated_at)],
      ["events", String(events.length)],
      Object.keys(session.state || {}).length ? ["state", h("pre", {}, JSON.stringify(session.state, null, 2))] : null,
    ]),
    actions, jobArea,
    h("h2", { id: "events-h" }, "Events"),
    marked.size ? h("p", { class: "muted" }, `${marked.size} source turn(s) marked.`) : null,
    list);

  const first = events.findIndex((e) => marked.has(e.id));
  paged(list, events, (slice, offset) => table(["#", "When", "Author", "Type", "Text"],
    slice.map((e, i) => [
      String(offset + i + 1), time(e.timestamp), e.author || "", e.type,
      [marked.has(e.id) ? h("span", { class: "badge warn" }, "source turn") : null, marked.has(e.id) ? " " : null, eventText(e)],
    ]), {
    label: "Events",
    rowAttrs: (i) => {
      const e = slice[i];
      return marked.has(e.id)
        ? { id: `event-${e.id}`, class: "highlight", tabindex: "-1" }
        : { id: `event-${e.id}` };
    },
  }), { size: PAGE, start: Math.max(0, first) });
  if (first >= 0) {
    const row = list.querySelector("tr.highlight");
    row.scrollIntoView({ block: "center" });
    row.focus();
  }

  async function run(what) {
    for (const button of actions.querySelectorAll("button")) button.disabled = true;
    try {
      const accepted = await post(`/v1/sessions/${seg(sessionId)}/${what}`, undefined, { app });
      await watchJob(jobArea, accepted.job_id);
    } catch (err) {
      fill(jobArea, errorText(err));
    } finally {
      for (const button of actions.querySelectorAll("button")) button.disabled = false;
    }
  }
}
