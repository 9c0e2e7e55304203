// A word-level diff of two texts (longest common subsequence), as <del>/<ins> marks.

import { h } from "./dom.js";

export function diff(before, after) {
  const a = before ? before.split(/(\s+)/) : [];
  const b = after ? after.split(/(\s+)/) : [];
  if (a.length * b.length > 250000) {
    return h("span", { class: "diff" }, before ? h("del", {}, before) : null, " ", after ? h("ins", {}, after) : null);
  }
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push(a[i]); i += 1; j += 1; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { out.push(h("ins", {}, b[j])); j += 1; }
    else { out.push(h("del", {}, a[i])); i += 1; }
  }
  return h("span", { class: "diff" }, out);
}
