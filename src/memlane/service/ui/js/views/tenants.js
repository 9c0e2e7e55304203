// Tenants (#/tenants, admin keys): GET /v1/tenants. "Open" switches the page to that tenant:
// every later call carries X-Memlane-Tenant (as the header's tenant picker does).

import { credentials, get } from "../api.js";
import { fill, h, table } from "../dom.js";

export async function render(main, _params, ctx) {
  fill(main, h("h1", {}, "Tenants"));
  if (!ctx.me.admin) {
    main.append(h("p", { role: "alert", class: "error" }, "Only an admin key lists the tenants (memlane keys create --admin)."));
    return;
  }
  const { tenants } = await get("/v1/tenants");
  main.append(
    h("p", { class: "muted" }, "Opening a tenant shows its users, sessions and jobs with this admin key."),
    table(["Tenant", "Status", "Action"], tenants.map((t) => [
      t.tenant,
      t.current ? h("span", { class: "badge good" }, "current") : "",
      t.current ? "" : h("button", {
        type: "button", class: "open-tenant", "aria-label": `Open tenant ${t.tenant}`,
        onclick: () => open(t.tenant),
      }, "Open"),
    ]), { label: "Tenants" }));

  function open(tenant) {
    credentials.tenant = tenant;
    ctx.me = null; // asked again (whoami answers the chosen tenant), and the header redrawn
    ctx.go("#/users");
  }
}
