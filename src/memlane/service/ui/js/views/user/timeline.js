// The user's memory over time: every change (GET /v1/users/{u}/timeline: formed, updated,
// deleted ...) newest first with its word diff, and beside it a point-in-time slider ("as of"):
// the user's memories as memory held them at the chosen moment (GET /v1/memories?as_of=,
// docs/temporal.md). The slider's stops are the loaded changes' times (oldest to newest) and
// "now"; the arrow keys move it; a time can also be typed.

import { get, seg } from "../../api.js";
import { errorText, fill, h, link, table, time } from "../../dom.js";
import { diff } from "../../diff.js";

const PAGE = 50; // changes per page (the address may ask for another: ?page_size=)
const BADGES = { ADD: "good", UPDATE: "warn", DELETE: "bad" };

export async function render(panel, { userId, agentId }, ctx) {
  const pageSize = Math.min(Math.max(Number(ctx.query.get("page_size")) || PAGE, 1), 500);
  const suffix = agentId ? `?agent_id=${seg(agentId)}` : "";
  const events = [];
  let nextBefore = null;
  let stops = []; // distinct change times, oldest first (the API's strings, full precision)
  let chosen = null; // the as_of shown (null: now)

  const list = h("div", { id: "timeline-list" });
  const more = h("div");
  const slider = h("input", {
    id: "asof-range", type: "range", min: 0, max: 0, step: 1, value: 0, "aria-describedby": "asof-label",
  });
  const typed = h("input", { id: "asof-time", type: "text", size: 30, placeholder: "2026-01-31T12:00:00Z" });
  const label = h("output", { id: "asof-label", for: "asof-range" }, "now");
  const snapshot = h("div", { id: "asof-memories", "aria-live": "polite" });
  const typedForm = h("form", { class: "inline" },
    h("label", { for: "asof-time" }, "Or a time (ISO 8601)", typed),
    h("button", { type: "submit" }, "Show then"),
    h("button", { type: "button", onclick: () => choose(stops.length) }, "Now"));
  typedForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = typed.value.trim();
    if (!value) return;
    const at = Date.parse(value);
    // the slider goes to the last change at or before the typed time (the typed time is what is shown)
    if (!Number.isNaN(at)) {
      let i = -1;
      stops.forEach((s, j) => { if (Date.parse(s) <= at) i = j; });
      slider.value = String(Math.max(i, 0));
    }
    showAsOf(value);
  });
  let timer = null;
  slider.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => choose(Number(slider.value)), 120);
  });

  fill(panel,
    h("div", { class: "split" },
      h("section", { "aria-labelledby": "timeline-h" }, h("h2", { id: "timeline-h" }, "Timeline"), list, more),
      h("section", { "aria-labelledby": "asof-h", class: "asof" },
        h("h2", { id: "asof-h" }, "Memory as of"),
        h("div", { class: "field" }, h("label", { for: "asof-range" }, "Point in time (arrows move it)"), slider),
        h("p", {}, "Showing: ", label),
        typedForm,
        snapshot)));

  await loadMore();
  choose(stops.length);

  async function loadMore() {
    try {
      const page = await get(`/v1/users/${seg(userId)}/timeline`, { agent_id: agentId, limit: pageSize, before: nextBefore });
      events.push(...page.events);
      nextBefore = page.next_before;
    } catch (err) {
      fill(list, errorText(err));
      return;
    }
    // oldest first; within one millisecond (Date's precision) the ISO strings' microseconds decide
    stops = [...new Set(events.map((e) => e.at))].sort((a, b) => Date.parse(a) - Date.parse(b) || (a < b ? -1 : a > b ? 1 : 0));
    slider.max = String(stops.length);
    slider.value = String(chosen === null ? stops.length : Math.max(stops.indexOf(chosen), 0));
    renderList();
  }

  function renderList() {
    fill(list, table(["When", "Change", "Memory", "Diff", "By", ""], events.map((e) => [
      time(e.at),
      h("span", { class: `badge ${BADGES[e.event] || ""}` }, e.event),
      link(`#/users/${seg(userId)}/facts/${seg(e.fact_id)}${suffix}`, e.kind ? `${e.kind} ${e.fact_id.slice(0, 8)}` : e.fact_id.slice(0, 8)),
      diff(e.old_content || "", e.new_content || ""),
      e.actor || "",
      h("button", { type: "button", class: "link", onclick: () => choose(stops.indexOf(e.at)), "aria-label": `Show memory as of ${time(e.at)}` }, "as of"),
    ]), { label: "Timeline" }));
    fill(more, nextBefore
      ? h("button", { type: "button", id: "timeline-next", onclick: () => loadMore() }, "Next page")
      : (events.length ? h("p", { class: "muted" }, "The first change is shown: nothing older.") : null));
  }

  function choose(i) {
    slider.value = String(i);
    showAsOf(i >= stops.length ? null : stops[i]);
  }

  async function showAsOf(at, cursor = null) {
    chosen = at;
    const text = at ? time(at) : "now";
    fill(label, text);
    slider.setAttribute("aria-valuetext", text);
    typed.value = at || "";
    try {
      const page = await get("/v1/memories", { user_id: userId, agent_id: agentId, as_of: at, limit: 100, cursor });
      if (chosen !== at) return; // a later move won
      snapshot.dataset.asOf = at || "now";
      fill(snapshot,
        h("p", { id: "asof-count" }, `${page.total} memories ${at ? `as of ${text}` : "now"}`),
        page.memories.length
          ? h("ul", { class: "asof-list" }, page.memories.map((m) => h("li", {},
            link(`#/users/${seg(userId)}/facts/${seg(m.id)}${suffix}`, m.content), " ",
            h("span", { class: "badge" }, `v${m.version}`))))
          : h("p", { class: "muted" }, "No memories then."),
        page.next_cursor
          ? h("button", { type: "button", onclick: () => showAsOf(at, page.next_cursor) }, "Next page of memories")
          : null);
    } catch (err) {
      fill(snapshot, errorText(err));
    }
  }
}
