// Apps and agents (#/agents): GET /v1/agents. An agent opens the users who have memories under
// it; an app opens its sessions. A user-bound key sees those holding its user's data.

import { get, seg } from "../api.js";
import { fill, h, link, table } from "../dom.js";

export async function render(main, _params, ctx) {
  const { agents, apps } = await get("/v1/agents");
  const userLink = (agent) => (ctx.me.user_id
    ? `#/users/${seg(ctx.me.user_id)}/facts?agent_id=${seg(agent)}`
    : `#/users?agent_id=${seg(agent)}`);
  fill(main,
    h("h1", {}, "Apps & agents"),
    h("section", { "aria-labelledby": "agents-h" },
      h("h2", { id: "agents-h" }, "Agents"),
      table(["Agent", "Memories"], agents.map((a) => [link(userLink(a.agent_id), a.agent_id), String(a.facts)]),
        { label: "Agents" })),
    h("section", { "aria-labelledby": "apps-h" },
      h("h2", { id: "apps-h" }, "Apps"),
      table(["App", "Sessions"], apps.map((a) => [link(`#/sessions?app=${seg(a.app)}`, a.app), String(a.sessions)]),
        { label: "Apps" })));
}
