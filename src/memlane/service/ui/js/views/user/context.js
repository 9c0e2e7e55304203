// The assembled context exactly as the agent receives it (GET /v1/context): the <MemoryContext>
// block, its token count (by the counter the budget cut uses) under a chosen budget, and the
// profile (GET /v1/profile) it starts from.

import { get } from "../../api.js";
import { errorText, fill, h } from "../../dom.js";

export async function render(panel, { userId, agentId }, ctx) {
  const budget = h("input", {
    id: "context-budget", type: "number", min: 1, step: 1, size: 8, placeholder: "no limit",
    value: ctx.query.get("budget_tokens") || "",
  });
  const asOf = h("input", { id: "context-as-of", type: "text", size: 24, placeholder: "now (ISO time)" });
  const out = h("div", { id: "context-out" });
  const form = h("form", { class: "inline" },
    h("label", { for: "context-budget" }, "Token budget", budget),
    h("label", { for: "context-as-of" }, "As of", asOf),
    h("button", { type: "submit", class: "primary" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(out, { userId, agentId, budget: budget.value.trim(), asOf: asOf.value.trim() });
  });
  fill(panel, h("h2", {}, "Context"),
    h("p", { class: "muted" }, "The block an agent puts in its prompt for this user (and agent), as it receives it."),
    form, out);
  await show(out, { userId, agentId, budget: budget.value.trim(), asOf: "" });
}

async function show(el, { userId, agentId, budget, asOf }) {
  fill(el, h("p", { class: "muted" }, "Loading…"));
  try {
    const [block, profile] = await Promise.all([
      get("/v1/context", { user_id: userId, agent_id: agentId, budget_tokens: budget, as_of: asOf }),
      get("/v1/profile", { user_id: userId, agent_id: agentId, as_of: asOf }),
    ]);
    const tokens = typeof block.tokens === "number" ? String(block.tokens) : "—";
    const limit = block.budget_tokens ?? (budget ? Number(budget) : null);
    fill(el,
      h("p", { id: "context-size" },
        h("strong", { id: "context-tokens" }, tokens), " tokens",
        limit ? ` (budget ${limit})` : " (no budget)"),
      h("pre", { id: "context-block", "aria-label": "Memory context block" }, block.context),
      h("h3", {}, "Profile"),
      profile.profile
        ? h("pre", { id: "context-profile", "aria-label": "Profile" }, profile.profile)
        : h("p", { class: "muted", id: "context-profile" }, "Nothing known about this user yet."));
  } catch (err) {
    fill(el, errorText(err));
  }
}
