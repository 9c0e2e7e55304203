// Client-side pages over a list the API returned in one answer (sessions, jobs, proposals,
// events): `paged(el, items, (slice, offset) => table(...), {size, start})` shows one page at a
// time with "Previous page" / "Next page" buttons and "26–50 of 73"; `start` opens the page
// holding that index.

import { fill, h } from "./dom.js";

export function paged(el, items, renderPage, { size = 25, start = 0, note = null } = {}) {
  const show = (from, focus) => {
    const to = Math.min(items.length, from + size);
    const prev = from > 0
      ? h("button", { type: "button", onclick: () => show(Math.max(0, from - size), "Previous page") }, "Previous page")
      : null;
    const next = to < items.length
      ? h("button", { type: "button", onclick: () => show(to, "Next page") }, "Next page")
      : null;
    const count = items.length > size ? h("span", { class: "muted" }, `${from + 1}–${to} of ${items.length}`) : null;
    fill(el, renderPage(items.slice(from, to), from),
      prev || next || count || note ? h("div", { class: "toolbar pager" }, prev, next, count, note) : null);
    if (focus) ([...el.querySelectorAll(".pager button")].find((b) => b.textContent === focus) || el.querySelector(".pager button"))?.focus();
  };
  show(Math.max(0, start - (start % size)));
}
