"""The document splitter: long content becomes ordered fragments with exact offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlane.documents import (
    CHARS_PER_TOKEN,
    DOCUMENT_THRESHOLD_CHARS,
    MAX_DOCUMENT_CHARS,
    Fragment,
    estimate_tokens,
    split_document,
)
from memlane.errors import InvalidInputError


def check_invariants(text: str, fragments: list[Fragment], max_tokens: int) -> None:
    """Everything split_document promises about any text."""
    if not text.strip():
        assert fragments == []
        return
    assert [f.index for f in fragments] == list(range(len(fragments)))
    rebuilt = []
    previous_end = 0
    for fragment in fragments:
        assert text[fragment.start : fragment.end] == fragment.text
        assert fragment.text.strip(), "a fragment is never empty or whitespace-only"
        assert len(fragment.text) <= max_tokens * CHARS_PER_TOKEN
        assert estimate_tokens(fragment.text) <= max_tokens
        assert fragment.text == fragment.text.rstrip()
        leading = fragment.text[: len(fragment.text) - len(fragment.text.lstrip())]
        assert "\n" not in leading, "no leading blank lines (indentation is kept)"
        gap = text[previous_end : fragment.start]
        assert fragment.start >= previous_end and not gap.strip(), "only whitespace between fragments"
        rebuilt += [gap, fragment.text]
        previous_end = fragment.end
    assert not text[previous_end:].strip()
    rebuilt.append(text[previous_end:])
    assert "".join(rebuilt) == text


# ---- properties

MARKDOWN_PIECES = [
    "# Title",
    "## Section two ##",
    "### Deep",
    "#hashtag",
    "####### seven",
    "```python",
    "```",
    "~~~",
    "````",
    "    indented code",
    "- a list item",
    "Hello world.",
    "Is it? Yes!",
    '"Quoted."',
    "a_very_long_identifier_without_spaces_at_all",
    "x" * 37,
    "word",
    " ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\u2028",
    "\x85",
    "\u3000",
    "。",
    "é",
    "😀",
]

markdown_texts = st.lists(
    st.one_of(st.sampled_from(MARKDOWN_PIECES), st.text(max_size=12)),
    max_size=80,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=markdown_texts, max_tokens=st.integers(min_value=1, max_value=40))
def test_fragments_tile_the_document_within_the_size_limit(text: str, max_tokens: int) -> None:
    check_invariants(text, split_document(text, max_tokens=max_tokens), max_tokens)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=600), max_tokens=st.integers(min_value=1, max_value=60))
def test_any_unicode_text_tiles_within_the_size_limit(text: str, max_tokens: int) -> None:
    check_invariants(text, split_document(text, max_tokens=max_tokens), max_tokens)


@settings(max_examples=100, deadline=None)
@given(text=markdown_texts)
def test_splitting_is_deterministic(text: str) -> None:
    assert split_document(text, max_tokens=8) == split_document(text, max_tokens=8)


# ---- where the cuts fall


def test_short_text_is_one_fragment_and_blank_text_none() -> None:
    assert split_document("\n\nHello there.  \n\n") == [Fragment(0, 2, 14, "Hello there.", ())]
    assert split_document(" \n   indented\n") == [Fragment(0, 2, 13, "   indented", ())]
    assert split_document("") == []
    assert split_document(" \n\t\u3000\n") == []


def test_threshold_is_one_fragment_at_the_default_size() -> None:
    assert DOCUMENT_THRESHOLD_CHARS == 4000
    assert len(split_document("y" * DOCUMENT_THRESHOLD_CHARS)) == 1
    assert len(split_document("y" * (DOCUMENT_THRESHOLD_CHARS + 1))) == 2


def test_paragraphs_are_not_cut_when_they_fit() -> None:
    paragraphs = [f"Paragraph {i} " + "lorem ipsum dolor. " * 10 for i in range(40)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    fragments = split_document(text, max_tokens=200)
    assert len(fragments) > 3
    whole = {p.strip() for p in paragraphs}
    for fragment in fragments:
        assert all(part in whole for part in fragment.text.split("\n\n"))


def test_a_giant_paragraph_is_cut_at_sentence_ends() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(2000))
    fragments = split_document(text, max_tokens=100)
    check_invariants(text, fragments, 100)
    assert all(f.text.endswith(".") and f.text.startswith("Sentence") for f in fragments)
    assert all(len(f.text) > 200 for f in fragments[:-1]), "no tiny fragments"


def test_words_then_hard_cuts() -> None:
    words = "alpha beta gamma delta " * 500
    assert all(f.text.split() == f.text.split(" ") for f in split_document(words, max_tokens=50))
    assert all(not f.text.startswith(" ") for f in split_document(words, max_tokens=50))
    blob = "z" * 10_001
    fragments = split_document(blob, max_tokens=1000)
    assert [len(f.text) for f in fragments] == [4000, 4000, 2001]


def test_code_keeps_its_indentation_and_hash_lines_are_not_headings() -> None:
    body = "\n".join(f"    value_{i} = compute({i})  # comment {i}" for i in range(200))
    text = f"# Module\n\n```python\ndef f():\n{body}\n    return 0\n```\n\nAfter the code."
    fragments = split_document(text, max_tokens=300)
    check_invariants(text, fragments, 300)
    assert len(fragments) > 2
    assert all(f.headings == ("Module",) for f in fragments), "'# comment' inside a fence is code"
    assert fragments[1].text.startswith("    value_"), "the first line's indentation is kept"


def test_heading_paths() -> None:
    titles = ["# Guide", "## Install", "### From source", "## Usage ##", "# Appendix"]
    expected = {
        "Guide": ("Guide",),
        "Install": ("Guide", "Install"),
        "From source": ("Guide", "Install", "From source"),
        "Usage": ("Guide", "Usage"),
        "Appendix": ("Appendix",),
    }
    sections = ["Preface before any heading. " * 5]
    for title in titles:
        name = title.strip("# ")
        sections.append(f"{title}\n\n" + f"Text of {name}. " * 45)
    text = "\n\n".join(sections)
    fragments = split_document(text, max_tokens=150)
    check_invariants(text, fragments, 150)
    assert len(fragments) >= 2 * len(titles)
    assert fragments[0].headings == ()
    starts = []
    for fragment in fragments[1:]:
        name = fragment.text.split("\n")[0].strip("# ").removeprefix("Text of ").split(".")[0]
        assert fragment.headings == expected[name], fragment.text[:40]
        starts.append(name)
    assert set(starts) == set(expected), "every section starts at least one fragment"


def test_a_fragment_does_not_end_with_a_heading() -> None:
    text = "Intro. " * 60 + "\n\n## Next section\n\n" + "Body sentence. " * 400
    fragments = split_document(text, max_tokens=150)
    check_invariants(text, fragments, 150)
    assert not any(f.text.endswith("## Next section") for f in fragments)
    assert fragments[1].text.startswith("## Next section\n\nBody sentence.")
    assert fragments[1].headings == ("Next section",)
    assert fragments[2].headings == ("Next section",)


def test_a_new_section_starts_a_new_fragment_once_half_full() -> None:
    sections = [f"## Part {i}\n\n" + f"Words of part {i}. " * 15 for i in range(6)]
    fragments = split_document("\n\n".join(sections), max_tokens=200)
    assert [f.text.split("\n")[0] for f in fragments] == ["## Part 0", "## Part 2", "## Part 4"]
    assert [f.headings for f in fragments] == [("Part 0",), ("Part 2",), ("Part 4",)]


def test_a_pasted_50k_document() -> None:
    text = "\n\n".join(
        f"## Chapter {c}\n\n" + "\n\n".join("The quick brown fox jumps over the lazy dog. " * 10 for _ in range(10))
        for c in range(12)
    )
    assert 50_000 < len(text) < 60_000
    fragments = split_document(text)
    check_invariants(text, fragments, 1000)
    # Each chapter (~4,500 characters) is two fragments, the first starting at its heading.
    assert len(fragments) == 24
    assert [f.headings for f in fragments] == [(f"Chapter {c}",) for c in range(12) for _ in range(2)]
    assert [f.text.startswith("## Chapter") for f in fragments] == [True, False] * 12


# ---- estimates, limits, errors, speed


def test_estimate_tokens() -> None:
    assert [estimate_tokens(t) for t in ["", "abcd", "abcde", "x" * 4000]] == [0, 1, 2, 1000]


@pytest.mark.parametrize("max_tokens", [0, -1, True, 1.5, "5", None])
def test_bad_max_tokens_is_a_typed_error(max_tokens: object) -> None:
    with pytest.raises(InvalidInputError, match="max_tokens"):
        split_document("text", max_tokens=max_tokens)  # type: ignore[arg-type]


def test_too_long_or_not_text_is_a_typed_error() -> None:
    with pytest.raises(InvalidInputError, match="limit"):
        split_document("a" * (MAX_DOCUMENT_CHARS + 1))
    with pytest.raises(InvalidInputError, match="string"):
        split_document(b"bytes")  # type: ignore[arg-type]


def test_one_megabyte_document() -> None:
    """Correctness at size; the speed is measured in bench/documents.py, not here."""
    unit = (
        "## Section\n\nSome prose, with a sentence or two. And another one here.\n\n"
        "```python\ndef f(x):\n    return x + 1\n```\n\n- item one\n- item two\n\n"
    )
    text = unit * (1_000_000 // len(unit))
    fragments = split_document(text)
    check_invariants(text, fragments, 1000)
    assert fragments[-1].end == len(text.rstrip())
    assert len(split_document("x" * 1_000_000)) == 250


@pytest.mark.parametrize(
    "text",
    [
        "\t" * 300_000 + "x",
        "# " + " " * 300_000 + "x",
        "```" + " " * 300_000 + "x",
        "x" + "\r" * 300_000 + "x",
        "." + "\u3000" * 300_000 + "x",
        "```\n" + " \n" * 150_000,
        "# h\n" * 75_000,
    ],
    ids=["tabs", "heading", "fence", "carriage-returns", "ideographic-spaces", "blank-code-lines", "headings"],
)
def test_long_whitespace_runs(text: str) -> None:
    """Pathological inputs that once took quadratic time (bench/documents.py times them)."""
    check_invariants(text, split_document(text), 1000)
