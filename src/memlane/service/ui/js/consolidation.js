// The consolidation status of a user's scopes (GET /v1/consolidation-status) as a table: each
// scope's reflection buffer against its threshold and its blob's size against its word limit.
// Used by the user's "Consolidated" and "Stats" tabs.

import { get } from "./api.js";
import { errorText, fill, h, table, time } from "./dom.js";

export async function statusTable(el, { userId, agentId, sessionId = null }) {
  try {
    const { scopes } = await get("/v1/consolidation-status", { user_id: userId, agent_id: agentId, session_id: sessionId });
    fill(el, table(["Scope", "Buffer", "Threshold", "Due", "Words", "Version", "Last consolidated"],
      Object.entries(scopes).map(([name, s]) => [
        name, String(s.buffer_size), String(s.threshold),
        s.needs_consolidation ? h("span", { class: "badge warn" }, "due") : h("span", { class: "badge" }, "no"),
        `${s.current_word_count} of ${s.word_limit}`, String(s.version), time(s.last_consolidated_at) || "never",
      ]), { label: "Consolidation status" }));
  } catch (err) {
    fill(el, errorText(err));
  }
}
