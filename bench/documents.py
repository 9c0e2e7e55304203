"""Document splitting speed (``memlane.documents.split_document``), including the
pathological inputs that once took quadratic time.

    .venv/bin/python bench/documents.py

Prints the best of 3 wall times per input; results go in docs/benchmarks.md.
"""

from __future__ import annotations

import time

from memlane.documents import split_document

UNIT = (
    "## Section\n\nSome prose, with a sentence or two. And another one here.\n\n"
    "```python\ndef f(x):\n    return x + 1\n```\n\n- item one\n- item two\n\n"
)
INPUTS = {
    "markdown 1 MB": UNIT * (1_000_000 // len(UNIT)),
    "one 1 MB word": "x" * 1_000_000,
    "300k tabs": "\t" * 300_000 + "x",
    "heading + 300k spaces": "# " + " " * 300_000 + "x",
    "fence + 300k spaces": "```" + " " * 300_000 + "x",
    "300k ideographic spaces": "." + "\u3000" * 300_000 + "x",
    "150k blank code lines": "```\n" + " \n" * 150_000,
    "75k heading lines": "# h\n" * 75_000,
}


def main() -> None:
    print("| input | characters | fragments | best of 3 (s) |")
    print("|---|---|---|---|")
    for name, text in INPUTS.items():
        best = float("inf")
        n = 0
        for _ in range(3):
            t = time.perf_counter()
            n = len(split_document(text))
            best = min(best, time.perf_counter() - t)
        print(f"| {name} | {len(text):,} | {n} | {best:.3f} |")


if __name__ == "__main__":
    main()
