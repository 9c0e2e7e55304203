// The inspector's shell: who is logged in, the navigation, and the routes (location.hash).
// Each view is a module under views/ exporting `render(main, params, ctx)`.

import { ApiError, credentials, get } from "./api.js";
import { errorText, fill, h, link, takePendingFocus } from "./dom.js";

/** Routes: a pattern over the hash path and the view module that renders it. */
const ROUTES = [
  [/^\/login$/, "login"],
  [/^\/tenants$/, "tenants"],
  [/^\/agents$/, "agents"],
  [/^\/users$/, "users"],
  [/^\/users\/([^/]+)\/facts\/([^/]+)$/, "fact"],
  [/^\/users\/([^/]+)(?:\/([^/]+))?$/, "user"],
  [/^\/sessions$/, "sessions"],
  [/^\/sessions\/([^/]+)\/([^/]+)$/, "session"],
  [/^\/jobs$/, "jobs"],
  [/^\/jobs\/([^/]+)$/, "job"],
];

/** What every view gets: the caller (GET /v1/whoami) and what it may do. */
export const ctx = {
  me: null,
  /** The hash's query (`#/users/ann/facts?agent_id=bot`). */
  query: new URLSearchParams(),
  get canWrite() { return !!this.me && !this.me.read_only; },
  go(hash) { window.location.hash = hash; },
  refresh() { route(); },
};

const main = () => document.getElementById("main");

function home() {
  if (ctx.me && ctx.me.user_id) return `#/users/${encodeURIComponent(ctx.me.user_id)}/facts`;
  return "#/users";
}

function renderNav(path) {
  const nav = document.getElementById("nav");
  const items = [];
  if (ctx.me.admin) items.push(["#/tenants", "Tenants"]);
  items.push(["#/agents", "Apps & agents"]);
  items.push(ctx.me.user_id ? [home(), "My memory"] : ["#/users", "Users"]);
  items.push(["#/sessions", "Sessions"], ["#/jobs", "Jobs"]);
  fill(nav, h("ul", {}, items.map(([href, text]) => {
    const here = `#${path}` === href || (href !== "#/" && `#${path}`.startsWith(`${href}/`));
    return h("li", {}, link(href, text, { "aria-current": here ? "page" : null }));
  })));
  nav.hidden = false;
}

async function renderHeader() {
  const who = document.getElementById("who");
  const me = ctx.me;
  const parts = [`tenant ${me.tenant}`];
  if (me.user_id) parts.push(`user ${me.user_id}`);
  if (me.read_only) parts.push("read-only");
  if (me.admin) parts.push("admin");
  if (!me.keys_configured) parts.push("no API keys (loopback)");
  fill(who, parts.join(" · "));
  document.getElementById("logout").hidden = !me.keys_configured;
  const picker = document.getElementById("tenant-picker");
  picker.hidden = !me.admin;
  if (!me.admin) return;
  const select = document.getElementById("tenant-select");
  try {
    const { tenants } = await get("/v1/tenants");
    const names = tenants.map((t) => t.tenant);
    if (!names.includes(me.tenant)) names.unshift(me.tenant);
    fill(select, names.map((name) => h("option", { value: name, selected: name === me.tenant }, name)));
  } catch (err) {
    fill(select, h("option", { value: me.tenant }, me.tenant));
  }
}

/** Ask the server who the key is; null when it needs a (valid) key. */
async function whoami() {
  try {
    return await get("/v1/whoami");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return null;
    throw err;
  }
}

/** The latest route() call: an earlier one still loading draws nothing (its address is gone). */
let routing = 0;

async function route() {
  const token = ++routing;
  const [rawPath, rawQuery] = window.location.hash.replace(/^#/, "").split("?");
  const path = rawPath || "/";
  ctx.query = new URLSearchParams(rawQuery || "");
  const el = main();
  if (!ctx.me && path !== "/login") {
    try {
      ctx.me = await whoami();
    } catch (err) {
      fill(el, errorText(err));
      return;
    }
    if (!ctx.me) {
      window.location.replace("#/login");
      return;
    }
    await renderHeader();
    if (token !== routing) return;
  }
  if (path === "/" ) {
    window.location.replace(ctx.me ? home() : "#/login");
    return;
  }
  for (const [pattern, name] of ROUTES) {
    const match = pattern.exec(path);
    if (!match) continue;
    if (ctx.me) renderNav(path);
    const params = match.slice(1).map((p) => (p === undefined ? undefined : decodeURIComponent(p)));
    try {
      const view = await import(`./views/${name}.js`);
      if (token !== routing) return;
      // Each address draws into its own box: a view still loading for an earlier address
      // draws into a box no longer on the page, never over this one.
      const box = h("div", { class: "view" });
      fill(el, box);
      await view.render(box, params, ctx);
    } catch (err) {
      if (token !== routing) return;
      if (err instanceof ApiError && err.status === 401) {
        logout();
        return;
      }
      fill(el, h("h1", {}, "Something went wrong"), errorText(err));
    }
    return;
  }
  fill(el, h("h1", {}, "Not found"), h("p", {}, "No page at this address. "), link(home(), "Go home"));
}

/** After a successful login (views/login.js). */
export async function loggedIn(me) {
  ctx.me = me;
  await renderHeader();
  window.location.hash = home();
}

export function logout() {
  credentials.clear();
  ctx.me = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("tenant-picker").hidden = true;
  document.getElementById("logout").hidden = true;
  fill(document.getElementById("who"));
  window.location.hash = "#/login";
}

document.getElementById("logout").addEventListener("click", logout);
// The skip link moves focus to the content; following its href would change the route.
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main().focus();
});
document.getElementById("tenant-select").addEventListener("change", async (event) => {
  credentials.tenant = event.target.value === ctx.me.tenant && !credentials.tenant ? null : event.target.value;
  ctx.me = null;
  await route();
  window.location.hash = home();
});
window.addEventListener("hashchange", async () => {
  const rendering = route();
  const mine = routing;
  await rendering;
  // A later address took over while this one loaded: its own handler places the focus
  // (placing it here would land on a page about to be replaced, and the next key would be lost).
  if (mine !== routing) return;
  const id = takePendingFocus();
  const target = id ? document.getElementById(id) : null;
  window.scrollTo(0, 0);
  if (target) target.focus({ preventScroll: true });
  else if (!main().contains(document.activeElement)) main().focus({ preventScroll: true });  // unless a view focused a control
});
route();
