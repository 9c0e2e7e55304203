// One user's memory: a tab per view (each tab is a module under views/user/).

import { seg } from "../api.js";
import { fill, h, link, tabs } from "../dom.js";

/** The tabs, in order: [id, label]; views/user/<id>.js renders each. */
export const TABS = [
  ["facts", "Memories"],
  ["timeline", "Timeline"],
  ["search", "Search"],
  ["context", "Context"],
  ["profile", "Profile"],
  ["reflections", "Reflections"],
  ["blobs", "Consolidated"],
  ["documents", "Documents"],
  ["proposals", "Proposals"],
  ["stats", "Stats"],
  ["manage", "Export & purge"],
];

export async function render(main, [userId, tab = "facts"], ctx) {
  const known = TABS.find(([id]) => id === tab);
  const active = known ? tab : "facts";
  const agent = ctx.query.get("agent_id") || "";
  const suffix = agent ? `?agent_id=${seg(agent)}` : "";
  const agentInput = h("input", { id: "agent-id", value: agent, placeholder: "all agents", size: 14 });
  const agentForm = h("form", { class: "inline" },
    h("label", { for: "agent-id" }, "Agent", agentInput), h("button", { type: "submit" }, "Apply"));
  agentForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = agentInput.value.trim();
    ctx.go(`#/users/${seg(userId)}/${active}${value ? `?agent_id=${seg(value)}` : ""}`);
  });
  const panel = h("section", { id: "panel", role: "tabpanel", "aria-labelledby": `tab-${active}`, tabindex: "-1" });
  fill(main,
    ctx.me.user_id ? null : h("p", {}, link("#/users", "← Users")),
    h("h1", {}, `User ${userId}`),
    agentForm,
    tabs("User views", TABS.map(([id, label]) => ({ id, label, href: `#/users/${seg(userId)}/${id}${suffix}` })), active),
    panel);
  const view = await import(`./user/${active}.js`);
  await view.render(panel, { userId, agentId: agent || null }, ctx);
}
