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
  // Walk the table into operations, then show each changed run as one <del> and one <ins>
  // ("studio [is → moved to Marvila] in ..."), not as interleaved single words.
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { ops.push(["=", a[i]]); i += 1; j += 1; }
    else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) { ops.push(["+", b[j]]); j += 1; }
    else { ops.push(["-", a[i]]); i += 1; }
  }
  const out = [];
  let removed = [];
  let added = [];
  const flush = () => {
    const gone = removed.join("").trim();
    const came = added.join("").trim();
    if (gone) out.push(h("del", {}, gone));
    if (gone && came) out.push(" ");
    if (came) out.push(h("ins", {}, came));
    if (gone || came) out.push(" ");
    removed = [];
    added = [];
  };
  for (const [op, token] of ops) {
    if (op === "-") removed.push(token);
    else if (op === "+") added.push(token);
    else if (/^\s+$/.test(token) && (removed.length || added.length)) { removed.push(token); added.push(token); }
    else { flush(); out.push(token); }
  }
  flush();
  return h("span", { class: "diff" }, out);
}
