// The user's profile alone (GET /v1/profile): their facts distilled into importance-ranked
// bullets, now or as memory held them at a chosen time (as_of).

import { get } from "../../api.js";
import { errorText, fill, h } from "../../dom.js";

export async function render(panel, { userId, agentId }) {
  const asOf = h("input", { id: "profile-as-of", type: "text", size: 28, placeholder: "now (ISO time)" });
  const out = h("div", { id: "profile-out" });
  const form = h("form", { class: "inline" },
    h("label", { for: "profile-as-of" }, "As of", asOf),
    h("button", { type: "submit", class: "primary" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(out, { userId, agentId, asOf: asOf.value.trim() });
  });
  fill(panel, h("h2", {}, "Profile"), form, out);
  await show(out, { userId, agentId, asOf: "" });
}

async function show(el, { userId, agentId, asOf }) {
  try {
    const { profile } = await get("/v1/profile", { user_id: userId, agent_id: agentId, as_of: asOf });
    fill(el,
      asOf ? h("p", { class: "muted" }, `As memory held it at ${asOf}.`) : null,
      profile
        ? h("pre", { id: "profile-text", "aria-label": "Profile" }, profile)
        : h("p", { class: "muted", id: "profile-text" }, "Nothing known about this user yet."));
  } catch (err) {
    fill(el, errorText(err));
  }
}
