"""Precision and recall of the PII redaction detectors (``memlane.privacy.redaction``) on a
small labelled set: ``bench/data/redaction_labelled.jsonl``, one line per text,
``{"id", "text", "pii": [{"kind", "value"}, ...], "split"?}``, near misses included (cards failing the
Luhn check, IBANs failing mod-97, dates and order numbers that look like phone numbers,
version numbers that look like IPv4 addresses, obfuscated addresses labelled as misses).

    .venv/bin/python bench/redaction.py [--misses]

Lines 1-104 are the set the detectors were tuned on; lines with ``"split": "holdout"`` were
written after the last change to the detectors and never tuned on. A detected value counts
as a true positive when a labelled value of the same kind covers the same characters. Prints
one Markdown table per split, a row per detector (and all together); results go in
docs/benchmarks.md ("PII redaction detectors"). ``--misses`` lists the false positives and
negatives.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from memlane.privacy.redaction import KINDS, RedactionConfig, Redactor

DATA = Path(__file__).with_name("data") / "redaction_labelled.jsonl"


def spans(text: str, pii: list[dict[str, str]]) -> set[tuple[str, int, int]]:
    """The labelled values as (kind, start, end); a value written twice is labelled twice."""
    out: set[tuple[str, int, int]] = set()
    for item in pii:
        start = text.find(item["value"])
        while (item["kind"], start, start + len(item["value"])) in out:
            start = text.find(item["value"], start + 1)
        assert start >= 0, (text, item)
        out.add((item["kind"], start, start + len(item["value"])))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list false positives and false negatives")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    redactor = Redactor.from_config(RedactionConfig())
    misses: list[str] = []
    for split in ("tuning", "holdout"):
        part = [r for r in rows if r.get("split", "tuning") == split]
        tp: Counter[str] = Counter()
        fp: Counter[str] = Counter()
        fn: Counter[str] = Counter()
        t0 = time.perf_counter()
        for row in part:
            truth = spans(row["text"], row["pii"])
            found = {(f.kind, f.start, f.end) for f in redactor.findings(row["text"])}
            for kind, _, _ in found & truth:
                tp[kind] += 1
            for kind, start, end in found - truth:
                fp[kind] += 1
                misses.append(f"FP {kind:<5} {row['text'][start:end]!r} in #{row['id']}: {row['text']!r}")
            for kind, start, end in truth - found:
                fn[kind] += 1
                misses.append(f"FN {kind:<5} {row['text'][start:end]!r} in #{row['id']}: {row['text']!r}")
        seconds = time.perf_counter() - t0
        labelled = sum(len(r["pii"]) for r in part)
        clean = sum(1 for r in part if not r["pii"])
        print(f"{split}: {len(part)} texts ({clean} without PII), {labelled} labelled values, {seconds * 1000:.1f} ms")
        print()
        print("| detector | labelled | true pos. | false pos. | false neg. | precision | recall |")
        print("|---|---|---|---|---|---|---|")
        for kind in [*KINDS, "all"]:
            t, p, n = (sum(c.values()) if kind == "all" else c[kind] for c in (tp, fp, fn))
            precision = t / (t + p) if t + p else 1.0
            recall = t / (t + n) if t + n else 1.0
            print(f"| {kind} | {t + n} | {t} | {p} | {n} | {precision:.2f} | {recall:.2f} |")
        print()
    if args.misses:
        print("\n".join(sorted(misses)))


if __name__ == "__main__":
    main()
