// The real hybrid search (POST /v1/search, debug=true) and why each memory was or was not found:
// the results with their keyword and vector ranks and scores, the stage timings, every candidate
// either side brought (with its rank on each side and its place in the results), the fusion
// settings (thresholds included) and the filter.

import { get, post, seg } from "../../api.js";
import { errorText, fill, h, kv, link, table } from "../../dom.js";

const MODES = ["hybrid", "keyword", "vector"];
/** How many candidate texts the page reads (one GET each) beyond the results. */
const MAX_LOOKUPS = 60;

const dash = "—";
const num = (value, digits = 4) => (value === null || value === undefined ? dash : Number(value).toFixed(digits));
const rank = (value) => (value === null || value === undefined ? dash : String(value));

export async function render(panel, { userId, agentId }, ctx) {
  const query = h("input", { id: "search-query", type: "search", size: 40, required: true, value: ctx.query.get("q") || "" });
  const mode = h("select", { id: "search-mode" }, MODES.map((m) => h("option", { value: m }, m)));
  const topK = h("input", { id: "search-top-k", type: "number", min: 1, max: 100, value: 10, size: 4 });
  const asOf = h("input", { id: "search-as-of", type: "text", size: 24, placeholder: "now (ISO time)" });
  const results = h("div", { id: "search-results", "aria-live": "polite" });
  const form = h("form", { class: "inline", role: "search", "aria-label": "Search this user's memory" },
    h("label", { for: "search-query" }, "Query", query),
    h("label", { for: "search-mode" }, "Mode", mode),
    h("label", { for: "search-top-k" }, "Results (top k)", topK),
    h("label", { for: "search-as-of" }, "As of", asOf),
    h("button", { type: "submit", class: "primary" }, "Search"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!query.value.trim()) return;
    fill(results, h("p", { class: "muted" }, "Searching…"));
    try {
      await show(results, {
        userId, agentId, text: query.value.trim(), mode: mode.value, topK: Number(topK.value) || 10,
        asOf: asOf.value.trim() || null,
      });
    } catch (err) {
      fill(results, errorText(err));
    }
  });
  fill(panel, h("h2", {}, "Search"), form, results);
  query.focus();
}

async function show(el, { userId, agentId, text, mode, topK, asOf }) {
  const body = { query: text, user_id: userId, agent_id: agentId, mode, top_k: topK, debug: true };
  if (asOf) body.as_of = asOf;
  const { hits, debug } = await post("/v1/search", body);
  const suffix = agentId ? `?agent_id=${seg(agentId)}` : "";
  const href = (id) => `#/users/${seg(userId)}/facts/${seg(id)}${suffix}`;
  const texts = new Map(hits.map((hit) => [hit.fact.id, hit.fact.content]));
  const resultRank = new Map(hits.map((hit, i) => [hit.fact.id, i + 1]));
  const short = (s) => (s.length > 120 ? `${s.slice(0, 120)}…` : s);

  const resultRows = hits.map((hit, i) => [
    String(i + 1), link(href(hit.fact.id), short(hit.fact.content)), num(hit.score),
    rank(hit.keyword_rank), num(hit.keyword_score, 6), rank(hit.vector_rank), num(hit.vector_score),
  ]);
  const parts = [
    h("h3", {}, `Results (${hits.length})`),
    table(["#", "Memory", "Score", "Keyword rank", "Keyword score", "Vector rank", "Vector score"], resultRows,
      { label: "Search results" }),
  ];
  if (debug) {
    const candidates = candidateRows(debug);
    const unknown = [...candidates.keys()].filter((id) => !texts.has(id)).slice(0, MAX_LOOKUPS);
    const scope = { user_id: userId, agent_id: agentId, as_of: asOf };
    const found = await Promise.all(unknown.map((id) => get(`/v1/memories/${seg(id)}`, scope).catch(() => null)));
    found.forEach((fact, i) => { if (fact) texts.set(unknown[i], fact.content); });
    const timings = Object.entries(debug.timings || {});
    parts.push(
      h("h3", {}, "Why: the search's debug view"),
      h("p", {}, `Vectors used: ${debug.vectors_used === false ? "no (keyword only)" : debug.vectors_used ? "yes" : dash}`,
        debug.queries && debug.queries.length > 1 ? ` · queries: ${debug.queries.join(" | ")}` : ""),
      h("h4", {}, "Stage timings"),
      table(["Stage", "Milliseconds"], timings.map(([stage, ms]) => [stage.replace(/_ms$/, ""), num(ms, 2)]),
        { label: "Stage timings" }),
      h("h4", {}, "Candidates"),
      h("p", { class: "muted" },
        "Every memory the keyword side or the vector side brought, with its rank on each side (— : that side did not bring it) and its place in the results. A memory missing here was brought by neither side."),
      table(["Memory", "Keyword rank", "Keyword score", "Vector rank", "Vector score", "Result"],
        [...candidates.entries()].map(([id, c]) => [
          texts.has(id) ? link(href(id), short(texts.get(id))) : link(href(id), id),
          rank(c.keywordRank), num(c.keywordScore, 6), rank(c.vectorRank), num(c.vectorScore),
          resultRank.has(id) ? `#${resultRank.get(id)}` : notReturned(c, debug.config || {}),
        ]), { label: "Candidates" }),
      h("h4", {}, "Fusion settings"),
      kv(Object.entries(debug.config || {}).map(([k, v]) => [k, v === null ? dash : String(v)])),
      h("h4", {}, "Filter"),
      h("pre", {}, JSON.stringify(debug.filter ?? null, null, 2)));
  }
  fill(el, parts);
}

/** Why a candidate is not in the results, as far as the debug view tells. */
function notReturned(c, config) {
  const floor = config.min_vector_score;
  if (c.keywordRank === null && c.vectorScore !== null && typeof floor === "number" && c.vectorScore < floor) {
    return `not returned: vector score under min_vector_score (${floor})`;
  }
  return "not returned";
}

/** Each candidate (by memory id): its best rank and score on the keyword and vector sides,
 * over the queries; in order of first appearance (keyword side first). */
function candidateRows(debug) {
  const out = new Map();
  const note = (lists, side) => {
    for (const list of lists || []) {
      list.forEach(([id, score], i) => {
        const row = out.get(id) || { keywordRank: null, keywordScore: null, vectorRank: null, vectorScore: null };
        const r = `${side}Rank`;
        const s = `${side}Score`;
        if (row[r] === null || i + 1 < row[r]) row[r] = i + 1;
        if (row[s] === null || score > row[s]) row[s] = score;
        out.set(id, row);
      });
    }
  };
  note(debug.keyword, "keyword");
  note(debug.vector, "vector");
  return out;
}
