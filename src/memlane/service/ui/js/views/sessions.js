// Sessions of an app (#/sessions?app=&user_id=): GET /v1/sessions, newest activity first, with
// their participants and number of events; each opens the session and its events. A user-bound
// key sees only the sessions its user takes part in (the API answers only those).

import { get, seg } from "../api.js";
import { fill, h, link, table, time } from "../dom.js";
import { paged } from "../pager.js";

export async function render(main, _params, ctx) {
  const app = ctx.query.get("app") || "default";
  const user = ctx.me.user_id || ctx.query.get("user_id") || "";
  const appInput = h("input", { id: "sessions-app", value: app, list: "sessions-apps", size: 16, required: true });
  const apps = h("datalist", { id: "sessions-apps" });
  const userInput = ctx.me.user_id
    ? null
    : h("input", { id: "sessions-user", value: user, placeholder: "every user", size: 16 });
  const form = h("form", { class: "inline" },
    h("label", { for: "sessions-app" }, "App", appInput), apps,
    userInput ? h("label", { for: "sessions-user" }, "User", userInput) : null,
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const query = new URLSearchParams({ app: appInput.value.trim() || "default" });
    if (userInput && userInput.value.trim()) query.set("user_id", userInput.value.trim());
    ctx.go(`#/sessions?${query}`);
  });
  const results = h("div", { id: "sessions-list" });
  const known = h("p", { id: "sessions-apps-known", class: "muted" });
  fill(main, h("h1", {}, "Sessions"), form, known, results);
  get("/v1/agents").then(
    (dir) => {
      const listed = dir.apps || [];
      fill(apps, listed.map((a) => h("option", { value: a.app })));
      if (listed.length > 1 || (listed.length === 1 && listed[0].app !== app)) {
        fill(known, "Apps: ", listed.map((a, i) => [i ? ", " : "",
          a.app === app ? `${a.app} (${a.sessions})` : link(`#/sessions?app=${seg(a.app)}`, `${a.app} (${a.sessions})`)]));
      }
    },
    () => {}, // the app list is only a convenience: typing an app name works without it
  );

  const { sessions, total } = await get("/v1/sessions", { app, user_id: ctx.me.user_id ? null : user });
  const note = total > sessions.length
    ? h("span", { class: "muted" }, `(the newest ${sessions.length} of ${total}; filter by user to see others)`)
    : null;
  fill(results, h("p", { class: "muted" }, `${total} sessions in app ${app}${user ? ` with user ${user}` : ""}`));
  const list = h("div");
  results.append(list);
  paged(list, sessions, (slice) => table(["Session", "Users", "Events", "Agent", "Channel", "Created", "Last activity"],
    slice.map((s) => [
      link(`#/sessions/${seg(s.app)}/${seg(s.id)}`, s.id),
      s.user_ids.length ? s.user_ids.map((u, i) => [i ? ", " : "", ctx.me.user_id ? u : link(`#/users/${seg(u)}/facts`, u)]) : "—",
      s.event_count ?? "—", s.agent_id || "", s.channel || "", time(s.created_at), time(s.updated_at),
    ]), { label: "Sessions" }), { note });
}
