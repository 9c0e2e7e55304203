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

#: Function words of other languages (issue 17: "¿De qué raza es mi mascota?" found "Mi coche
#: es rojo" through "mi" and "es"), written without accents: a query word is compared with its
#: accents removed, so "qué" and "que" are the same word. Each list is dropped from a query that
#: holds one of the language's *signal* words (:data:`_SIGNALS`: the list minus English words,
#: names and abbreviations), like the German list; an English query keeps every word of them.
FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "es": _wordset(
        """a al algo algunas algunos ante antes como con contra cual cuales cuando cuanta cuantas
        cuanto cuantos de del desde donde durante e el ella ellas ellos en entre era eramos eran
        eras eres es esa esas ese eso esos esta estamos estan estar estas este esto estos estoy
        fue fueron fui ha habia han has hasta hay he hemos la las le les lo los mas me mi mia mias
        mio mios mis mucho muchos muy nada ni no nos nosotras nosotros nuestra nuestras nuestro
        nuestros o os otra otras otro otros para pero poco por porque que quien quienes se sea ser
        si sin sobre somos son soy su sus suya suyo tambien tanto te tenemos tengo tenia tiene
        tienen ti todo todos tu tus tuya tuyo un una unas uno unos vosotras vosotros vuestra
        vuestro y ya yo"""
    ),
    "fr": _wordset(
        """a ai au aux avait avaient avec avez avons c ca ce ceci cela celle celles celui ces cet
        cette ceux combien comment d dans de des du elle elles en es est et etaient etais etait
        ete etes etre eu eux il ils j je l la le les leur leurs lui m ma mais me meme mes moi mon
        n ne nos notre nous on ont ou par pas pour pourquoi qu quand que quel quelle quelles quels
        qui quoi s sa se ses son sommes sont suis sur t ta te tes toi ton tu un une vos votre vous
        y"""
    ),
    "pt": _wordset(
        """a ao aos aquela aquele as com como da das de dela dele do dos e ela elas ele eles em
        era es esta estamos estao este estou essa esse eu foi fui isso isto lhe lhes mais mas me
        meu meus minha minhas na nao nas no nos nossa nosso o onde os ou para pela pelas pelo pelos por
        porque qual quais quando quanta quantas quanto quantos que quem sao se seu seus sou sua
        suas tem temos tenho te teu tinha tu tua um uma umas uns voce voces"""
    ),
    "it": _wordset(
        """a abbiamo ad agli ai al alla alle allo anche avete aveva avevo c che chi ci coi col come
        con cosa cui da dagli dai dal dall dalla dalle dallo degli dei del dell della delle dello
        di dove e ed era erano ero fu gli ha hai hanno ho i il in io l la le lei li lo loro lui ma
        mi mia mie miei mio ne negli nei nel nell nella nelle nello noi non nostra nostre nostri
        nostro per perche piu quale quali quando quanta quante quanti quanto quella quelle quelli
        quello questa queste questi questo se sei si siamo siete sono sta stanno sto su sua sue
        sugli sui sul sulla sulle suo suoi ti tra tu tua tue tuo tuoi un una uno vi voi vostra
        vostro"""
    ),
    "nl": _wordset(
        """aan al als ben bij dan dat de deze die dit door dus een en er geen had haar heb hebben
        heeft hem het hier hij hoe hun ik in is je jouw jullie kan kon maar me meer men met mij
        mijn na naar niet niets nog nu of om omdat onder ons onze ook op over te tegen toch toen
        tot u uit uw van veel voor waar waarom wanneer was wat we welk welke werd wie wij wil
        worden wordt zal ze zelf zich zij zijn zo zonder zou"""
    ),
}
#: Words that never signal a language (English words, names, abbreviations: "Los Angeles",
#: "Las Vegas", "El Paso", "Des Moines", "mon", "comment", "dove", "con", "son", ...).
_NOT_SIGNALS = _wordset(
    """a ad ai al alla als an ante as at au ben by ca ce che ci col come con contra d dal dan dat
    de del dell della des di die do door du e ed el ella elle em en er era est et eu fu had
    han hay hem her ho hoe hun i il in io is it j je l la las le les li lo los m mas me meme mi
    mia mis mucho my n na nada nas ne no non nor nos nu o of og om on ons op or os over par para
    pas per pour s sa se sea si so su sue sus t ta te tem ti to todo ton tot tu tue u um un van
    vi was wat we ya yo sin son men met mon comment dove chi lei lui uno hai ha ze zo y c"""
)
_SIGNALS: dict[str, frozenset[str]] = {
    lang: frozenset(w for w in ws if len(w) > 1) - STOPWORDS - _NOT_SIGNALS for lang, ws in FUNCTION_WORDS.items()
}
#: A language's function words that are not English stopwords: two of them in a query with no
#: other English stopword ("Dove abita mia sorella?", not "Will the dove come to my van?")
#: signal the language too.
_OTHER_WORDS: dict[str, frozenset[str]] = {lang: ws - STOPWORDS for lang, ws in FUNCTION_WORDS.items()}

#: Chinese / Japanese / Korean characters that are too common to search by alone (query side
#: only; the index keeps every character), and the question and pronoun characters that carry
#: no topic (我 / 你 / 什么, 私 / 何). A CJK term made only of these (a character, or a pair such
#: as 我的 or です) is dropped from a query; a pair with one other character (宠物) stays.
CJK_STOPWORDS: frozenset[str] = _wordset(
    "的 了 是 我 你 他 她 它 们 在 吗 呢 吧 啊 和 与 有 也 都 就 这 那 个 一 不 么 什 谁 哪 怎 为 "
    "什么 哪里 哪儿 怎么 为什 多少 您 啥 几 呀 嘛 很 还 又 被 把 给 之 其 "
    "の は が を に で と も へ や か ね よ な だ た て し す ま い "
    "私 僕 俺 彼 何 誰 こ そ あ ど れ "
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


def _fold(word: str) -> str:
    """A word without its accents (``qué`` -> ``que``), as the function-word lists hold it."""
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))


def _is_cjk_function_term(term: str) -> bool:
    """A CJK term (one character or a pair) made only of :data:`CJK_STOPWORDS` characters."""
    return term in CJK_STOPWORDS or (_CJK_RUN.fullmatch(term) is not None and all(c in CJK_STOPWORDS for c in term))


def function_words(toks: Iterable[str]) -> frozenset[str]:
    """The function words to drop from a query with these (lowercase) words: English always,
    and the list of every other language the query is in (German: :data:`GERMAN_STOPWORDS`
    when it holds a German-only word; :data:`FUNCTION_WORDS` for es, fr, pt, it, nl when it
    holds a signal word, or two of the list's words and no other English stopword), compared
    without accents."""
    folded = {_fold(t) for t in toks}
    drop = set(STOPWORDS)
    if not _GERMAN_ONLY.isdisjoint(toks):
        drop |= GERMAN_STOPWORDS
    english = folded & STOPWORDS
    for lang, signals in _SIGNALS.items():
        signalled = not signals.isdisjoint(folded)
        if signalled or (len(folded & _OTHER_WORDS[lang]) >= 2 and english <= FUNCTION_WORDS[lang]):
            drop |= FUNCTION_WORDS[lang]
    return frozenset(drop)


def query_terms(text: str) -> list[str]:
    """Distinct query terms, in order of appearance: the words of :func:`keyword_text`
    (CJK runs as characters and character pairs), function words removed (English always;
    German, Spanish, French, Portuguese, Italian, Dutch when the query holds a word only that
    language uses, compared without accents; CJK terms made only of the commonest characters).

    If every word is a stopword, the words are kept (a query of "who am I" still searches).
    """
    toks = words(keyword_text(text))
    drop = function_words(toks)
    kept = [
        t
        for t in toks
        if t not in drop and _fold(t) not in drop and not _is_cjk_function_term(t) and t.replace("_", "")
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


def mostly_non_latin(text: str) -> bool:
    """Whether more than half of ``text``'s letters are outside the Latin script (Chinese,
    Japanese, Korean, Cyrillic, Greek, Arabic...). Accented Latin letters (``é``, ``ß``) are
    Latin; a text without letters is not "non-Latin"."""
    latin = other = 0
    for c in text:
        if not c.isalpha():
            continue
        if c.isascii() or unicodedata.name(c, "").startswith("LATIN"):
            latin += 1
        else:
            other += 1
    return other > latin
