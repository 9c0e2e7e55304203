// Small DOM helpers shared by the views: build elements, format values, tell the user things.

/** `h("button", {class: "primary", onclick}, "Save")`: an element; null/false children are skipped. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace `el`'s content with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A link inside the page: `link("#/users/ann/facts", "ann")`. */
export const link = (href, text, attrs = {}) => h("a", { href, ...attrs }, text);

/** "2026-11-27 14:03:12" in the browser's time zone (empty for null). */
export function time(value) {
  if (!value) return "";
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return String(value);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A table: `table(["Name", "Count"], rows.map((r) => [r.name, r.count]), {label: "Users"})`. */
export function table(headers, rows, { label, rowAttrs } = {}) {
  return h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, headers.map((text) => h("th", { scope: "col" }, text)))),
    h("tbody", {}, rows.length
      ? rows.map((cells, i) => h("tr", rowAttrs ? rowAttrs(i) : {}, cells.map((c) => h("td", {}, c))))
      : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "Nothing here yet."))));
}

/** A definition list of label/value pairs. */
export function kv(pairs) {
  const shown = (v) => (v === null || v === undefined || v === "" ? h("span", { class: "muted" }, "—") : v);
  return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, shown(v))]));
}

/** A small message that disappears after a few seconds (announced to screen readers). */
export function toast(message, { error = false } = {}) {
  const box = document.getElementById("toasts");
  const el = h("div", { class: error ? "toast error" : "toast" }, message);
  box.append(el);
  setTimeout(() => el.remove(), error ? 8000 : 4000);
}

/** An error as a paragraph (API errors show their message). */
export const errorText = (err) => h("p", { class: "error", role: "alert" }, err && err.message ? err.message : String(err));

/**
 * Ask before a change. `confirmAction({title, body, confirmLabel, typed})` resolves to true when the
 * user confirms; with `typed`, the confirm button stays disabled until exactly that text is typed.
 */
export function confirmAction({ title, body, confirmLabel = "Confirm", typed = null, danger = true }) {
  const dialog = document.getElementById("dialog");
  return new Promise((resolve) => {
    const input = typed
      ? h("input", { id: "confirm-typed", autocomplete: "off", "aria-describedby": "confirm-hint" })
      : null;
    const ok = h("button", { type: "submit", class: danger ? "danger" : "primary", disabled: !!typed }, confirmLabel);
    const cancel = h("button", { type: "button", onclick: () => dialog.close("cancel") }, "Cancel");
    if (input) input.addEventListener("input", () => { ok.disabled = input.value !== typed; });
    const form = h("form", { method: "dialog" },
      h("h2", { id: "dialog-title" }, title),
      body ? h("p", {}, body) : null,
      input ? [h("label", { for: "confirm-typed", id: "confirm-hint" }, `Type ${typed} to confirm`), input] : null,
      h("div", { class: "toolbar" }, ok, cancel));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (!ok.disabled) dialog.close("ok");
    });
    fill(dialog, form);
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    (input || ok).focus();
  });
}

let pendingFocus = null;

/** Focus the element with this id once the next route has rendered (default: the content). */
export function focusAfterRoute(id) { pendingFocus = id; }

/** The id set by focusAfterRoute, once. */
export function takePendingFocus() {
  const id = pendingFocus;
  pendingFocus = null;
  return id;
}

/**
 * Tabs with the WAI-ARIA keyboard pattern (arrows, Home, End): `tabs(label, items, active)` where
 * items are `{id, label, href}`; the panel is the caller's (id `panel`).
 */
export function tabs(label, items, active) {
  const list = h("div", { role: "tablist", "aria-label": label, class: "tabs" });
  for (const item of items) {
    const selected = item.id === active;
    list.append(h("a", {
      role: "tab", id: `tab-${item.id}`, href: item.href, "aria-selected": selected ? "true" : "false",
      "aria-controls": "panel", tabindex: selected ? "0" : "-1", class: "button",
    }, item.label));
  }
  list.addEventListener("keydown", (event) => {
    const all = [...list.querySelectorAll('[role="tab"]')];
    const i = all.indexOf(document.activeElement);
    if (i < 0) return;
    const next = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: all.length - 1 }[event.key];
    if (next === undefined) return;
    event.preventDefault();
    const target = all[(next + all.length) % all.length];
    focusAfterRoute(target.id);  // the page re-renders for the new tab; the focus lands on it then
    target.click();
  });
  return list;
}

/** Render `load()`'s result into `el`, with a loading line and the error on failure. */
export async function loadInto(el, load) {
  fill(el, h("p", { class: "muted" }, "Loading…"));
  try {
    fill(el, await load());
  } catch (err) {
    fill(el, errorText(err));
  }
}
