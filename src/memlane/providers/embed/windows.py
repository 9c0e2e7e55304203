"""Windows of a long text, each no longer than the encoder reads (issue 22).

An encoder reads a bounded prefix of its input: all-MiniLM-L6-v2 reads 256 tokens (about
1,000 characters of English), so a sentence after that point of a 4,000-character message or
a ~1,000-token document fragment is not in the text's vector at all. A memory longer than
that keeps one vector per window: its first vector is the text's own (as before: the encoder
reads the start), and each further window starts ``size - overlap`` units after the previous
one, up to the text's end. Search scores a memory by its best window.

The unit is the embedder's own:

* an embedder with a tokenizer (the local MiniLM embedder) offers
  ``window_spans(text, size, overlap)``: character spans of at most ``size`` tokens, cut at
  token boundaries, and declares ``max_input_tokens`` (its reading limit without [CLS]/[SEP]);
* any other embedder may declare ``max_input_chars`` (a remote model's limit, in characters)
  and is cut by characters, at whitespace where there is some near the cut.

An embedder that declares neither is never windowed (the hash embedder reads everything)
unless :class:`Windowing` gives a ``size`` (characters, then).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from memlane.errors import ConfigError
from memlane.providers.embed.base import Matrix

__all__ = ["DEFAULT_OVERLAP", "Embedded", "TokenWindower", "Windowing", "char_spans", "extra_windows", "window_limit"]

#: Share of a window repeated at the start of the next: a sentence of up to this share of a
#: window lies whole inside one window wherever it is.
DEFAULT_OVERLAP = 0.25


@runtime_checkable
class TokenWindower(Protocol):
    """An embedder that cuts texts into windows of its own tokens."""

    max_input_tokens: int

    def window_spans(self, texts: Sequence[str], size: int, overlap: int) -> list[list[tuple[int, int]]]:
        """Each text's windows as character spans ``(start, end)`` of at most ``size`` tokens,
        consecutive ones sharing ``overlap`` tokens; one span ``(0, len)`` for a text that fits."""
        ...


@dataclass(frozen=True)
class Windowing:
    """How long memories are embedded.

    Attributes:
        enabled: False: one vector per memory (its start), as before issue 22.
        size: window length in the embedder's unit (tokens with a tokenizer, else
            characters); None: the embedder's own limit (``max_input_tokens`` /
            ``max_input_chars``; no windows when it declares none).
        overlap: share of a window repeated in the next (0 <= overlap < 1).
    """

    enabled: bool = True
    size: int | None = None
    overlap: float = DEFAULT_OVERLAP

    def __post_init__(self) -> None:
        if self.size is not None and (isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 16):
            raise ConfigError(f"embed window size must be an integer >= 16, got {self.size!r}")
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, int | float) or not 0 <= self.overlap < 1:
            raise ConfigError(f"embed window overlap must be a number in [0, 1), got {self.overlap!r}")


def window_limit(embedder: object, windowing: Windowing) -> tuple[str, int] | None:
    """``("tokens" | "chars", size)`` the embedder's texts are cut at, or None (never windowed)."""
    if not windowing.enabled:
        return None
    if isinstance(embedder, TokenWindower):
        return "tokens", windowing.size or int(embedder.max_input_tokens)
    limit = windowing.size or getattr(embedder, "max_input_chars", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return "chars", limit
    return None


def char_spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """Spans of at most ``size`` characters, each starting ``size - overlap`` after the last
    (moved back to a whitespace within the overlap when there is one), up to the end."""
    n = len(text)
    if n <= size:
        return [(0, n)]
    step = max(1, size - overlap)
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = min(n, start + size)
        if end < n:  # end at a space when one is near (the next window starts inside this one)
            cut = text.rfind(" ", start + step, end)
            end = cut if cut > start else end
        spans.append((start, end))
        if end >= n:
            return spans
        nxt = start + step
        space = text.find(" ", nxt - overlap // 2 if overlap else nxt, nxt + 1)
        start = space + 1 if space >= 0 and space + 1 > start else nxt


def extra_windows(embedder: object, texts: Sequence[str], windowing: Windowing) -> list[list[str]]:
    """The texts of each text's windows after its first ([] for a text that fits: its one
    vector is the text's own, as the encoder reads it)."""
    out: list[list[str]] = [[] for _ in texts]
    limit = window_limit(embedder, windowing)
    if limit is None:
        return out
    unit, size = limit
    overlap = int(size * windowing.overlap)
    # a token covers at least one character: a text of at most `size` characters fits
    long = [i for i, t in enumerate(texts) if len(t) > size]
    if not long:
        return out
    if unit == "tokens":
        assert isinstance(embedder, TokenWindower)
        spans = embedder.window_spans([texts[i] for i in long], size, overlap)
    else:
        spans = [char_spans(texts[i], size, overlap) for i in long]
    for i, sp in zip(long, spans, strict=True):
        out[i] = [texts[i][a:b] for a, b in sp[1:] if texts[i][a:b].strip()]
    return out


@dataclass
class Embedded:
    """Vectors for stored texts: ``vectors`` one row per text (the text as the encoder reads
    it, its start), ``windows`` per text the vectors of its further windows (None for a text
    that fits the encoder: the vast majority), see :mod:`memlane.providers.embed.windows`."""

    vectors: Matrix
    windows: list[Matrix | None]

    def windows_or_none(self) -> list[Matrix | None] | None:
        """``windows``, or None when no text has any (what a store is given)."""
        return self.windows if any(w is not None for w in self.windows) else None
