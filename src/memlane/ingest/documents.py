"""Split long content into ordered, linked fragments (pure: no I/O).

A pasted document or a long piece of code in a chat message is stored as a *document* whose
text is split into fragments of at most ``max_tokens`` estimated tokens (``CHARS_PER_TOKEN``
characters each, so 1,000 tokens are 4,000 characters). Each fragment is searchable on its own
and knows the Markdown headings above it, so a search hit can show where it came from.

Where the text is cut, best first:

1. between Markdown blocks: paragraphs, ATX headings (``# Title``) and fenced code blocks
   (````` ``` ````` / ``~~~``; a ``#`` line inside a fence is code, not a heading). A new
   fragment starts at a heading once the current one is half full, and a fragment never ends
   with a heading when the section it opens can follow it;
2. inside a block that is larger than a fragment: at a blank line or a line end (code), or at
   a sentence end then a line end (prose); a cut that would leave the fragment less than half
   full is passed over for the next kind;
3. at whitespace between words;
4. at ``max_tokens * CHARS_PER_TOKEN`` characters (text with no whitespace at all).

Offsets are exact: ``text[f.start:f.end] == f.text`` for every fragment. A fragment's text
has no trailing whitespace and no leading blank lines (the indentation of its first line is
kept, so code stays readable); what lies between two fragments, before the first and after
the last, is whitespace only. So the fragments, placed at their offsets with that whitespace
between them, give back the document character for character.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from memlane.errors import InvalidInputError
from memlane.models import Fact, content_hash, new_id

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_FRAGMENT_TOKENS",
    "DOCUMENT_THRESHOLD_CHARS",
    "MAX_DOCUMENT_CHARS",
    "Fragment",
    "document_rows",
    "estimate_tokens",
    "split_document",
    "split_documents",
]

#: Characters per token of the estimate (English prose averages ~4; the formation trigger uses 4.5).
CHARS_PER_TOKEN = 4
#: Target fragment size in estimated tokens.
DEFAULT_FRAGMENT_TOKENS = 1000
#: Content longer than this (one fragment's worth, ~1,000 tokens) is stored as a document.
DOCUMENT_THRESHOLD_CHARS = DEFAULT_FRAGMENT_TOKENS * CHARS_PER_TOKEN
#: Hard cap on one document's length; longer content is refused with ``InvalidInputError``.
MAX_DOCUMENT_CHARS = 5_000_000


@dataclass(frozen=True, slots=True)
class Fragment:
    """One piece of a document, in reading order."""

    index: int
    """Position in the document, 0-based and contiguous."""
    start: int
    """Offset of the fragment's first character in the document."""
    end: int
    """Offset just past its last character: ``document[start:end] == text``."""
    text: str
    """The fragment's text: never empty or whitespace-only, no trailing whitespace."""
    headings: tuple[str, ...]
    """The Markdown headings enclosing the fragment's first line, outermost first (a fragment
    that starts with a heading includes it); ``()`` before the first heading."""


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text``: ``ceil(len(text) / CHARS_PER_TOKEN)``.

    A tokenizer-free estimate, consistent with the fragment size limit: a text of at most
    ``max_tokens * CHARS_PER_TOKEN`` characters is estimated at most ``max_tokens`` tokens.
    """
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def split_document(text: str, *, max_tokens: int = DEFAULT_FRAGMENT_TOKENS) -> list[Fragment]:
    """Split ``text`` into fragments of at most ``max_tokens`` estimated tokens each.

    Args:
        text: The document (Markdown, code, or plain prose).
        max_tokens: The largest fragment, in estimated tokens (``estimate_tokens``).

    Returns:
        The fragments in order (see the module docstring for where cuts fall). A text with no
        non-whitespace character gives ``[]``; a text that fits in one fragment gives one.

    Raises:
        InvalidInputError: ``text`` is not a string or is longer than ``MAX_DOCUMENT_CHARS``,
            or ``max_tokens`` is not a positive integer.
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"a document must be a string, not {type(text).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInputError(f"max_tokens must be a positive integer, not {max_tokens!r}")
    if len(text) > MAX_DOCUMENT_CHARS:
        raise InvalidInputError(
            f"the document has {len(text):,} characters; the limit is {MAX_DOCUMENT_CHARS:,} (split it first)"
        )
    max_chars = max_tokens * CHARS_PER_TOKEN
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    for span in _pack_blocks(_parse_blocks(text), max_chars):
        if span.end - span.start <= max_chars:
            spans.append((span.start, span.end, span.headings))
        else:  # a block larger than a fragment
            levels = _CODE_LEVELS if span.kind == _CODE else _TEXT_LEVELS
            pieces = _split_span(text, span.start, span.end, max_chars, levels)
            spans.extend((s, e, span.headings if i == 0 else span.inner_headings) for i, (s, e) in enumerate(pieces))
    fragments: list[Fragment] = []
    for raw_start, raw_end, headings in spans:
        start, end = _trim(text, raw_start, raw_end)
        if start < end:
            fragments.append(Fragment(len(fragments), start, end, text[start:end], headings))
    return fragments


# ---- Markdown blocks

_TEXT, _HEADING, _CODE = "text", "heading", "code"

# One regex tokenizer, run in C (a Python loop over the lines of a 1 MB text of short lines
# takes about a second). Lines end at ``\n`` (``\r`` counts as whitespace). Tokens: blank
# lines; an ATX heading line; a fenced code block, to the closing fence (same character, at
# least as long) or to the end; and a text run: paragraphs with the blank lines between them,
# up to the next heading or fence.
_EOL = r"(?:\n|\Z)"
_HEADING_LINE = r"[ ]{0,3}#{1,6}(?:[^\S\n][^\n]*)?" + _EOL
_FENCE_OPEN_LINE = r"[ ]{0,3}(?:`{3,}[^`\n]*|~{3,}[^\n]*)" + _EOL
_PARAGRAPH = rf"(?:(?!{_HEADING_LINE}|{_FENCE_OPEN_LINE})[^\n]*\S[^\n]*{_EOL})+"
_BLANK_LINES = r"(?:[^\S\n]*\n)+"


def _fence(char: str, name: str) -> str:
    close = rf"[ ]{{0,3}}(?P={name}){char}*[^\S\n]*{_EOL}"
    info = r"[^`\n]*" if char == "`" else r"[^\n]*"
    return rf"[ ]{{0,3}}(?P<{name}>{char}{{3,}}){info}{_EOL}(?:(?!{close})[^\n]*\n)*(?:{close}|[^\n]*\Z)"


_BLOCKS = re.compile(
    rf"(?P<blank>{_BLANK_LINES}|[^\S\n]+\Z)"
    rf"|(?P<heading>{_HEADING_LINE})"
    rf"|(?P<code>{_fence('`', 'ticks')}|{_fence('~', 'tildes')})"
    rf"|(?P<text>{_PARAGRAPH}(?:{_BLANK_LINES}{_PARAGRAPH})*)"
)
_ATX_TITLE = re.compile(r"[ ]{0,3}(#{1,6})(?:\s+(.*?))??(?:\s+#+)?\s*\Z")


class _Block(NamedTuple):
    start: int
    end: int  # past the block's last non-whitespace character
    kind: str
    headings: tuple[str, ...]  # the heading path at the block (a heading block includes itself)


class _Span(NamedTuple):
    start: int
    end: int
    headings: tuple[str, ...]  # at the span's start
    inner_headings: tuple[str, ...]  # at every later piece when the span is cut
    kind: str


def _parse_blocks(text: str) -> list[_Block]:
    """Text runs, ATX headings and fenced code blocks, with the heading path at each."""
    blocks: list[_Block] = []
    levels: list[int] = []  # of the enclosing headings
    titles: list[str] = []
    path: tuple[str, ...] = ()
    isspace = str.isspace
    for match in _BLOCKS.finditer(text):
        kind = match.lastgroup
        if kind is None or kind == "blank":
            continue
        start, end = match.span()
        while end > start and isspace(text[end - 1]):
            end -= 1
        if kind == _HEADING:
            title = _ATX_TITLE.match(text, start, end)
            level = len(title.group(1)) if title else 1
            while levels and levels[-1] >= level:
                levels.pop()
                titles.pop()
            levels.append(level)
            titles.append((title.group(2) or "").strip() if title else "")
            path = tuple(titles)
        blocks.append(_Block(start, end, kind, path))
    return blocks


def _pack_blocks(blocks: list[_Block], max_chars: int) -> list[_Span]:
    """Group consecutive blocks greedily into spans of at most ``max_chars``. A block larger
    than that is cut later, together with the blocks before it when they fill less than half
    a fragment, else with the headings just above it."""
    spans: list[_Span] = []
    group: list[_Block] = []
    half = max_chars // 2

    def flush(keep_headings: bool) -> None:
        upto = len(group)
        while keep_headings and upto > 0 and group[upto - 1].kind == _HEADING:
            upto -= 1
        if upto:
            spans.append(_Span(group[0].start, group[upto - 1].end, group[0].headings, group[0].headings, _TEXT))
            del group[:upto]

    for block in blocks:
        if group and block.kind == _HEADING and block.start - group[0].start >= half:
            flush(keep_headings=False)  # a well-filled fragment ends before a new section
        if block.end - (group[0].start if group else block.start) <= max_chars:
            group.append(block)
        elif block.end - block.start <= max_chars:  # fits alone: next fragment, with its headings
            flush(keep_headings=True)
            if group and block.end - group[0].start > max_chars:
                flush(keep_headings=False)
            group.append(block)
        else:  # too large alone
            if group and group[-1].end - group[0].start >= half:
                flush(keep_headings=True)
            first = group[0] if group else block
            spans.append(_Span(first.start, block.end, first.headings, block.headings, block.kind))
            group.clear()
    flush(keep_headings=False)
    return spans


# ---- cutting one oversized span

# Each level: a separator and the least share of a fragment a cut there must fill. A separator
# starts right after a visible character: tried inside a long run of whitespace, a pattern
# starting with ``\s*`` would rescan the run from every position (quadratic).
_BLANK_LINE_SEP = r"(?<=\S)[^\S\n]*\n(?:[^\S\n]*\n)+"
_LINE_END_SEP = r"(?<=\S)[^\S\n]*\n"
_SENTENCE_END_SEP = r"(?:(?<=[.!?;:。！？])|(?<=[.!?。！？][\"'”’)\]]))\s+"
_WHITESPACE_SEP = r"(?<=\S)\s+"
_Levels = tuple[tuple[str, float], ...]
_CODE_LEVELS: _Levels = ((_BLANK_LINE_SEP, 0.5), (_LINE_END_SEP, 0.5), (_WHITESPACE_SEP, 0.0))
_TEXT_LEVELS: _Levels = ((_BLANK_LINE_SEP, 0.5), (_SENTENCE_END_SEP, 0.5), (_LINE_END_SEP, 0.5), (_WHITESPACE_SEP, 0.0))


@lru_cache(maxsize=16)
def _last_separator(separator: str) -> re.Pattern[str]:
    # Greedy ``.+`` backtracks from the window's end, so the match is the last separator in
    # the window, found in C (a Python loop over every word of a 1 MB text is too slow).
    return re.compile(r"(?s:.+)(?P<sep>" + separator + ")")


def _split_span(text: str, start: int, end: int, max_chars: int, levels: _Levels) -> list[tuple[int, int]]:
    """Cut ``text[start:end]`` into pieces of at most ``max_chars``, each at the last
    separator of the best level that leaves the piece at least that level's share full."""
    pieces: list[tuple[int, int]] = []
    pos = start
    while end - pos > max_chars:
        window_end = pos + max_chars
        cut = next_pos = window_end  # a hard cut when there is no separator
        for separator, least in levels:
            match = _last_separator(separator).match(text, pos, window_end + 1)
            if match and match.start("sep") - pos >= max(1, int(max_chars * least)):
                cut, next_pos = match.start("sep"), match.end("sep")
                break
        pieces.append((pos, cut))
        pos = next_pos
    pieces.append((pos, end))
    return pieces


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop trailing whitespace and leading blank lines; keep the first line's indentation
    when the span starts at a line start (code)."""
    while end > start and text[end - 1].isspace():
        end -= 1
    first = start
    while first < end and text[first].isspace():
        first += 1
    newline = text.rfind("\n", start, first)
    if newline >= 0:
        return newline + 1, end
    if start == 0 or text[start - 1] == "\n":
        return start, end
    return first, end


# ---- documents as stored memories


def split_documents(facts: Sequence[Fact]) -> tuple[list[Fact], list[int]]:
    """Expand every fact whose content is longer than :data:`DOCUMENT_THRESHOLD_CHARS` into a
    ``document`` row (the whole text, kept for reading, not searched itself) followed by its
    ``fragment`` rows (searchable; ``metadata`` links them: ``document_id``, ``fragment``,
    ``fragments``, ``headings``). Fragment hashes derive from the document's, so re-adding the
    same content is idempotent like any other write.

    Returns:
        The rows to store, in order, and for each input fact the index of its row (the
        document row for expanded facts).
    """
    rows: list[Fact] = []
    firsts: list[int] = []
    for fact in facts:
        firsts.append(len(rows))
        if len(fact.content) <= DOCUMENT_THRESHOLD_CHARS:
            rows.append(fact)
        else:
            rows += document_rows(fact)
    return rows, firsts


def document_rows(fact: Fact) -> list[Fact]:
    """``fact`` stored as a document whatever its length: the ``document`` row (``kind``
    becomes ``document``) followed by its ``fragment`` rows (a short text has one)."""
    pieces = split_document(fact.content)
    doc = fact.model_copy(
        update={"kind": "document", "metadata": {**fact.metadata, "fragments": len(pieces)}, "seq": None}
    )
    rows = [doc]
    for p in pieces:
        meta = {
            **fact.metadata,
            "document_id": doc.id,
            "fragment": p.index,
            "fragments": len(pieces),
            "headings": list(p.headings),
            "start": p.start,
            "end": p.end,
        }
        rows.append(
            fact.model_copy(
                update={
                    "id": new_id(),
                    "content": p.text,
                    "kind": "fragment",
                    "seq": None,
                    "metadata": meta,
                    "hash": content_hash(f"{doc.hash or content_hash(doc.content)}#{p.index}"),
                }
            )
        )
    return rows
