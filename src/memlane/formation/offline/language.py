"""A cheap guess at a sentence's language, so the English rules know what they cannot read.

Two signals, no model: the script (Han, kana, Hangul, Cyrillic, Arabic, ... decide alone when
they make up a good part of the letters), then, for Latin script, which language's common
function words (and letters such as *ß*, *ñ*, *ã*) the sentence uses most. Only the function
words that are not also English count (*in*, *an*, *so*, *was* are left out), so a German
sentence with an English name stays German and an English one with *José* stays English.

``_language`` answers ``"en"``, another ISO 639-1 code, or ``None`` when it cannot tell (too
few words, no letters): the caller treats ``None`` as readable, so a short *Danke!* or *ok*
is never reported.
"""

from __future__ import annotations

import re

_SCRIPTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ja", re.compile(r"[\u3040-\u30ff]")),  # kana: Japanese even when Han characters dominate
    ("ko", re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")),
    ("zh", re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),  # Cyrillic, reported as ru
    ("ar", re.compile(r"[\u0600-\u06ff\u0750-\u077f]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),  # Devanagari, reported as hi
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
)
_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)

# Common function words of each language, minus those English shares (in, an, am, so, was, die...).
_FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset(
        """i me my mine you your he she it its we our us they them their the a and or but of to is are was were
        am be been have has had do does did not no this that these those with for on at from by about just really
        very like love live work what when where who how there here will would can could should my i'm i've it's
        don't can't didn't also so then than because some any all one two three get got go going went""".split()  # noqa: SIM905
    ),
    "de": frozenset(
        """ich du er sie wir ihr und oder aber nicht ist bin bist sind seid war waren der die das den dem des ein
        eine einen einem einer mit auf für von zu zum zur mein meine meinen meinem meiner dein deine sein seine
        habe hast hat haben auch noch schon sehr heute jetzt gestern kein keine nur dass wie nach bei aus wohne
        wohnen lebe arbeite heiße heisse mich mir dich dir uns euch wurde wurden immer gerne gern vielleicht
        umgezogen""".split()  # noqa: SIM905
    ),
    "fr": frozenset(
        """je tu il elle nous vous ils elles et est suis es sommes êtes sont les des du une le la mon ma mes ton
        ta tes son sa ses avec pour dans sur pas ne que qui j'ai c'est au aux très habite travaille m'appelle
        suis aussi mais ou chez cette ce ces mais aujourd'hui hier demain""".split()  # noqa: SIM905
    ),
    "es": frozenset(
        """yo tú él ella nosotros vosotros ellos ellas y es soy eres somos son estoy está estamos los las el la
        una mi mis tu tus su sus con para por en que muy vivo tengo tiene del al pero también hoy ayer mañana
        trabajo llamo""".split()  # noqa: SIM905
    ),
    "pt": frozenset(
        """eu você ele ela nós vocês eles elas e é sou somos são estou está os o um uma meu minha meus minhas com
        para em que não muito moro tenho tem do da dos das mas também hoje ontem amanhã trabalho chamo""".split()  # noqa: SIM905
    ),
    "it": frozenset(
        """io tu lui lei noi voi loro e è sono sei siamo il lo gli le un una mio mia miei mie con per che non
        molto abito vivo ho hai ha del della dei delle ma anche oggi ieri domani lavoro chiamo""".split()  # noqa: SIM905
    ),
    "nl": frozenset(
        """ik jij je hij zij wij jullie en ben bent zijn de het een mijn met voor op niet van dat die woon heb
        heeft ook maar vandaag gisteren morgen werk heet""".split()  # noqa: SIM905
    ),
}
# A word English also uses (it, son, die...) counts only for English; Romance languages may share words.
_SHARED = {w for lang, ws in _FUNCTION_WORDS.items() if lang != "en" for w in ws if w in _FUNCTION_WORDS["en"]}
_DISTINCT: dict[str, frozenset[str]] = {
    lang: ws if lang == "en" else frozenset(w for w in ws if w not in _SHARED) for lang, ws in _FUNCTION_WORDS.items()
}
_LANGS = tuple(_DISTINCT)
_WORD_LANGS: dict[str, tuple[int, ...]] = {}
for _i, _lang in enumerate(_LANGS):
    for _w in _DISTINCT[_lang]:
        _WORD_LANGS[_w] = (*_WORD_LANGS.get(_w, ()), _i)
_EN = _LANGS.index("en")
_FUNCTION = frozenset(_WORD_LANGS)
_LETTERS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (_LANGS.index("de"), re.compile(r"[äöüß]", re.I)),
    (_LANGS.index("fr"), re.compile(r"[çèêëîïôœù]", re.I)),
    (_LANGS.index("es"), re.compile(r"[ñ¿¡]", re.I)),
    (_LANGS.index("pt"), re.compile(r"[ãõ]", re.I)),
)
_NON_LATIN = re.compile(r"[^\x00-\u024f\u1e00-\u1eff\u2000-\u206f]")


def _script(text: str) -> str | None:
    """The language of a non-Latin script making up at least a third of the letters."""
    if text.isascii() or not _NON_LATIN.search(text):
        return None
    letters = len(_LETTER.findall(text))
    if not letters:
        return None
    for lang, pat in _SCRIPTS:
        n = len(pat.findall(text))
        if n and (lang == "ja" or n * 3 >= letters):
            return lang
    return None


# English first person, case kept (Italian "i" is an article; "me", "we" are Spanish, French, Dutch words):
# an ASCII sentence with one is English.
_ENGLISH_FIRST_PERSON = re.compile(r"\b(?:I|[Mm]y|[Oo]ur)\b")


def _language(text: str) -> str | None:
    """``"en"``, another language's code, or ``None`` (cannot tell)."""
    if text.isascii() and _ENGLISH_FIRST_PERSON.search(text):
        return "en"  # the common case, decided without scoring
    script = _script(text)
    if script is not None:
        return script
    scores = [0] * len(_LANGS)
    # distinct words: "Ha, ha!" is not Italian twice
    for tok in _FUNCTION.intersection(_WORD.findall(text.lower())):
        for i in _WORD_LANGS[tok]:
            scores[i] += 1
    if not text.isascii():
        for i, pat in _LETTERS:
            scores[i] += min(2, len(pat.findall(text)))
    en = scores[_EN]
    top = max(scores)
    if top >= 2 and top > en:
        return _LANGS[scores.index(top)]
    return "en" if en else None
