// Counts for the user (GET /v1/stats), the consolidation status of their scopes, and a small
// chart of their memory's growth (GET /v1/users/{u}/growth): valid memories at the end of each
// bucket (a line, one point per bucket) over the memories added in it (bars). The chart is drawn
// here as SVG (no library); its text alternative is the SVG's title/description and a data table
// behind a toggle.

import { get, seg } from "../../api.js";
import { errorText, fill, h, kv, table } from "../../dom.js";
import { statusTable } from "../../consolidation.js";

const SVG = "http://www.w3.org/2000/svg";
const BUCKETS = ["day", "week", "month"];
const W = 640;
const H = 240;
const PAD = { left: 44, right: 16, top: 26, bottom: 30 };

/** An SVG element (dom.js's h() makes HTML ones). */
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export async function render(panel, { userId, agentId }, ctx) {
  const counts = h("div", { id: "stats-counts" });
  const status = h("div", { id: "stats-status" });
  const bucket = h("select", { id: "growth-bucket" }, BUCKETS.map((b) => h("option", { value: b, selected: b === (ctx.query.get("bucket") || "day") }, b)));
  const chart = h("div", { id: "growth", class: "chart" });
  bucket.addEventListener("change", () => growth(chart, { userId, agentId, bucket: bucket.value }));
  fill(panel,
    h("h2", {}, "Stats"), counts,
    h("h3", {}, "Consolidation status"), status,
    h("h3", {}, "Memory growth"),
    h("div", { class: "inline toolbar" }, h("label", { for: "growth-bucket" }, "Bucket"), bucket),
    chart);
  await Promise.all([
    showCounts(counts, { userId, agentId }),
    statusTable(status, { userId, agentId }),
    growth(chart, { userId, agentId, bucket: bucket.value }),
  ]);
}

async function showCounts(el, { userId, agentId }) {
  try {
    const st = await get("/v1/stats", { user_id: userId, agent_id: agentId });
    fill(el, kv([
      ["valid memories", h("span", { id: "stat-valid" }, String(st.valid_facts))],
      ["all memories (with invalidated)", h("span", { id: "stat-facts" }, String(st.facts))],
      ["partitions", String(st.partitions)],
      ["reflections", String(st.reflections)],
      ["consolidated blobs", String(st.consolidated)],
      ["sessions", String(st.sessions)],
      ["events", String(st.events)],
      ["embedder", st.embedder ? `${st.embedder}${st.dim ? ` (${st.dim} dims)` : ""}` : "none"],
    ]));
  } catch (err) {
    fill(el, errorText(err));
  }
}

async function growth(el, { userId, agentId, bucket }) {
  try {
    const { points } = await get(`/v1/users/${seg(userId)}/growth`, { bucket, agent_id: agentId });
    const data = h("div", { id: "growth-data", hidden: true },
      table(["Start", "Added", "Invalidated", "Valid at the end"], points.map((p) => [
        p.start, String(p.added), String(p.invalidated), String(p.valid),
      ]), { label: "Memory growth data" }));
    const toggle = h("button", { type: "button", id: "growth-toggle", "aria-expanded": "false", "aria-controls": "growth-data" }, "Show the data as a table");
    toggle.addEventListener("click", () => {
      data.hidden = !data.hidden;
      toggle.setAttribute("aria-expanded", String(!data.hidden));
      fill(toggle, data.hidden ? "Show the data as a table" : "Hide the table");
    });
    fill(el, points.length ? drawChart(points, bucket) : h("p", { class: "muted" }, "No memories yet."),
      h("div", { class: "toolbar" }, toggle), data);
  } catch (err) {
    fill(el, errorText(err));
  }
}

/** The chart: bars (added per bucket) and a line with one point per bucket (valid at its end). */
function drawChart(points, bucket) {
  const max = Math.max(1, ...points.map((p) => Math.max(p.valid, p.added)));
  const innerW = W - PAD.left - PAD.right;
  const innerH = H - PAD.top - PAD.bottom;
  const step = innerW / points.length;
  const x = (i) => PAD.left + step * (i + 0.5);
  const y = (v) => PAD.top + innerH - (v / max) * innerH;
  const last = points[points.length - 1];
  const summary = `${points.length} ${bucket}s from ${points[0].start} to ${last.start}: `
    + `${last.valid} valid memories at the end, ${points.reduce((n, p) => n + p.added, 0)} added in all.`;
  const labelEvery = Math.max(1, Math.ceil(points.length / 8));
  return s("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-labelledby": "growth-title growth-desc", id: "growth-svg" },
    s("title", { id: "growth-title" }, `Memory growth per ${bucket}`),
    s("desc", { id: "growth-desc" }, summary),
    // axes and the top value
    s("line", { class: "axis", x1: PAD.left, y1: PAD.top + innerH, x2: W - PAD.right, y2: PAD.top + innerH }),
    s("line", { class: "axis", x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: PAD.top + innerH }),
    s("text", { class: "tick", x: PAD.left - 6, y: PAD.top + 4, "text-anchor": "end" }, String(max)),
    s("text", { class: "tick", x: PAD.left - 6, y: PAD.top + innerH, "text-anchor": "end" }, "0"),
    points.map((p, i) => s("rect", {
      class: "bar", x: x(i) - step * 0.3, width: step * 0.6, y: y(p.added), height: Math.max(0, PAD.top + innerH - y(p.added)),
    }, s("title", {}, `${p.start}: ${p.added} added, ${p.invalidated} invalidated`))),
    s("polyline", { class: "line", points: points.map((p, i) => `${x(i)},${y(p.valid)}`).join(" ") }),
    points.map((p, i) => s("circle", { class: "point", cx: x(i), cy: y(p.valid), r: 4 },
      s("title", {}, `${p.start}: ${p.valid} valid`))),
    points.map((p, i) => (i % labelEvery === 0
      ? s("text", { class: "tick", x: x(i), y: H - PAD.bottom + 16, "text-anchor": "middle" }, p.start.slice(0, 10))
      : null)),
    s("g", { class: "legend" },
      s("rect", { class: "key-bar", x: W - 200, y: 4, width: 10, height: 10 }),
      s("text", { class: "tick", x: W - 186, y: 13 }, "added"),
      s("circle", { class: "key-point", cx: W - 120, cy: 9, r: 4 }),
      s("text", { class: "tick", x: W - 112, y: 13 }, "valid at the end")));
}
