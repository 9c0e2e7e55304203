// The login: an API key, checked with GET /v1/whoami and kept in this tab only.

import { ApiError, credentials, get } from "../api.js";
import { fill, h } from "../dom.js";
import { loggedIn } from "../app.js";

export async function render(main) {
  const input = h("input", { id: "key", type: "password", autocomplete: "off", required: true, size: 48 });
  const message = h("p", { role: "alert", class: "error", id: "login-error" });
  const form = h("form", { class: "card login" },
    h("h1", {}, "Log in"),
    h("p", {}, "Paste an API key (from ", h("code", {}, "memlane keys create"), "). It is kept in this tab only."),
    h("div", { class: "field" }, h("label", { for: "key" }, "API key"), input),
    message,
    h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, "Log in")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    credentials.clear();
    credentials.key = input.value.trim();
    try {
      await loggedIn(await get("/v1/whoami"));
    } catch (err) {
      credentials.clear();
      fill(message, err instanceof ApiError && err.status === 401 ? "That key is not valid (unknown, malformed or revoked)." : err.message);
      input.focus();
    }
  });
  fill(main, form);
  input.focus();
}
