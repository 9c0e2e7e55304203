"""Keyword side of retrieval: tokenising, stopwords, FTS5 query strings, date words.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from datetime import datetime

from memlane.models import KeywordQuery

#: English stopwords removed from keyword queries (NLTK's list, 179 words). Documents keep
#: them: removing them from documents measured worse on LoCoMo.
STOPWORDS: frozenset[str] = frozenset(
    [
        "i",
        "me",
        "my",
        "myself",
        "we",
        "our",
        "ours",
        "ourselves",
        "you",
        "you're",
        "you've",
        "you'll",
        "you'd",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "he",
        "him",
        "his",
        "himself",
        "she",
        "she's",
        "her",
        "hers",
        "herself",
        "it",
        "it's",
        "its",
        "itself",
        "they",
        "them",
        "their",
        "theirs",
        "themselves",
        "what",
        "which",
        "who",
        "whom",
        "this",
        "that",
        "that'll",
        "these",
        "those",
        "am",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "doing",
        "a",
        "an",
        "the",
        "and",
        "but",
        "if",
        "or",
        "because",
        "as",
        "until",
        "while",
        "of",
        "at",
        "by",
        "for",
        "with",
        "about",
        "against",
        "between",
        "into",
        "through",
        "during",
        "before",
        "after",
        "above",
        "below",
        "to",
        "from",
        "up",
        "down",
        "in",
        "out",
        "on",
        "off",
        "over",
        "under",
        "again",
        "further",
        "then",
        "once",
        "here",
        "there",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "don't",
        "should",
        "should've",
        "now",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "ain",
        "aren",
        "aren't",
        "couldn",
        "couldn't",
        "didn",
        "didn't",
        "doesn",
        "doesn't",
        "hadn",
        "hadn't",
        "hasn",
        "hasn't",
        "haven",
        "haven't",
        "isn",
        "isn't",
        "ma",
        "mightn",
        "mightn't",
        "mustn",
        "mustn't",
        "needn",
        "needn't",
        "shan",
        "shan't",
        "shouldn",
        "shouldn't",
        "wasn",
        "wasn't",
        "weren",
        "weren't",
        "won",
        "won't",
        "wouldn",
        "wouldn't",
    ]
)


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: German function words (NLTK's German list plus question words), removed from a query that
#: is German: one that holds a word of :data:`_GERMAN_ONLY`. Words that are English words too
#: (``die``, ``war``, ``will``, ``hat``, ...) are removed only then, so English queries keep them.
GERMAN_STOPWORDS: frozenset[str] = _wordset(
    """aber alle allem allen aller alles als also am an ander andere anderem anderen anderer anderes
    anderm andern anders auch auf aus bei bin bis bist da damit dann der den des dem die das dass du dir
    dich dein deine deinem deinen deiner deines denn derer dessen dort durch ein eine einem einen einer
    eines einig einige einigem einigen einiger einiges einmal er ihn ihm es etwas euer eure eurem euren
    eurer eures für gegen gewesen hab habe haben hat hatte hatten hier hin hinter ich mich mir ihr ihre
    ihrem ihren ihrer ihres euch im in indem ins ist jede jedem jeden jeder jedes jene jenem jenen jener
    jenes jetzt kann kein keine keinem keinen keiner keines können könnte machen man manche manchem
    manchen mancher manches mein meine meinem meinen meiner meines mit muss musste nach nicht nichts noch
    nun nur ob oder ohne sehr sein seine seinem seinen seiner seines selbst sich sie ihnen sind so solche
    solchem solchen solcher solches soll sollte sondern sonst über um und uns unsere unserem unseren
    unser unseres unter viel vom von vor während war waren warst was weg weil weiter welche welchem
    welchen welcher welches wenn werde werden wie wieder will wir wird wirst wo wollen wollte würde
    würden zu zum zur zwar zwischen wer wen wem wann warum wieso weshalb woher wohin"""
)
#: German stopwords that are also English words: never the sign of a German query.
_GERMAN_AMBIGUOUS = _wordset("also am an bin bis da den des die er es hat hin in man nun ob so um war was will")
_GERMAN_ONLY = GERMAN_STOPWORDS - _GERMAN_AMBIGUOUS - STOPWORDS

#: Chinese / Japanese / Korean characters that are too common to search by alone (query side
#: only; the index keeps every character). Longer CJK terms are bigrams and stay.
CJK_STOPWORDS: frozenset[str] = _wordset(
    "的 了 是 我 你 他 她 它 们 在 吗 呢 吧 啊 和 与 有 也 都 就 这 那 个 一 不 么 什 谁 哪 怎 为 "
    "什么 哪里 哪儿 怎么 为什 多少 "
    "の は が を に で と も へ や か ね よ な だ た て し す ま い "
    "이 가 은 는 을 를 의 에 도 와 과 로"
)

_WORD = re.compile(r"\w+", re.UNICODE)

# Scripts written without spaces between words (and Hangul, whose words take suffixes): Han
# (CJK ideographs, extension A, compatibility, supplementary planes), Hiragana, Katakana (and
# its prolonged-sound mark), Hangul syllables and jamo. CJK punctuation is not included.
_CJK_RUN = re.compile(
    "[\u3005\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
    "\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff"
    "\uac00-\ud7af\u1100-\u11ff\u3131-\u318e]+"
)


def _segment(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    grams: list[str] = []
    for i in range(len(run) - 1):
        grams.append(run[i])
        grams.append(run[i : i + 2])
    grams.append(run[-1])
    return " " + " ".join(grams) + " "


def keyword_text(text: str) -> str:
    """A text as the keyword index stores it, and as query terms are cut from it: the one
    function both sides use, so what is indexed and what is searched agree.

    * NFKC (full-width letters and digits, ligatures and compatibility forms as plain ones);
    * ``ß`` as ``ss`` (FTS5 folds ``ä`` to ``a`` but keeps ``ß``, so "Fussball" missed "Fußball");
    * every run of Chinese / Japanese / Korean characters as its characters and its overlapping
      character pairs, space-separated: ``我的猫`` -> ``我 我的 的 的猫 猫``. FTS5's unicode61
      tokenizer splits words at spaces and punctuation only, so an unsegmented run is one token
      that only the very same run matches; pairs find words ("花生" in "我对花生过敏"),
      characters find one-character words ("猫").

    ASCII text is returned as is. Not idempotent (pairs of pairs): apply it once, to the
    original text.
    """
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text).replace("ß", "ss").replace("ẞ", "SS")
    return _CJK_RUN.sub(_segment, text)


def words(text: str) -> list[str]:
    """Lowercase word tokens (unicode ``\\w+``), as FTS5's unicode61 tokenizer splits them."""
    return _WORD.findall(text.lower())


def query_terms(text: str) -> list[str]:
    """Distinct query terms, in order of appearance: the words of :func:`keyword_text`
    (CJK runs as characters and character pairs), stopwords removed (English always, German
    when the query is German, the commonest CJK characters).

    If every word is a stopword, the words are kept (a query of "who am I" still searches).
    """
    toks = words(keyword_text(text))
    german = not _GERMAN_ONLY.isdisjoint(toks)
    kept = [
        t
        for t in toks
        if t not in STOPWORDS
        and t not in CJK_STOPWORDS
        and not (german and t in GERMAN_STOPWORDS)
        and t.replace("_", "")
    ]
    chosen = kept or toks
    seen: dict[str, None] = {}
    for t in chosen:
        seen.setdefault(t, None)
    return list(seen)


def parse_query(text: str, authors: Iterable[str] = (), *, author_boost: float = 2.0) -> KeywordQuery:
    """Build a :class:`KeywordQuery`: terms plus authors the query names (boosted)."""
    terms = query_terms(text)
    qwords = set(words(text))
    named = tuple(a for a in authors if a and set(words(a)) and set(words(a)) <= qwords)
    # A boost only discriminates when the query names some authors, not all of them.
    if len(named) == len(set(authors)):
        named = ()
    return KeywordQuery(terms=tuple(terms), boost_authors=named, author_boost=author_boost)


def date_words(when: datetime | None) -> str:
    """A date as words for the keyword index: ``"8 May 2023 Monday"``."""
    if when is None:
        return ""
    return f"{when.day} {when.strftime('%B')} {when.year} {when.strftime('%A')}"
