// A scope's reflections (GET /v1/reflections): the user's (under the chosen agent), the agent's
// shared ones, or one session's, each marked absorbed (merged into the consolidated blob) or
// pending (still in the buffer).

import { get } from "../../api.js";
import { errorText, fill, h, table, time } from "../../dom.js";
import { paged } from "../../pager.js";

export async function render(panel, { userId, agentId }) {
  const scope = h("select", { id: "refl-scope" },
    h("option", { value: "user" }, "user"),
    h("option", { value: "agent", disabled: !agentId }, agentId ? "agent" : "agent (pick an agent above)"),
    h("option", { value: "session" }, "session"));
  const session = h("input", { id: "refl-session", size: 16, placeholder: "session id" });
  const absorbed = h("select", { id: "refl-absorbed" },
    h("option", { value: "" }, "all"), h("option", { value: "false" }, "pending"), h("option", { value: "true" }, "absorbed"));
  const out = h("div", { id: "refl-out" });
  const form = h("form", { class: "inline" },
    h("label", { for: "refl-scope" }, "Scope", scope),
    h("label", { for: "refl-session" }, "Session (session scope)", session),
    h("label", { for: "refl-absorbed" }, "Show", absorbed),
    h("button", { type: "submit" }, "Show"));
  const query = () => ({
    scope: scope.value, user_id: userId, agent_id: agentId, absorbed: absorbed.value,
    session_id: scope.value === "session" ? session.value.trim() || null : null,
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    show(out, query());
  });
  fill(panel, h("h2", {}, "Reflections"), form, out);
  await show(out, query());
}

async function show(el, query) {
  try {
    const { reflections } = await get("/v1/reflections", query);
    const pending = reflections.filter((r) => !r.absorbed).length;
    const list = h("div");
    fill(el, h("p", { class: "muted", id: "refl-count" }, `${reflections.length} reflections, ${pending} pending`), list);
    paged(list, reflections, (slice) => table(["Reflection", "Scope", "Session", "State", "Formed"], slice.map((r) => [
      r.content, r.scope, r.session_id || "—",
      r.absorbed ? h("span", { class: "badge good" }, "absorbed") : h("span", { class: "badge warn" }, "pending"),
      time(r.formed_at),
    ]), { label: "Reflections" }), { size: 50 });
  } catch (err) {
    fill(el, errorText(err));
  }
}
