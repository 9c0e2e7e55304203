"""``OfflineModel`` (``"offline"``): memory formation by rules, with no model and no network.

Every judgement a :class:`~memlane.formation.model.FormationModel` makes is answered here
by precompiled English patterns:

* **extraction** rewrites first-person statements ("I'm vegetarian", "my email is ...",
  "Grace is my girlfriend", "I'm moving to Berlin next month") into standalone third-person
  facts with a small, regular grammar (``SUBJECT RELATION VALUE``) that :meth:`decide`
  parses back;
* **dedup** compares subject, relation, value and polarity of those facts;
* **reflections**, **consolidation** and the **profile** are extractive: they select,
  attribute and order sentences and facts, and never write new claims.

It is deterministic and fast (thousands of turns per second), and it misses whatever the
patterns do not cover: see ``docs/offline.md`` for what it extracts and what it cannot do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    MAX_REFLECTION_WORDS,
    ConsolidationInput,
    Decision,
    DedupInput,
    DedupItem,
    DedupOutput,
    ExtractedFact,
    ExtractionInput,
    ExtractionOutput,
    ProfileInput,
    ProfileOutput,
    ReflectionInput,
    ReflectionOutput,
    ScopeMemory,
    Turn,
    word_count,
)
from memlane.providers.llm.base import Usage, UsageMeter, estimate_tokens
from memlane.retrieval.text import STOPWORDS, words

__all__ = ["OfflineModel"]

_I = re.IGNORECASE
_SPEAKER = "\x00"
"""Placeholder for the speaker's name inside a draft fact (resolved once the batch is read)."""


def _alt(items: Iterable[str]) -> str:
    """A regex alternation of literal phrases, longest first, spaces matching any whitespace."""
    return "|".join(re.escape(x).replace(r"\ ", r"\s+") for x in sorted(set(items), key=len, reverse=True))


# =========================================================================== lexicons

_NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "a few", "several"]
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_MONTHS_FULL = [
    "january", "february", "march", "april", "june", "july",
    "august", "september", "october", "november", "december",
]  # fmt: skip
_MONTH = rf"(?:(?:{_alt(_MONTHS_FULL)})|(?-i:May)|(?:jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?(?=\s+\d))"
_WEEKDAY = _alt(_WEEKDAYS)
_NUMW = rf"(?:a|an|\d+|{_alt(_NUMBER_WORDS)}|a\s+couple\s+of|couple\s+of)"
_PERIOD = (
    r"(?:week|weekend|month|year|summer|spring|fall|autumn|winter|semester|term|season|"
    rf"christmas|easter|thanksgiving|{_WEEKDAY})"
)
_DATE_RE = re.compile(
    rf"""\b(?:(?:19|20)\d{{2}}
    |{_MONTH}
    |\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?
    |\d{{4}}-\d{{2}}-\d{{2}}
    |yesterday|tomorrow|tonight|today|this\s+(?:morning|afternoon|evening)|last\s+night
    |(?:next|last|this|coming|past)\s+{_PERIOD}
    |(?:in|within)\s+{_NUMW}\s+(?:days?|weeks?|months?|years?)
    |{_NUMW}\s+(?:days?|weeks?|months?|years?)\s+ago
    |(?:on\s+)?{_WEEKDAY}
    )\b""",
    _I | re.VERBOSE,
)
_RELATIVE_RE = re.compile(
    rf"\b(?:yesterday|tomorrow|tonight|today|this|next|last|coming|past|ago|in|within|{_WEEKDAY})\b", _I
)

_DIET = ["vegetarian", "vegan", "pescatarian", "pescetarian", "flexitarian", "keto", "gluten-free", "dairy-free"]
_ADJ_CLASS: dict[str, str] = {w: "diet" for w in _DIET}
_ADJ_CLASS.update({w: "marital" for w in ["married", "single", "divorced", "engaged", "widowed", "separated"]})
_ADJ_CLASS.update({w: "employment" for w in ["retired", "unemployed", "self-employed", "employed", "freelancing"]})
_ADJ_CLASS.update({w: "hand" for w in ["left-handed", "right-handed", "ambidextrous"]})
_RELIGIONS = ["christian", "catholic", "protestant", "muslim", "jewish", "buddhist", "hindu", "sikh", "atheist",
              "agnostic", "mormon", "religious", "spiritual"]  # fmt: skip
_ADJ_CLASS.update({w: "religion" for w in _RELIGIONS})
_HEALTH_ADJ = [
    "diabetic", "pregnant", "deaf", "blind", "colorblind", "colourblind", "autistic", "dyslexic", "asthmatic",
    "epileptic", "sober", "lactose intolerant", "gluten intolerant", "celiac", "coeliac", "disabled", "vaccinated",
]  # fmt: skip
_IDENTITY_ADJ = [
    "gay", "lesbian", "bisexual", "straight", "queer", "asexual", "pansexual", "trans", "transgender", "nonbinary",
    "non-binary", "cisgender", "introverted", "extroverted", "an introvert", "an extrovert",
]  # fmt: skip
_ADJECTIVES = [*_ADJ_CLASS, *_HEALTH_ADJ, *_IDENTITY_ADJ]
_NATIONALITIES = [
    "American", "British", "English", "Scottish", "Irish", "Welsh", "Canadian", "Australian", "Mexican", "Brazilian",
    "Argentinian", "Chilean", "Colombian", "Peruvian", "Cuban", "Venezuelan", "Portuguese", "Spanish", "French",
    "German", "Italian", "Dutch", "Belgian", "Swiss", "Austrian", "Swedish", "Norwegian", "Danish", "Finnish",
    "Polish", "Czech", "Russian", "Ukrainian", "Greek", "Turkish", "Israeli", "Iranian", "Indian", "Pakistani",
    "Chinese", "Japanese", "Korean", "Vietnamese", "Thai", "Filipino", "Filipina", "Indonesian", "Malaysian",
    "Nigerian", "Kenyan", "Ethiopian", "Egyptian", "Moroccan", "Ghanaian", "Jamaican", "Lebanese", "Syrian",
    "Hungarian", "Romanian", "Bulgarian", "Serbian", "Croatian", "Latina", "Latino", "Latinx", "Hispanic", "Asian",
    "African", "European", "Arab", "Persian", "Icelandic", "Haitian", "Puerto Rican", "South African", "New Zealander",
]  # fmt: skip
_LANGUAGES = [
    "English", "Spanish", "Portuguese", "French", "German", "Italian", "Mandarin", "Cantonese", "Chinese", "Japanese",
    "Korean", "Russian", "Arabic", "Hindi", "Bengali", "Urdu", "Turkish", "Dutch", "Swedish", "Norwegian", "Danish",
    "Finnish", "Polish", "Greek", "Hebrew", "Vietnamese", "Thai", "Indonesian", "Tagalog", "Swahili", "Ukrainian",
    "Czech", "Hungarian", "Romanian", "Persian", "Farsi", "Catalan", "Basque", "Irish", "Welsh", "Latin", "ASL",
]  # fmt: skip
_NATIONALITY = rf"(?-i:{_alt(_NATIONALITIES)})"

_REL_PLURAL = {"child": "children", "wife": "wives", "boss": "bosses", "puppy": "puppies", "bunny": "bunnies",
               "fish": "fish", "baby": "babies", "grandchild": "grandchildren", "bestie": "besties"}  # fmt: skip
_REL_FUNCTIONAL = ["wife", "husband", "spouse", "partner", "girlfriend", "boyfriend", "gf", "bf", "fiance", "fiancee",
                   "fiancé", "fiancée", "hubby", "mom", "mum", "mother", "mama", "dad", "father", "papa", "boss",
                   "manager", "therapist", "stepmom", "stepdad"]  # fmt: skip
_REL_MULTI = [
    "sister", "brother", "sibling", "son", "daughter", "kid", "child", "baby", "friend", "best friend", "bestie",
    "roommate", "flatmate", "coworker", "co-worker", "colleague", "grandma", "grandmother", "grandpa", "grandfather",
    "grandson", "granddaughter", "grandchild", "aunt", "uncle", "cousin", "niece", "nephew", "stepson",
    "stepdaughter", "mother-in-law", "father-in-law", "sister-in-law", "brother-in-law", "doctor", "teacher",
    "mentor", "coach", "neighbor", "neighbour", "parent",
]  # fmt: skip
_PETS = ["dog", "cat", "pet", "puppy", "kitten", "horse", "bird", "parrot", "rabbit", "bunny", "hamster", "fish",
         "turtle", "snake", "lizard", "guinea pig", "pup"]  # fmt: skip
_REL_SINGULAR = [*_REL_FUNCTIONAL, *_REL_MULTI, *_PETS]
_REL_FORMS = {w: w for w in _REL_SINGULAR} | {_REL_PLURAL.get(w, w + "s"): w for w in _REL_SINGULAR}
_REL_NORMAL = {"gf": "girlfriend", "bf": "boyfriend", "hubby": "husband", "bestie": "best friend",
               "co-worker": "coworker", "pup": "puppy"}  # fmt: skip
_REL_MOD = (
    r"(?:(?:older|younger|little|big|baby|twin|best|new|old|oldest|youngest|eldest|elder|step|ex|late|"
    r"first|second|third|only|adopted|rescue|sweet|two|three|four|lovely|beloved)[- ]\s*){0,2}"
)
_REL = rf"(?P<r>{_REL_MOD}(?:{_alt(_REL_FORMS)}))\b"
_MULTI_HEADS = frozenset({*_REL_MULTI, *_PETS, *(_REL_PLURAL.get(w, w + "s") for w in _REL_SINGULAR), "kids"})

_POSSESSIONS = [
    "kids", "children", "grandkids", "grandchildren", "twins", "siblings", "pets", "car", "house", "home",
    "apartment", "flat", "condo", "boat", "motorcycle", "bike", "garden", "farm", "business", "company", "shop",
    "store", "bakery", "restaurant", "cafe", "blog", "podcast", "channel", "band", "studio", "degree", "phd",
    "tattoo", "tattoos", "collection", "van", "truck", "cabin", "job", "side business", "startup",
]  # fmt: skip
_HAVE_NOUN = rf"\b(?:{_alt([*_REL_FORMS, *_POSSESSIONS])})\b"
_CONDITIONS = (
    r"(?:type\s+[12]\s+)?diabetes|asthma|adhd|ocd|ptsd|autism|dyslexia|epilepsy|(?:celiac|coeliac|crohn'?s)"
    r"(?:\s+disease)?|arthritis|anxiety|depression|migraines|high\s+blood\s+pressure|hypertension|cancer|ibs|lupus|"
    r"multiple\s+sclerosis|a\s+heart\s+condition|(?:a|an)\s+[\w-]+\s+(?:intolerance|allergy)"
)

_NOT_NAMES = frozenset(
    w.lower()
    for w in [
        "I", "The", "A", "An", "My", "Your", "He", "She", "They", "It", "This", "That", "We", "You", "Our", "Their",
        "His", "Her", "Its", "There", "Here", "What", "Who", "Hey", "Hi", "Hello", "Thanks", "Thank", "Yes", "No",
        "Oh", "Wow", "And", "But", "So", "Also", "Well", "Yeah", "Yep", "Nope", "Just", "Really", "Love", "Congrats",
        "Awesome", "Great", "Sure", "Ok", "Okay", "Mom", "Dad", "God", "Lol", "Haha", "Sorry", "Please", "Good",
        "Nice", "Cool", "Amazing", "Beautiful", "Happy", "Both", "All", "Some", "Not", "Today", "Tomorrow",
        "Yesterday", "Anyway", "BTW", "Btw", "Omg", "Aww", "Ah", "Hmm", "Bye", "Definitely", "Absolutely", "Totally",
        "Glad", "Me", "Him", "Them", "Us", "Which", "When", "Where", "Why", "How", "If", "Then", "Now", "Maybe",
        "Sounds", "Look", "Check", "Take", "Let", "Christmas", "Easter", "Thanksgiving", "Halloween", "Mother",
        "Father", "Day", "Oliver's",
        *_WEEKDAYS, *_MONTHS_FULL, "May", *_NATIONALITIES, *_LANGUAGES,
    ]
)  # fmt: skip
_NAME_WORD = r"[A-Z][a-zA-Z]+(?:-[A-Z][a-zA-Z]+)?"
_NAME = rf"(?-i:{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,2}})"
_NAMES = rf"(?-i:{_NAME}(?:(?:\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*){_NAME})*)"

_VAL = r"(?P<v>[^.!?;:()\[\]\"]+)"
_ADV = (
    r"(?:(?:also|now|currently|still|actually|officially|finally|really|originally|just|already|proudly|"
    r"definitely|happily|fully|totally|completely|strictly|mostly|basically|technically|obviously)\s+)?"
)

# =========================================================================== text helpers

_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "\u00a0": " "})
_ABBREV = re.compile(r"\b(Mr|Mrs|Ms|Dr|St|Mt|Jr|Sr|Prof|vs|etc|approx|Ave|Rd|Blvd|No)\.", re.IGNORECASE)
_SENT_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")
_CLAUSE_SPLIT = re.compile(
    r"\s*;\s*|\s+[-–—]\s+|,?\s+(?:but|so|because|although|though|while|whereas|plus)\s+"
    r"(?=(?:I|my|if|we|you|he|she|they|it|that|this|there|maybe)\b)"
    r"|,?\s+and\s+(?=(?:if|we|you|he|she|they|it|that|this|there|maybe|I\s+(?:would|could|might|wish|think|guess))\b)",
    _I,
)
_CONTRACTION = re.compile(
    r"\b(?:i'm|im|i've|ive|i'll|i'd|can't|cant|cannot|won't|don't|dont|doesn't|doesnt|didn't|didnt|isn't|isnt|"
    r"aren't|wasn't|weren't|haven't|hasn't|hadn't|wouldn't|couldn't|shouldn't|you're|you've|you'll|you'd|"
    r"we're|we've|they're|it's|that's|he's|she's|there's|what's|gonna|wanna|i)\b",
    _I,
)
_EXPANSIONS = {
    "i'm": "I am", "im": "I am", "i've": "I have", "ive": "I have", "i'll": "I will", "i'd": "I would",
    "can't": "cannot", "cant": "cannot", "cannot": "cannot", "won't": "will not", "don't": "do not",
    "dont": "do not", "doesn't": "does not", "doesnt": "does not", "didn't": "did not", "didnt": "did not",
    "isn't": "is not", "isnt": "is not", "aren't": "are not", "wasn't": "was not", "weren't": "were not",
    "haven't": "have not", "hasn't": "has not", "hadn't": "had not", "wouldn't": "would not",
    "couldn't": "could not", "shouldn't": "should not", "you're": "you are", "you've": "you have",
    "you'll": "you will", "you'd": "you would", "we're": "we are", "we've": "we have", "they're": "they are",
    "it's": "it is", "that's": "that is", "he's": "he is", "she's": "she is", "there's": "there is",
    "what's": "what is", "gonna": "going to", "wanna": "want to", "i": "I",
}  # fmt: skip
_QUESTION_START = re.compile(
    r"^(?:(?:do|does|did|are|is|was|were|can|could|would|will|should|have|has|shall|may|might|am)\s+"
    r"(?:you|your|we|they|he|she|it|there|I|anyone|anybody|any)\b"
    r"|(?:what|who|where|when|why|how|which)\s+(?:is|are|do|does|did|was|were|can|could|would|will|should|have|has)\b)",
    _I,
)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|wish|would|could|might|maybe|perhaps|suppose|supposing|imagine|pretend|unless|whether|"
    r"hypothetically|someday|probably|possibly|should|assuming|in\s+case)\b"
    r"|\bI\s+(?:think|guess|believe|suspect|feel\s+like|am\s+not\s+sure|do\s+not\s+know|doubt)\b",
    _I,
)
_MODAL_MAY = re.compile(r"\bmay\b")
_CLAUSE_WORDS = (
    "I|we|you|he|she|they|it|my|our|that|this|then|also|so|now|still|really|just|even|have|has|had|am|is|are|was|"
    "were|be|been|love|loved|like|liked|enjoy|enjoyed|get|got|go|went|do|did|can|will|made|make|feel|felt|want|"
    "wanted|need|needed|think|thought|hope|see|saw|learn|learned|take|took|there|started|found|know|knew|let|said|"
    "tried|try|plan|planning|getting|going|looking|trying|hoping|working|spent|keep|kept|helped|help|met|came|come|"
    "left|decided|ended|became|look|looked|not|never|always|sometimes|hopefully|hope|would|could"
)
_CUT = re.compile(
    rf"\s*,?\s+(?:and|&)\s+(?=(?:{_CLAUSE_WORDS})\b)"
    r"|\s*,?\s+(?:but|so|because|since(?!\s+(?:\d|the\s+\d|(?-i:[A-Z])))|which|who|whom|whose|where|when|"
    r"while|though|although|whereas|until|unless|plus|except|if|as\s+well\s+as|lol|haha|hehe)\b"
    r"|\s*,\s*(?:I|and|but|or|so)\b"
    rf"|\s*,\s+(?=(?:{_CLAUSE_WORDS}|the|a|an|its|his|her|their|which|who|where|when|what|how|especially|like|such|"
    r"including|though|too|lol|haha|thanks|right)\b)"
    r"|\s+that\s+|(?-i:\s+I\b)|\s*[-–—]\s+|\s*\.\.\.",
    _I,
)
_DEICTIC = re.compile(r"\b(?:it|its|them|they|he|she|him|her|hers|his|this|these|those|that|their|theirs)\b", _I)
_ENDS_WITH_PREPOSITION = re.compile(r"\b(?:to|of|in|on|at|for|with|about|from|by|into|onto|the|a|an|and|or)$", _I)
_CLAUSE_OPENERS = frozenset(
    [
        *"""and but so then because cause since as while now also actually recently just finally well oh yeah yes no
        hey hi hello haha lol wow today yesterday tonight week weekend month year summer spring fall autumn winter
        ago morning afternoon evening night honestly basically anyway plus btw tbh okay ok though luckily fortunately
        unfortunately sadly thankfully personally currently lately again too first eventually originally seriously
        ah omg hmm ugh sometimes""".split(),  # noqa: SIM905
        *_WEEKDAYS,
        *_MONTHS_FULL,
    ]
)
_LAST_WORD = re.compile(r"(\w+)\W*$")


def _opens_clause(before: str) -> bool:
    """Whether an "I ..." match starts its own clause, not a relative one ("the photo I took last week")."""
    b = before.rstrip()
    if not b or b[-1] in ",;:!-—–(\"'.":
        return True
    m = _LAST_WORD.search(b)
    return m is None or m.group(1).lower() in _CLAUSE_OPENERS or m.group(1).isdigit()


_TRAIL_PUNCT = re.compile(r"[\s,.;:!?…\"'*~)\]]+$")
_TRAIL_FILLER = re.compile(
    r"(?:\s+(?:too|as\s+well|also|though|now|anymore|lol|haha|hehe|either|right\s+now|at\s+the\s+moment|btw|tbh|"
    r"honestly|really|so\s+much|a\s+lot|very\s+much|by\s+the\s+way|these\s+days|nowadays))+$",
    _I,
)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves|u|ur)\b", _I)
_VAGUE_START = re.compile(
    r"^(?:it|that|this|these|those|them|him|her|his|she|he|they|there|here|something|anything|everything|nothing|"
    r"stuff|things|one|some|more|much|so|very|how|what|when|where|why|who|which|well|good|great|fine|ok|okay|sure|"
    r"right|too|not|a\s+ton|tons|to\s+(?:hear|see|know|read|chat|talk|say)|the\s+way|the\s+idea|the\s+thought|seeing|hearing|"
    r"being\s+(?:able|there)|having\s+(?:you|this|that)|reading\s+(?:about|your)|talking|chatting|doing\s+(?:this|"
    r"that|it|well|good|great|fine|ok|okay)|a\s+(?:bit|little|lot|tad)|lots|the\s+same|all|both)\b",
    _I,
)
_PRONOUN_IN_VALUE = re.compile(r"\b(?:my|me|mine|myself|I|our|ours|us|we|ourselves)\b", _I)
_PRONOUN_MAP = {"my": "their", "me": "them", "mine": "theirs", "myself": "themselves", "i": _SPEAKER,
                "our": "their", "ours": "theirs", "us": "them", "we": "they", "ourselves": "themselves"}  # fmt: skip
_NEGATION = re.compile(r"\b(?:not|no|never|cannot|dislikes?|hates?)\b|n't\b|\bno\s+longer\b", _I)
_PUNCT_NORM = re.compile(r"[^\w\s@.+-]|(?<!\w)[.+-]|[.+-](?!\w)")
_SPACES = re.compile(r"\s+")


def _expand(text: str) -> str:
    return _CONTRACTION.sub(lambda m: _EXPANSIONS.get(m.group().lower(), m.group()), text)


def _normalise(text: str) -> str:
    """Case, whitespace and punctuation-insensitive form of a sentence (exact-duplicate key)."""
    return _SPACES.sub(" ", _PUNCT_NORM.sub(" ", text.translate(_QUOTES).lower())).strip()


_NUMBER_TOKENS = frozenset({"a", "an", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"})


_FILLERS = frozenset(
    """really actually just lately totally truly definitely basically honestly literally nowadays currently still
    also even super pretty quite""".split()  # noqa: SIM905
)
_THESE_DAYS = re.compile(r"\bthese\s+days\b", _I)


def _content(text: str) -> frozenset[str]:
    """Content tokens: lowercase words without stopwords, number words and fillers ("really", "these days")."""
    toks = words(_THESE_DAYS.sub(" ", text.translate(_QUOTES)))
    return frozenset(t for t in toks if t not in STOPWORDS and t not in _NUMBER_TOKENS and t not in _FILLERS)


_TRAIL_DECOR = re.compile(r"[\s\"')\]*~.!]+$|[^\w?\s]+$")


def _is_question(sentence: str) -> bool:
    """Ends with "?" (ignoring closing quotes, emoji) or opens like one ("Do you ...", "What is ...")."""
    s = sentence.strip()
    for _ in range(2):
        s = _TRAIL_DECOR.sub("", s)
    return s.endswith("?") or bool(_QUESTION_START.match(s.lstrip(" \"'(")))


def _is_hypothetical(clause: str) -> bool:
    return bool(_HYPOTHETICAL.search(clause) or _MODAL_MAY.search(clause))


def _sentences(text: str) -> list[str]:
    text = _ABBREV.sub(r"\1", text.translate(_QUOTES))
    return [s.strip() for s in _SENT_SPLIT.split(text) if s and s.strip()]


def _date_phrase(at: datetime | None) -> str:
    return f"{at.day} {at.strftime('%B')} {at.year}" if at is not None else ""


def _has_relative_date(text: str) -> bool:
    return any(_RELATIVE_RE.search(m.group()) for m in _DATE_RE.finditer(text))


def _cap_words(text: str, limit: int) -> str:
    """At most ``limit`` words, cut at the last clause boundary (comma, semicolon) that fits, else at a word."""
    if word_count(text) <= limit:
        return text
    toks = text.split()[:limit]
    for i in range(len(toks) - 1, max(len(toks) // 2, 1) - 1, -1):
        if toks[i - 1].endswith((",", ";", ":")):
            return _TRAIL_PUNCT.sub("", " ".join(toks[:i]))
    return _TRAIL_PUNCT.sub("", " ".join(toks))


# =========================================================================== extraction rules


@dataclass(frozen=True, slots=True)
class _Draft:
    """A fact before the speaker is named: ``head`` + ``value`` + ``tail``; ``_SPEAKER`` marks the speaker."""

    head: str
    value: str = ""
    tail: str = ""
    category: str = "other"
    own_label: bool = False
    """Render the speaker with its default label even once a name is learned ("The user's name is Sam")."""
    learn: str | None = None
    """A name the speaker gave for themselves."""


def _clean_value(raw: str, *, cut: bool = True, max_words: int = 18) -> str | None:
    """Trim a captured value to its clause, rewrite first-person pronouns, reject vague values."""
    v = raw.strip()
    if cut:
        m = _CUT.search(v)
        if m:
            v = v[: m.start()]
    for _ in range(3):
        v = _TRAIL_FILLER.sub("", _TRAIL_PUNCT.sub("", v)).strip()
    v = re.sub(r"^,\s*", "", v)
    if not v or _SECOND_PERSON.search(v) or _VAGUE_START.match(v) or _DEICTIC.search(v):
        return None
    if _ENDS_WITH_PREPOSITION.search(v):
        return None  # the object was cut away ("escaping to [that world]")
    if not _content(v):
        return None
    if word_count(v) > max_words:
        head = " ".join(v.split()[:max_words])
        if "," not in head:
            return None
        v = _TRAIL_PUNCT.sub("", head[: head.rindex(",")])
    v = _PRONOUN_IN_VALUE.sub(lambda m: _PRONOUN_MAP[m.group().lower()], v)
    return _SPACES.sub(" ", v)


def _valid_names(raw: str) -> str | None:
    """Drop trailing non-name words from a captured capitalised span; None if it is no name."""
    parts = re.split(r"(\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*)", raw.strip())
    names: list[str] = []
    for i in range(0, len(parts), 2):
        toks = parts[i].split()
        while toks and toks[-1].lower() in _NOT_NAMES:
            toks.pop()
        if not toks or toks[0].lower() in _NOT_NAMES or len(toks[0]) < 2:
            break
        names.append(" ".join(toks))
    if not names:
        return None
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _rel_name(raw: str) -> str:
    toks = raw.lower().split()
    head = " ".join(toks[-2:]) if len(toks) > 1 and " ".join(toks[-2:]) in _REL_FORMS else toks[-1]
    mods = toks[: len(toks) - len(head.split())]
    return " ".join([*mods, _REL_NORMAL.get(head, head)])


def _is_plural_rel(rel: str) -> bool:
    head = rel.split()[-1]
    return (head in _REL_FORMS and _REL_FORMS[head] != head) or rel.split()[0] in {"two", "three", "four"}


Builder = Callable[[re.Match[str], str], list[_Draft]]
"""Turns a match into drafts; the string is the sentence's text before the match (for fronted dates)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    triggers: tuple[str, ...]
    """Lowercase substrings; the rule's regex runs only on clauses holding one of them (none: a date)."""
    pattern: re.Pattern[str]
    build: Builder


_RULES: list[_Rule] = []


def _rule(name: str, triggers: tuple[str, ...], pattern: str) -> Callable[[Builder], Builder]:
    compiled = re.compile(pattern, _I)

    def register(fn: Builder) -> Builder:
        _RULES.append(_Rule(name, triggers, compiled, fn))
        return fn

    return register


def _one(head: str, raw: str | None, category: str, *, tail: str = "", cut: bool = True, **kw: int) -> list[_Draft]:
    if raw is None:
        return []
    v = _clean_value(raw, cut=cut, **kw)
    return [_Draft(head, v, tail, category)] if v else []


S = _SPEAKER


@_rule("name", ("name",), rf"\bmy\s+(?:full\s+|real\s+|first\s+)?name\s+is\s+(?P<v>{_NAME})")
def _r_name(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    return [_Draft(f"{S}'s name is {name}", category="name", own_label=True, learn=name)] if name else []


@_rule("introduce", ("i am",), rf"^(?:(?:hi|hello|hey)\b[\s,!]*)?I\s+am\s+(?P<v>{_NAME})\s*[.!]?$")
def _r_introduce(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    if not name or name.lower() in _NOT_NAMES:
        return []
    return [_Draft(f"{S}'s name is {name}", category="name", own_label=True, learn=name)]


@_rule("call_me", ("call me",), rf"\b(?:please\s+|you\s+can\s+|just\s+)?call\s+me\s+(?P<v>{_NAME})")
def _r_call_me(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    return [_Draft(f"{S} prefers to be called {name}", category="name")] if name else []


@_rule(
    "age",
    ("i am",),
    r"\bI\s+am\s+(?:now\s+|just\s+)?(?P<v>\d{1,3})(?:\s*(?:years?\s+old|yrs?\s+old|y/?o))?(?=\s*(?:$|[,.!]|and\b|but\b|so\b|now\b))",
)
def _r_age(m: re.Match[str], _: str) -> list[_Draft]:
    return [_Draft(f"{S} is {int(m['v'])} years old", category="age")] if 0 < int(m["v"]) <= 120 else []


@_rule("turned", ("turned",), r"\bI\s+(?:just\s+|recently\s+)?turned\s+(?P<v>\d{1,3})\b(?P<t>[^.!?;]*)")
def _r_turned(m: re.Match[str], _: str) -> list[_Draft]:
    when = _DATE_RE.search(m["t"])
    return [_Draft(f"{S} turned {m['v']}", tail=f" {_lower_relative(when.group())}" if when else "", category="age")]


@_rule(
    "is_adjective",
    ("i am",),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+|no\s+longer\s+)?{_ADV}(?:(?:a|an)\s+)?"
    rf"(?P<v>{_alt(_ADJECTIVES)}|{_NATIONALITY})\b(?!-)(?=\s*(?:$|[,.!;]|(?:and|but|so|now|too|since|for|because|as|"
    r"though|lol|haha|myself|anymore|any\s+more|these\s+days)\b))",
)
def _r_is_adjective(m: re.Match[str], _: str) -> list[_Draft]:
    v = m["v"] if m["v"][0].isupper() and m["v"] != "I" else m["v"].lower()
    neg = " not" if m["neg"] else ""
    cls = _ADJ_CLASS.get(v.lower(), "")
    cat = "health" if cls == "diet" or v.lower() in _HEALTH_ADJ else "relationships" if cls == "marital" else "identity"
    return [_Draft(f"{S} is{neg} {v}", category=cat)]


@_rule(
    "married_to",
    ("married", "engaged", "dating"),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?P<r>married\s+to|engaged\s+to|dating)\s+(?P<v>{_NAME})",
)
def _r_married_to(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["v"])
    neg = " not" if m["neg"] else ""
    return [_Draft(f"{S} is{neg} {m['r'].lower()} {name}", category="relationships")] if name else []


_DEGREE_WORDS = (
    r"(?:bit|little|lot|tad|kind|sort|couple|few|mess|wreck|total\s+mess|huge\s+mess|bit\s+of|"
    r"fan\s+of\s+(?:it|that|this))"
)


@_rule("is_a", ("i am a",), rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?P<v>(?:a|an)\s+(?!{_DEGREE_WORDS}\b)[^.!?;:()]+)")
def _r_is_a(m: re.Match[str], _: str) -> list[_Draft]:
    neg = " not" if m["neg"] else ""
    v = _clean_value(m["v"], max_words=12)
    if not v:
        return []
    if re.search(r"\b(?:fan|lover|enthusiast|addict|fanatic|believer|supporter)$", v, _I):
        return []  # "I'm a huge fan." of what was said before
    cat = "preferences" if re.search(r"\b(?:fan|lover|enthusiast|addict|fanatic)\b", v, _I) else "work"
    return [_Draft(f"{S} is{neg}", v, category=cat)]


@_rule(
    "allergic",
    ("allerg",),
    rf"\bI\s+am\s+{_ADV}(?P<neg>not\s+)?(?:(?:severely|very|highly|deathly|super|mildly|slightly|so)\s+)?allergic\s+to\s+{_VAL}",
)
def _r_allergic(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} is{' not' if m['neg'] else ''} allergic to", m["v"], "health")


@_rule("allergy_to", ("allergy",), rf"\bI\s+have\s+(?:a|an)\s+(?:severe\s+|mild\s+)?allergy\s+to\s+{_VAL}")
def _r_allergy_to(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} is allergic to", m["v"], "health")


@_rule(
    "condition", ("i have", "i also have", "i still have"), rf"\bI\s+(?:also\s+|still\s+)?have\s+(?P<v>{_CONDITIONS})\b"
)
def _r_condition(m: re.Match[str], _: str) -> list[_Draft]:
    return [_Draft(f"{S} has {_SPACES.sub(' ', m['v'])}", category="health")]


@_rule("from", ("from",), rf"\bI\s+(?:am\s+{_ADV}(?:originally\s+)?from|(?:originally\s+)?come\s+from)\s+{_VAL}")
def _r_from(m: re.Match[str], _: str) -> list[_Draft]:
    if not re.search(r"[A-Z]", m["v"]):
        return []
    return _one(f"{S} is from", m["v"], "location", max_words=8)


@_rule(
    "live",
    ("live", "living", "reside", "based", "located"),
    r"\bI\s+(?:currently\s+|now\s+|still\s+|also\s+)?(?P<neg>do\s+not\s+)?(?:live|am\s+(?:currently\s+|now\s+)?"
    r"living|reside|am\s+(?:currently\s+|now\s+)?(?:based|located)|have\s+(?:been\s+living|lived))\s+"
    rf"(?P<p>in|at|on|near|outside(?:\s+of)?|close\s+to)\s+{_VAL}",
)
def _r_live(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "does not live" if m["neg"] else "has lived" if "have" in m.group().lower() else "lives"
    return _one(f"{S} {verb} {m['p'].lower()}", m["v"], "location", max_words=10)


@_rule(
    "moved",
    ("moved", "relocated", "moving", "relocating"),
    r"\bI\s+(?:recently\s+|just\s+|finally\s+|also\s+)?(?P<verb>moved|relocated|am\s+moving|am\s+relocating)\s+(?:back\s+)?(?P<p>to|from|here\s+from)\s+"
    + _VAL,
)
def _r_moved(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "is moving" if m["verb"].lower().startswith("am") else "moved"
    return _one(f"{S} {verb} {m['p'].lower()}", m["v"], "location", max_words=12)


@_rule("born", ("born",), rf"\bI\s+was\s+born\s+(?P<p>in|on|at)\s+{_VAL}")
def _r_born(m: re.Match[str], _: str) -> list[_Draft]:
    cat = "age" if _DATE_RE.match(m["v"].strip()) and m["p"].lower() == "on" else "location"
    return _one(f"{S} was born {m['p'].lower()}", m["v"], cat, max_words=10)


@_rule("grew_up", ("grew up",), rf"\bI\s+grew\s+up\s+(?P<p>in|on|near|around|outside(?:\s+of)?)\s+{_VAL}")
def _r_grew_up(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} grew up {m['p'].lower()}", m["v"], "location", max_words=10)


@_rule(
    "work",
    ("work", "employed"),
    r"\bI\s+(?:currently\s+|now\s+|still\s+|also\s+)?(?P<neg>do\s+not\s+)?(?P<verb>work|am\s+(?:currently\s+|now\s+)?"
    rf"working|am\s+(?:currently\s+)?employed)\s+(?P<p>at|for|as|in|by)\s+{_VAL}",
)
def _r_work(m: re.Match[str], _: str) -> list[_Draft]:
    p = m["p"].lower()
    if m["verb"].lower().startswith("am") and "working" in m["verb"].lower() and p == "in":
        return []  # "I'm working in the garden": an activity, not a job
    verb = "does not work" if m["neg"] else "works"
    return _one(f"{S} {verb} {'at' if p == 'by' else p}", m["v"], "work", max_words=10)


@_rule(
    "new_job",
    ("job", "hired", "started working"),
    r"\bI\s+(?:just\s+|recently\s+|finally\s+)?(?:got\s+(?:a\s+|the\s+|my\s+first\s+)?(?:new\s+)?job|got\s+hired|"
    rf"started\s+(?:a\s+new\s+job|working|my\s+new\s+job))\s+(?P<p>at|for|as|in)\s+{_VAL}",
)
def _r_new_job(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "started a new job" if "started" in m.group().lower() else "got a job"
    return _one(f"{S} {verb} {m['p'].lower()}", m["v"], "work", max_words=12)


@_rule(
    "teach_own", ("teach", "own", "run", "manage"), rf"\bI\s+(?:also\s+|now\s+)?(?P<verb>teach|own|run|manage)\s+{_VAL}"
)
def _r_teach_own(m: re.Match[str], _: str) -> list[_Draft]:
    verb = m["verb"].lower()
    if verb != "teach" and not re.match(r"\s*(?:a|an|my\s+own|two|three|several)\b", m["v"], _I):
        return []
    if verb == "own" and not re.search(_HAVE_NOUN, m["v"], _I):
        return []
    return _one(f"{S} {verb}{'es' if verb == 'teach' else 's'}", m["v"], "work", max_words=10)


@_rule(
    "study",
    ("stud", "major"),
    r"\bI\s+(?:currently\s+|now\s+|also\s+)?(?:study|am\s+(?:currently\s+|now\s+)?(?:studying|majoring\s+in|doing\s+"
    r"(?:a|my)\s+(?:degree|phd|masters?|master's|bachelor's)\s+in)|major\s+in)\s+(?!for\b|hard\b|up\b|with\b|a\s+lot\b)"
    + _VAL,
)
def _r_study(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} studies", m["v"], "education", max_words=10)


@_rule(
    "graduated", ("graduated",), rf"\bI\s+(?:just\s+|recently\s+|finally\s+)?graduated\s+(?P<p>from|in|with)\s+{_VAL}"
)
def _r_graduated(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} graduated {m['p'].lower()}", m["v"], "education", max_words=12)


@_rule(
    "degree",
    ("degree", "phd", "master", "diploma", "mba"),
    r"\bI\s+(?:also\s+)?have\s+(?:a|an)\s+(?P<k>(?:(?:bachelor'?s|master'?s|masters|phd|doctorate|associate'?s|law|"
    rf"medical|college|university)\s+)?(?:degree|diploma)|phd|master'?s|masters|mba)\s+in\s+{_VAL}",
)
def _r_degree(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} has a {m['k'].lower()} in", m["v"], "education", max_words=10)


@_rule(
    "learning",
    ("learning",),
    rf"\bI\s+am\s+(?:currently\s+|also\s+|now\s+)?learning\s+(?P<to>to\s+|how\s+to\s+)?(?!a\s+lot\b|so\s+much\b|more\b|lots\b|from\b|about\b){_VAL}",
)
def _r_learning(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} is learning{' ' + m['to'].strip() if m['to'] else ''}", m["v"], "education", max_words=10)


@_rule(
    "speak",
    ("speak", "fluent", "native"),
    r"\bI\s+(?:also\s+|can\s+)?(?:speak|am\s+fluent\s+in|am\s+a\s+native\s+speaker\s+of)\s+(?P<v>(?-i:[A-Z])[^.!?;:()]*)",
)
def _r_speak(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{S} speaks", m["v"], "languages", max_words=8)


@_rule(
    "have",
    ("have", "got"),
    r"\bI\s+(?:also\s+|now\s+|still\s+|already\s+)?(?P<neg>do\s+not\s+)?(?:have\s+got|have|own)\s+"
    rf"(?P<v>(?:a|an|\d+|{_alt(_NUMBER_WORDS)}|no)\s+[^.!?;:()]+|(?:kids|children|pets|grandkids|grandchildren|twins)\b[^.!?;:()]*)",
)
def _r_have(m: re.Match[str], _: str) -> list[_Draft]:
    raw = m["v"]
    named = re.search(rf"\b(?:named|called)\s+(?P<n>{_NAMES})", raw)
    head_words = " ".join(raw.split()[:5])
    if not named and not re.search(_HAVE_NOUN, head_words, _I):
        return []
    if named:
        names = _valid_names(named["n"])
        if not names:
            return []
        raw = raw[: named.start()] + named.group().split()[0] + " " + names
        v = _clean_value(raw, cut=False, max_words=14)
    else:
        v = _clean_value(raw, max_words=14)
    if not v or re.match(r"(?:a|an)\s+(?:lot|bit|little|ton|great|good|blast|feeling|question|idea)\b", v, _I):
        return []
    cat = "relationships" if re.search(rf"\b(?:{_alt(_REL_FORMS)})\b", v, _I) else "other"
    return [_Draft(f"{S} {'does not have' if m['neg'] else 'has'}", v, category=cat)]


@_rule(
    "adopted",
    ("adopt", "got", "rescued", "bought"),
    rf"\bI\s+(?:just\s+|recently\s+|finally\s+)?(?P<verb>adopted|got|rescued|bought)\s+"
    rf"(?P<v>(?:a|an|\d+|{_alt(_NUMBER_WORDS)})\s+(?:new\s+|little\s+|baby\s+|rescue\s+)?(?:[\w-]+\s+)?"
    rf"(?:{_alt([*_PETS, 'dogs', 'cats', 'puppies', 'kittens'])})\b[^.!?;:()]*)",
)
def _r_adopted(m: re.Match[str], before: str) -> list[_Draft]:
    v = _clean_value(m["v"], max_words=14)
    if not v:
        return []
    when = _fronted_date(before) if not _DATE_RE.search(v) else None
    return [_Draft(f"{S} {m['verb'].lower()}", v, f" {_lower_relative(when.group())}" if when else "", "pets")]


_LOVE_VERBS = {
    "love": "loves", "adore": "adores", "hate": "hates", "despise": "despises", "detest": "detests",
    "loathe": "loathes", "cannot stand": "cannot stand", "can not stand": "cannot stand", "prefer": "prefers",
    "like": "dislikes", "am obsessed with": "is obsessed with", "am passionate about": "is passionate about",
    "am really into": "is into", "am so into": "is into", "am into": "is into",
}  # fmt: skip
_LOVE_SKIP = re.compile(
    r"^(?:the\s+(?:photo|pic|picture|pics|photos|pictures|sound|look|vibe|name|energy|story|message|colou?rs?|"
    r"feeling|painting|one|way|idea|thought|support|advice|pic|shot|view|sight)|to\s+(?:hear|see|know|help|chat|talk)"
    r"|not\b|being\s+a\s+part|it\b|hearing|seeing|reading\s+about)",
    _I,
)


@_rule(
    "love",
    (
        "love",
        "adore",
        "hate",
        "despise",
        "detest",
        "loathe",
        "stand",
        "prefer",
        "like",
        "obsessed",
        "passionate",
        "into",
    ),
    r"\bI\s+(?:(?:really|absolutely|truly|just|totally|so|also|genuinely|honestly|seriously|still|definitely)\s+)*"
    rf"(?P<neg>do\s+not\s+)?(?P<verb>{_alt(_LOVE_VERBS)})\s+{_VAL}",
)
def _r_love(m: re.Match[str], _: str) -> list[_Draft]:
    verb = _SPACES.sub(" ", m["verb"].lower())
    if (verb == "like") != bool(m["neg"]):
        return []  # plain "I like X" is too weak; "I don't love X" is not a stance
    if _LOVE_SKIP.match(m["v"].strip()) or (verb != "prefer" and re.match(r"the\b", m["v"].strip(), _I)):
        # "I love the colours!" reacts to something shown; a standing preference names its object.
        return []
    return _one(f"{S} {_LOVE_VERBS[verb]}", m["v"], "preferences", max_words=12)


@_rule(
    "favorite",
    ("favorite", "favourite", "fave", "fav"),
    r"\bmy\s+(?:all[- ]time\s+|absolute\s+|new\s+)?(?:favou?rite|fave|fav)\s+(?P<k>[a-z][\w' -]{0,30}?)\s+"
    r"(?P<be>is|are)\s+" + _VAL,
)
def _r_favorite(m: re.Match[str], _: str) -> list[_Draft]:
    k = m["k"].strip().lower()
    if k in {"part", "thing about it", "moment", "bit", "one"}:
        return []
    return _one(f"{S}'s favorite {k} {m['be'].lower()}", m["v"], "preferences", max_words=12)


_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_PHONE = r"\+?\d[\d\s().-]{5,}\d"


@_rule(
    "email",
    ("mail",),
    rf"\bmy\s+(?P<q>(?:work|personal|new|school|business)\s+)?e-?mail(?:\s+address)?\s+is\s+(?P<v>{_EMAIL})",
)
def _r_email(m: re.Match[str], _: str) -> list[_Draft]:
    q = (m["q"] or "").lower()
    return [_Draft(f"{S}'s {q}email is {m['v'].rstrip('.')}", category="contact")]


@_rule(
    "phone",
    ("phone", "number", "cell", "mobile", "whatsapp"),
    r"\bmy\s+(?P<q>(?:work|personal|new|home|cell|mobile)\s+)?(?:phone(?:\s+number)?|cell(?:\s+number)?|mobile"
    rf"(?:\s+number)?|telephone(?:\s+number)?|number|whatsapp)\s+is\s+(?P<v>{_PHONE})",
)
def _r_phone(m: re.Match[str], _: str) -> list[_Draft]:
    q = (m["q"] or "").lower()
    return [_Draft(f"{S}'s {q}phone number is {m['v'].strip()}", category="contact")]


@_rule(
    "address",
    ("address",),
    r"\bmy\s+(?P<q>(?:home|new|work|mailing|shipping|postal)\s+)?address\s+is\s+(?P<v>[^!?;\n]+)",
)
def _r_address(m: re.Match[str], _: str) -> list[_Draft]:
    v = _TRAIL_PUNCT.sub("", m["v"]).strip()
    q = (m["q"] or "").lower()
    return [_Draft(f"{S}'s {q}address is", v, category="contact")] if v and word_count(v) <= 20 else []


_ATTRS = {
    "birthday": "age", "bday": "age", "date of birth": "age", "hometown": "location", "home town": "location",
    "job": "work", "job title": "work", "profession": "work", "occupation": "work", "major": "education",
    "nickname": "name", "username": "contact", "handle": "contact", "website": "contact", "instagram": "contact",
    "twitter": "contact", "github": "contact", "blood type": "health", "zodiac sign": "identity",
    "star sign": "identity", "middle name": "name", "last name": "name", "surname": "name", "maiden name": "name",
    "pronouns": "identity", "native language": "languages", "first language": "languages",
    "mother tongue": "languages", "religion": "identity", "diet": "health",
}  # fmt: skip


@_rule("attribute", tuple(a.split()[0] for a in _ATTRS), rf"\bmy\s+(?P<k>{_alt(_ATTRS)})\s+(?P<be>is|are)\s+{_VAL}")
def _r_attribute(m: re.Match[str], _: str) -> list[_Draft]:
    k = _SPACES.sub(" ", m["k"].lower()).replace("bday", "birthday")
    return _one(f"{S}'s {k} {m['be'].lower()}", m["v"], _ATTRS[k if k in _ATTRS else "birthday"], max_words=12)


@_rule(
    "goal",
    ("goal", "dream", "plan", "aim", "ambition", "resolution", "mission"),
    r"\bmy\s+(?:big\s+|main\s+|ultimate\s+|long-term\s+|biggest\s+|new\s+|current\s+)?(?P<k>goal|dream|plan|aim|ambition|"
    r"resolution|new\s+year'?s\s+resolution|mission)\s+(?P<f>for\s+[\w\s]{1,20}?\s+)?is\s+(?P<v>to\s+[^.!?;:()]+|[^.!?;:()]+)",
)
def _r_goal(m: re.Match[str], _: str) -> list[_Draft]:
    k = m["k"].lower()
    if re.search(r"\b(?:today|tonight|tomorrow|weekend)\b", (m["f"] or "") + m["v"], _I):
        return []  # a plan for tonight is session state, not a fact
    return _one(f"{S}'s {k}{' ' + m['f'].strip() if m['f'] else ''} is", m["v"], "plans", max_words=16)


_REL_VERB_TAIL = re.compile(
    rf"""^(?:
      (?:'s\s+name\s+is|(?:'s|\s+is|\s+are)\s+(?:called|named))\s+(?P<name>{_NAMES})
    | 's\s+(?P<k>birthday|e-?mail(?:\s+address)?|phone(?:\s+number)?|number|address)\s+is\s+(?P<kv>[^!?;]+)
    | \s+(?:is|are)\s+(?P<bare>{_NAMES})\s*(?=$|[,.!])
    | \s+(?:is|are)\s+(?P<neg>not\s+)?(?P<attr>(?:a|an)\s+(?!{_DEGREE_WORDS}\b)[^.!?;:()]+|(?:{_alt(_ADJECTIVES)})\b
        |{_NATIONALITY}|\d{{1,3}}(?:\s+years?\s+old)?)(?=\s*(?:$|[,.!]|and\b|but\b|so\b|too\b|now\b))
      | \s+(?:is|are)\s+(?P<neg2>not\s+)?(?P<allergy>allergic\s+to\s+[^.!?;:()]+)
    | \s+(?P<verb>lives\s+(?:in|at|near)|works\s+(?:at|for|as|in)|moved\s+(?:to|from)|was\s+born\s+(?:in|on)
        |is\s+from|speaks|just\s+turned|turned)\s+(?P<vv>[^.!?;:()]+)
    )""",
    _I | re.VERBOSE,
)


@_rule(
    "my_relative",
    ("my",),
    rf"\bmy\s+{_REL}(?:\s*,?\s+(?P<n>{_NAMES})\s*,?)?(?P<rest>(?:'s|\s+(?:is|are|lives|works|moved|was|speaks|just|turned))\b[^.!?;]*)",
)
def _r_my_relative(m: re.Match[str], _: str) -> list[_Draft]:
    rel = _rel_name(m["r"])
    t = _REL_VERB_TAIL.match(m["rest"])
    if not t:
        return []
    subj = f"{S}'s {rel}"
    out: list[_Draft] = []
    if t["name"] or t["bare"]:
        raw = t["name"] or t["bare"]
        if t["bare"] and raw in _NATIONALITIES:
            return [_Draft(f"{subj} is {raw}", category="relationships")]
        names = _valid_names(raw)
        if names:
            out.append(
                _Draft(f"{subj} {'are' if _is_plural_rel(rel) else 'is'} named {names}", category="relationships")
            )
    elif t["k"]:
        k = re.sub(r"e-?mail(?:\s+address)?", "email", t["k"].lower())
        k = "phone number" if k in {"phone", "number"} else k
        out += _one(f"{subj}'s {k} is", t["kv"], "contact" if k != "birthday" else "relationships", cut=k != "address")
    elif t["attr"] or t["allergy"]:
        a = (t["attr"] or t["allergy"]).strip()
        if re.fullmatch(r"\d{1,3}", a):
            a += " years old"
        neg = " not" if t["neg"] or t["neg2"] else ""
        out += _one(f"{subj} {'are' if _is_plural_rel(rel) else 'is'}{neg}", a, "relationships", max_words=12)
    elif t["verb"]:
        verb = _SPACES.sub(" ", t["verb"].lower())
        if verb in {"is from", "speaks"} and not re.match(r"\s*(?-i:[A-Z])", t["vv"]):
            return []
        out += _one(f"{subj} {verb}", t["vv"], "relationships", max_words=12)
    if m["n"] and out:
        names = _valid_names(m["n"])
        if names:
            out = [_Draft(d.head.replace(subj, f"{subj} {names}", 1), d.value, d.tail, d.category) for d in out]
    return out


@_rule("my_relative_named", ("my",), rf"\bmy\s+{_REL}\s*,?\s+(?P<n>{_NAMES})\b(?!')(?!,?\s+and\s+I\b)")
def _r_my_relative_named(m: re.Match[str], _: str) -> list[_Draft]:
    names = _valid_names(m["n"])
    if not names:
        return []
    rel = _rel_name(m["r"])
    plural = " and " in names or _is_plural_rel(rel)
    return [_Draft(f"{names} {'are' if plural else 'is'} {S}'s {rel}", category="relationships")]


@_rule("named_is_my", (" my ",), rf"(?<![\w'])(?P<n>{_NAMES})\s+(?:is|are)\s+my\s+{_REL}")
def _r_named_is_my(m: re.Match[str], _: str) -> list[_Draft]:
    names = _valid_names(m["n"])
    if not names:
        return []
    rel = _rel_name(m["r"])
    return [_Draft(f"{names} {'are' if ' and ' in names else 'is'} {S}'s {rel}", category="relationships")]


@_rule("i_am_names_rel", ("'s",), rf"\bI\s+am\s+(?P<n>{_NAME})'s\s+{_REL}")
def _r_i_am_names_rel(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["n"])
    return [_Draft(f"{S} is {name}'s {_rel_name(m['r'])}", category="relationships")] if name else []


@_rule(
    "third_party",
    ("'s",),
    rf"(?<![\w'])(?P<n>{_NAME})'s\s+(?P<k>birthday|bday|e-?mail(?:\s+address)?|phone(?:\s+number)?|address|full\s+name|"
    r"last\s+name|surname|nickname|favou?rite\s+[a-z][\w -]{0,20}?)\s+is\s+" + _VAL,
)
def _r_third_party(m: re.Match[str], _: str) -> list[_Draft]:
    name = _valid_names(m["n"])
    if not name or name != m["n"]:
        return []
    k = _SPACES.sub(" ", m["k"].lower()).replace("bday", "birthday").replace("favourite", "favorite")
    cat = "contact" if re.search("mail|phone|address", k) else "preferences" if "favorite" in k else "relationships"
    raw = m["v"]
    if "mail" in k:
        em = re.match(rf"\s*({_EMAIL})", raw)
        return [_Draft(f"{name}'s email is {em.group(1)}", category=cat)] if em else []
    return _one(f"{name}'s {k} is", raw, cat, cut="address" not in k, max_words=14)


_SHORT_TERM = re.compile(r"today|tonight|this\s+(?:morning|afternoon|evening)", _I)
_PLAN_NO_DATE = {"planning", "plan", "intend", "aim", "aiming", "training", "saving", "decided"}
_PLAN_VERB = (
    r"(?P<aux>am\s+|have\s+|will\s+)?(?:(?:really|also|definitely|finally|still|now|just|currently|actually|seriously)"
    r"\s+)*(?P<verb>planning(?:\s+on|\s+to)?|plan(?:\s+on|\s+to)|hoping\s+to|hope\s+to|aiming\s+to|aim\s+to|intend\s+to|"
    r"want\s+to|going\s+to|about\s+to|getting|training\s+for|saving(?:\s+up)?\s+for|thinking\s+(?:of|about)|considering|"
    r"looking\s+forward\s+to|moving|starting|heading|flying|traveling|travelling|visiting|attending|running|taking|"
    r"having|launching|opening|applying|participating|competing|decided\s+to|be)"
)


@_rule(
    "plan",
    ("plan", "hop", "aim", "intend", "want", "going", "about to", "getting", "training", "saving", "thinking",
     "considering", "forward", "moving", "starting", "heading", "flying", "travel", "visiting", "attending",
     "running", "taking", "having", "launching", "opening", "applying", "participating", "competing", "decided",
     "will be"),
    rf"\bI\s+{_PLAN_VERB}\s+{_VAL}",
)  # fmt: skip
def _r_plan(m: re.Match[str], _: str) -> list[_Draft]:
    aux = (m["aux"] or "").strip().lower()
    verb = _SPACES.sub(" ", m["verb"].lower())
    first = verb.split()[0]
    gerund = first.endswith("ing") or first in {"going", "about", "looking"}
    if gerund != (aux == "am") and not (aux == "will" and verb == "be") and not (aux == "have" and first == "decided"):
        return []
    if aux == "" and first == "be":
        return []
    v = m["v"]
    dated = any(not _SHORT_TERM.fullmatch(d.group()) for d in _DATE_RE.finditer(v))
    strong = first in _PLAN_NO_DATE or (
        first in {"getting", "having", "moving"}
        and re.match(r"\s*(?:married|engaged|divorced|a\s+baby|to\s+(?-i:[A-Z]))", v, _I)
    )
    if not (dated or strong):
        return []
    if (
        first in {"going", "about"}
        and verb.endswith("to")
        and re.match(r"\s*(?:bed|sleep|be\s+(?:ok|fine|honest))", v, _I)
    ):
        return []
    if aux == "am":
        head = f"{S} is {verb}"
    elif aux == "will":
        head = f"{S} will be"
    elif first == "decided":
        head = f"{S} decided to"
    else:
        head = f"{S} {first}s{verb[len(first) :]}"
    return _one(head, v, "plans", max_words=16)


_EVENT_VERBS = [
    "went", "attended", "visited", "started", "joined", "finished", "completed", "graduated", "adopted", "bought",
    "got", "ran", "won", "took", "signed up for", "volunteered", "traveled", "travelled", "flew", "quit", "left",
    "married", "retired", "launched", "published", "released", "painted", "wrote", "received", "passed", "lost",
    "met", "celebrated", "organized", "organised", "hosted", "performed", "participated", "competed", "began",
    "learned", "learnt", "read", "watched", "created", "built", "opened", "climbed", "hiked", "drove", "became",
    "earned", "raised", "donated", "gave", "baked", "played", "camped", "applied", "enrolled", "registered", "spoke",
    "presented", "moved", "got married", "got engaged", "signed", "made", "tried", "taught", "bought", "sold",
]  # fmt: skip


def _fronted_date(lead: str) -> re.Match[str] | None:
    """A date opening the sentence before the subject ("Last Friday, I ..."), not one inside another clause."""
    for d in _DATE_RE.finditer(lead):
        around = words(lead[: d.start()]) + words(lead[d.end() :])
        if all(w in _CLAUSE_OPENERS or w in {"guess", "what", "so", "hey"} for w in around):
            return d
    return None


@_rule(
    "event",
    (),
    rf"(?:\bmy\s+{_REL}(?:\s*,?\s+(?P<n>{_NAME})\s*,?)?\s+and\s+)?\bI\s+(?:(?:just|recently|finally|also|actually|even|"
    rf"already|once|first)\s+)?(?P<verb>{_alt(_EVENT_VERBS)})\s+{_VAL}",
)
def _r_event(m: re.Match[str], lead: str) -> list[_Draft]:
    v = m["v"]
    in_value = _DATE_RE.search(v)
    before = _fronted_date(lead)
    if not in_value and not before:
        return []
    verb = _SPACES.sub(" ", m["verb"].lower())
    subj = S
    if m["r"]:
        rel = _rel_name(m["r"])
        names = _valid_names(m["n"]) if m["n"] else None
        subj = f"{S} and their {rel}" + (f" {names}" if names else "")
    tail = f" {_lower_relative(before.group())}" if before and not in_value else ""
    if in_value:
        # Keep the value up to (and including) its date even when a conjunction sits before it.
        cut = _CUT.search(v)
        if cut and cut.start() < in_value.start():
            v = v[: cut.start()]
            tail = "" if _DATE_RE.search(v) else f" {in_value.group()}"
    if not _content(_DATE_RE.sub(" ", v)):
        return []  # "I took last summer": the object is elsewhere
    return _one(f"{subj} {verb}", v, "events", tail=tail, max_words=16)


def _lower_relative(date: str) -> str:
    """A fronted "Last week" moved after the value reads "last week"."""
    return (
        date[0].lower() + date[1:]
        if date.split()[0].lower()
        in {"last", "next", "this", "yesterday", "today", "tomorrow", "tonight", "coming", "past", "on"}
        else date
    )


@_rule(
    "abstain",
    ("not eat", "not drink", "not smoke", "never", "no longer"),
    r"\bI\s+(?P<neg>do\s+not|never|no\s+longer)\s+(?P<verb>eat|drink|smoke|drive)\b(?P<v>[^.!?;:()]*)",
)
def _r_abstain(m: re.Match[str], _: str) -> list[_Draft]:
    neg = _SPACES.sub(" ", m["neg"].lower())
    verb = m["verb"].lower()
    head = f"{S} does not {verb}" if neg == "do not" else f"{S} {neg} {verb}s"
    if not m["v"].strip():
        return [_Draft(head, category="health")]
    return _one(head, m["v"], "health", max_words=10)


_TRIGGER_CACHE: dict[str, tuple[_Rule, ...]] = {}
_FIRST_PERSON = re.compile(r"\b(?:I|my|me)\b|'s\s", _I)
_ASSISTANT_MARKER = re.compile(
    r"\b(?:you(?:\s+have)?\s+(?:mentioned|said|told\s+me|noted|shared|indicated|stated)|as\s+you\s+(?:mentioned|said)|"
    r"I\s+(?:remember|recall|know|noted|understand)|(?:since|given\s+that|because)(?=\s+you(?:r)?\s))"
    r"(?:\s+(?:that|earlier|before|previously))*[,\s]+",
    _I,
)
_TO_FIRST_PERSON = re.compile(r"\b(?:you\s+are|you\s+were|you\s+have|yourself|yours|your|you)\b", _I)
_FIRST_PERSON_MAP = {"you are": "I am", "you were": "I was", "you have": "I have", "yourself": "myself",
                     "yours": "mine", "your": "my", "you": "I"}  # fmt: skip


def _rules_for(clause: str, lead: str) -> Iterator[_Rule]:
    """Rules worth running on a clause: a trigger word is present (no triggers: a date is, ``lead`` included)."""
    low = clause.lower()
    dated: bool | None = None
    for rule in _RULES:
        if rule.triggers:
            if any(t in low for t in rule.triggers):
                yield rule
        else:
            if dated is None:
                dated = _DATE_RE.search(clause) is not None or _DATE_RE.search(lead) is not None
            if dated:
                yield rule


def _clauses(sentence: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(_expand(sentence)) if c and c.strip()]


def _drafts(clause: str, lead: str = "") -> list[_Draft]:
    """Drafts of one clause; ``lead`` is the sentence before it (a fronted "Last week, ...")."""
    if not _FIRST_PERSON.search(clause) or _is_hypothetical(clause):
        return []
    out: list[_Draft] = []
    for rule in _rules_for(clause, lead):
        for m in rule.pattern.finditer(clause):
            before = lead + clause[: m.start()]
            if m.group()[:2] in ("I ", "i ") and not _opens_clause(before):
                continue
            out.extend(rule.build(m, before))
    return out


# =========================================================================== instructions

_INSTRUCTION_BLOCK = re.compile(
    r"\b(?:do\s+not|don't|never|no\s+longer|avoid|stop)\s+(?:extract(?:ing)?|stor(?:e|ing)|record(?:ing)?|"
    r"remember(?:ing)?|sav(?:e|ing)|keep(?:ing)?|captur(?:e|ing)|collect(?:ing)?)\s+(?P<what>[^.;\n]*)",
    _I,
)
_INSTRUCTION_CATEGORIES = {
    "email": "contact", "emails": "contact", "phone": "contact", "phones": "contact", "contact": "contact",
    "contacts": "contact", "address": "contact", "addresses": "contact", "preference": "preferences",
    "preferences": "preferences", "likes": "preferences", "dislikes": "preferences", "tastes": "preferences",
    "health": "health", "medical": "health", "diet": "health", "dietary": "health", "allergies": "health",
    "allergy": "health", "plans": "plans", "plan": "plans", "goals": "plans", "goal": "plans", "events": "events",
    "activities": "events", "relationships": "relationships", "family": "relationships", "relatives": "relationships",
    "location": "location", "locations": "location", "job": "work", "jobs": "work", "work": "work",
    "employer": "work", "occupation": "work", "career": "work", "age": "age", "ages": "age", "birthday": "age",
    "birthdays": "age", "name": "name", "names": "name", "pets": "pets", "languages": "languages",
    "education": "education", "school": "education", "studies": "education", "religion": "identity",
    "identity": "identity",
}  # fmt: skip


def _blocked_categories(instructions: str) -> frozenset[str]:
    """Categories an instruction like "do not extract health or contact details" rules out."""
    out: set[str] = set()
    for m in _INSTRUCTION_BLOCK.finditer(instructions):
        out.update(_INSTRUCTION_CATEGORIES[w] for w in words(m["what"]) if w in _INSTRUCTION_CATEGORIES)
    return frozenset(out)


# =========================================================================== claims (dedup, consolidation, profile)

_CLAIM_RELATIONS: list[tuple[str, str, bool]] = [
    (r"is\s+no\s+longer\s+from|is\s+not\s+from", "origin", False),
    (r"is\s+from|comes\s+from", "origin", True),
    (r"is\s+not\s+allergic\s+to", "allergic", False),
    (r"is\s+allergic\s+to", "allergic", True),
    (r"is\s+not\s+married\s+to", "spouse", False),
    (r"is\s+married\s+to", "spouse", True),
    (r"is\s+dating", "dating", True),
    (r"are\s+named|is\s+named|is\s+called|goes\s+by|prefers\s+to\s+be\s+called", "named", True),
    (r"does\s+not\s+live\s+(?:in|at|on|near)", "residence", False),
    (
        r"lives\s+(?:in|at|on|near)|is\s+living\s+in|is\s+based\s+in|resides\s+in|moved\s+to|has\s+lived\s+in|"
        r"is\s+moving\s+to",
        "residence",
        True,
    ),
    (r"was\s+born\s+(?:in|at)", "birthplace", True),
    (r"was\s+born\s+on", "birthdate", True),
    (r"grew\s+up\s+(?:in|on|near|around)", "grew_up", True),
    (r"does\s+not\s+work\s+(?:at|for)", "employer", False),
    (r"works\s+(?:at|for)|got\s+a\s+job\s+(?:at|for)|is\s+employed\s+(?:at|by)", "employer", True),
    (r"works\s+as|got\s+a\s+job\s+as", "job", True),
    (r"works\s+in", "field", True),
    (
        r"does\s+not\s+(?:like|love|enjoy)|dislikes|hates|despises|detests|loathes|cannot\s+stand|can\s+not\s+stand",
        "likes",
        False,
    ),
    (
        r"loves|adores|likes|enjoys|is\s+obsessed\s+with|is\s+passionate\s+about|is\s+into|"
        r"is\s+an?\s+(?:big\s+|huge\s+)?fan\s+of",
        "likes",
        True,
    ),
    (r"prefers", "prefers", True),
    (r"does\s+not\s+have|has\s+no", "has", False),
    (r"has", "has", True),
    (r"does\s+not\s+speak", "speaks", False),
    (r"speaks", "speaks", True),
    (r"does\s+not\s+eat|never\s+eats|no\s+longer\s+eats", "eats", False),
    (r"eats", "eats", True),
    (r"does\s+not\s+drink|never\s+drinks|no\s+longer\s+drinks", "drinks", False),
    (r"drinks", "drinks", True),
    (r"does\s+not\s+smoke|never\s+smokes|no\s+longer\s+smokes", "smokes", False),
    (r"smokes", "smokes", True),
    (r"studies|is\s+studying|is\s+majoring\s+in", "studies", True),
    (r"is\s+no\s+longer|is\s+not|are\s+not", "is", False),
    (r"is|are", "is", True),
]
_CLAIM_RE = re.compile(
    r"\s(?:" + "|".join(f"(?P<r{i}>{p})" for i, (p, _, _) in enumerate(_CLAIM_RELATIONS)) + r")\s+(?P<value>.+)$", _I
)
_FUNCTIONAL_KEYS = frozenset(
    {"residence", "origin", "birthplace", "birthdate", "grew_up", "employer", "job", "spouse", "dating", "named", "age"}
)
_SUBJECT_SYNONYMS = [
    (re.compile(r"\be-?mail(?:\s+address)?\b"), "email"),
    (re.compile(r"\b(?:phone|cell|mobile|telephone)(?:\s+number)?\b"), "phone"),
    (re.compile(r"\bfavourite\b"), "favorite"),
    (re.compile(r"\bbday\b"), "birthday"),
    (re.compile(r"^the\s+"), ""),
]
_ARTICLES = re.compile(r"^(?:a|an|the)\s+", _I)


@dataclass(frozen=True, slots=True)
class _Claim:
    subject: str
    key: str
    positive: bool
    value: str
    functional: bool

    @property
    def value_tokens(self) -> frozenset[str]:
        return _content(self.value)


def _parse_claim(text: str) -> _Claim | None:
    """Read ``SUBJECT RELATION VALUE`` back from a fact (the grammar extraction writes)."""
    m = _CLAIM_RE.search(text.translate(_QUOTES).strip().rstrip("."))
    if not m or m.lastgroup is None:
        return None
    idx = next(i for i in range(len(_CLAIM_RELATIONS)) if m[f"r{i}"] is not None)
    _, key, positive = _CLAIM_RELATIONS[idx]
    subject = text[: m.start()].strip().lower()
    if not subject or word_count(subject) > 6:
        return None
    for pat, rep in _SUBJECT_SYNONYMS:
        subject = pat.sub(rep, subject)
    value = _normalise(_ARTICLES.sub("", m["value"].strip()))
    functional = key in _FUNCTIONAL_KEYS
    if key == "named" and "'s " in subject and subject.rsplit("'s ", 1)[1].split()[-1] in _MULTI_HEADS:
        functional = False  # one may have two sisters, named differently
    if key == "is":
        head = value.split()[0] if value else ""
        if re.fullmatch(r"\d{1,3} years old", value):
            key, functional = "age", True
        elif head in _ADJ_CLASS or value in _ADJ_CLASS:
            key, functional = "is:" + _ADJ_CLASS.get(value, _ADJ_CLASS.get(head, "")), True
        elif "'s " in subject:
            attr = subject.rsplit("'s ", 1)[1]
            functional = attr.split()[-1] not in _MULTI_HEADS
            key = "attribute"
    return _Claim(subject, key, positive, value, functional)


def _same_slot(a: _Claim, b: _Claim) -> bool:
    return a.subject == b.subject and a.key == b.key


def _contradicts(new: _Claim, old: _Claim) -> bool:
    """Opposite polarity about the same thing: "loves pizza" / "hates pizza", "is vegetarian" / "is not"."""
    if not _same_slot(new, old) or new.positive == old.positive:
        return False
    neg, pos = (new, old) if not new.positive else (old, new)
    return neg.value == pos.value or (bool(neg.value_tokens) and neg.value_tokens <= pos.value_tokens)


def _supersedes(new: _Claim, old: _Claim) -> bool:
    """Same single-valued slot, new value: "lives in Lisbon" -> "lives in Berlin"."""
    return (
        _same_slot(new, old)
        and new.functional
        and new.positive == old.positive
        and new.value != old.value
        and not (new.value_tokens and new.value_tokens <= old.value_tokens)
    )


def _has_negation(text: str) -> bool:
    return bool(_NEGATION.search(text))


def _contained(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Whether at least ``threshold`` of ``a``'s tokens are in ``b``."""
    return bool(a) and len(a & b) >= threshold * len(a)


# =========================================================================== reflections

_AGENT_CUES = re.compile(
    r"\b(?:we|the\s+team|our\s+team)\s+(?:just\s+|finally\s+|have\s+|had\s+)?(?:launched|shipped|released|deployed|"
    r"announced|finished|completed|signed|hired|raised|reached|migrated|decided)\b|\b(?:deadline|budget|milestone|"
    r"launch\s+date|release\s+date|roadmap|kickoff|go-live|sprint|phase\s+\d|version\s+\d|v\d+(?:\.\d+)+)\b",
    _I,
)
_RULE_CUES = re.compile(
    r"^(?:please\s+)?(?:always|never|do\s+not|don't|stop|avoid|keep\s+(?:it|answers|responses|replies)|be\s+(?:more\s+)?"
    r"(?:concise|brief|short|detailed|direct|formal|casual))\b|\bplease\s+(?:be|keep|use|do\s+not|don't|avoid|stop|"
    r"always|never|answer|reply|respond|write|call|send|format)\b|\b(?:no|without)\s+emojis?\b|\bI\s+(?:would\s+)?"
    r"prefer\s+(?:short|shorter|long|longer|concise|brief|detailed|bullet|bulleted|plain|simple|formal|casual|when|that|"
    r"if|answers|responses|replies|you)|\bI\s+like\s+it\s+when\s+you\b|\bcall\s+me\s+(?-i:[A-Z])|\bin\s+bullet\s+points\b|"
    r"\b(?:use|using)\s+(?:metric|imperial|celsius|fahrenheit|british|american|markdown|bullet)\b",
    _I,
)
_INTEREST_CUES = re.compile(
    r"\bI\s+am\s+(?:really\s+|very\s+|so\s+)?(?:interested\s+in|into|learning|passionate\s+about|a\s+fan\s+of|"
    r"curious\s+about)\b|\bmy\s+(?:hobby|hobbies|passion|goal|dream)\b|\bI\s+(?:enjoy|love)\s+\w+ing\b",
    _I,
)
_SESSION_CUES = re.compile(
    r"\bI\s+(?:really\s+)?(?:need|want|am\s+trying\s+to|am\s+working\s+on|am\s+looking\s+for|am\s+stuck|have\s+to|"
    r"must)\b|\bhelp\s+me\b|\b(?:can|could|would)\s+you\b|\bhow\s+(?:do|can|should)\s+I\b|\bhow\s+to\b|"
    r"\b(?:error|bug|issue|problem|crash|fails?|failing|broken|not\s+working|does\s+not\s+work)\b|\bworking\s+on\b|"
    r"\btrying\s+to\b|\bplan(?:ning)?\s+to\b|https?://\S+",
    _I,
)
_DECISION_CUES = re.compile(
    r"\b(?:decided|let\s+us|let's|we\s+will\s+go\s+with|going\s+with|agreed|settled\s+on|the\s+plan\s+is|"
    r"final\s+(?:answer|decision|choice)|we\s+chose|I\s+chose|I\s+will\s+go\s+with)\b",
    _I,
)
_SMALL_TALK = re.compile(
    r"^(?:hi|hey|hello|thanks|thank\s+you|ok|okay|sure|yes|no|yeah|yep|great|cool|nice|awesome|bye|good\s+"
    r"(?:morning|night|evening)|lol|haha|wow)\b[\s\w,!.']{0,25}$",
    _I,
)


@dataclass(slots=True)
class _Sentence:
    text: str
    speaker: str
    role: str
    position: int
    tokens: frozenset[str]
    question: bool
    plain: str
    """The text with contractions expanded, for the cue patterns."""


def _memory_lines(mem: ScopeMemory | None) -> list[str]:
    if mem is None:
        return []
    lines = [ln.strip().lstrip("-*• ").strip() for ln in mem.consolidated.splitlines()]
    return [ln for ln in lines if ln and not _VERSION_RE.match(ln) and not _HEADING_RE.match(ln)] + list(mem.recent)


class _Novelty:
    """Rejects sentences whose content is (mostly) already said by a known line."""

    def __init__(self, known: Iterable[str]) -> None:
        self.known: list[frozenset[str]] = [t for t in (_content(k) for k in known) if t]

    def is_new(self, tokens: frozenset[str]) -> bool:
        return bool(tokens) and not any(_contained(tokens, k, 0.7) or _contained(k, tokens, 0.9) for k in self.known)

    def add(self, tokens: frozenset[str]) -> None:
        self.known.append(tokens)


def _reflection(sentence: _Sentence) -> str:
    verb = "asked" if sentence.question or re.match(r"(?:please|can|could|would|help)\b", sentence.text, _I) else "said"
    return _cap_words(f"{sentence.speaker} {verb}: {sentence.text}", MAX_REFLECTION_WORDS)


def _pick(
    pool: Sequence[_Sentence], score: Callable[[_Sentence], int], limit: int, novelty: _Novelty, used: set[int]
) -> list[_Sentence]:
    scored = [(score(s), s) for s in pool if s.position not in used]
    ranked = sorted((x for x in scored if x[0] > 0), key=lambda x: (-x[0], -len(x[1].tokens), x[1].position))
    chosen: list[_Sentence] = []
    for _, s in ranked:
        if len(chosen) >= limit:
            break
        if novelty.is_new(s.tokens):
            chosen.append(s)
            novelty.add(s.tokens)
            used.add(s.position)
    return sorted(chosen, key=lambda s: s.position)


# =========================================================================== consolidation

_VERSION_RE = re.compile(r"^\s*VERSION:\s*\d+\s*$", _I)
_HEADING_RE = re.compile(r"^\s*\[[^\[\]\n]{1,60}\]\s*$")
_GENERIC_HEADING_WORDS = frozenset(
    {"current", "recent", "other", "notes", "misc", "general", "key", "and", "the", "info"}
)
_BULLET_RE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(slots=True)
class _Item:
    line: str
    section: int
    age: int
    tokens: frozenset[str]
    claim: _Claim | None


def _section_for(text: str, headings: list[str]) -> int | None:
    toks = {t[:6] for t in _content(text)}
    for i, h in enumerate(headings):
        hw = {w[:6] for w in words(h) if w not in _GENERIC_HEADING_WORDS and len(w) > 2}
        if hw & toks:
            return i
    return None


# =========================================================================== profile

_PROFILE_ORDER: list[tuple[int, re.Pattern[str]]] = [
    (0, re.compile(r"'s\s+name\s+is|\bis\s+named\b|\bgoes\s+by\b|\bto\s+be\s+called\b|\bnickname\b", _I)),
    (1, re.compile(r"\b\d{1,3}\s+years\s+old\b|\bturned\s+\d|\bbirthday\b|\bborn\s+on\b", _I)),
    (
        2,
        re.compile(
            r"\blives?\b|\bliving\b|\bmoved\s+(?:to|from)\b|\bis\s+from\b|\bbased\s+in\b|\bborn\s+in\b|"
            r"\bgrew\s+up\b|\bhometown\b|\breside",
            _I,
        ),
    ),
    (
        3,
        re.compile(
            r"\bworks?\b|\bjob\b|\bprofession\b|\boccupation\b|\bcareer\b|\bstudies\b|\bstudent\b|\bretired\b|"
            r"\bgraduated\b|\bdegree\b|\bis\s+an?\s+(?:[\w-]+\s+)?\w+(?:er|or|ist|ian|ant|ent|nurse|chef|coach)\b",
            _I,
        ),
    ),
    (4, re.compile(rf"\b(?:{_alt(_REL_FORMS)})\b|\bmarried\b|\bengaged\b|\bdating\b|\bfamily\b", _I)),
    (5, re.compile(r"\bemail\b|\bphone\b|\baddress\b|@", _I)),
]
_HEALTH_RE = re.compile(
    rf"\b(?:{_alt(_DIET)})\b|allerg|\bdiet|\bgluten\b|\blactose\b|\bdiabet|\basthma|\bpregnan|\bmedication\b|"
    r"\bcondition\b|\bceliac\b|\bdoes\s+not\s+(?:eat|drink|smoke)\b|\bsober\b|\bhealth\b|\bintoleran",
    _I,
)
_GOAL_RE = re.compile(
    r"\bplan|\bgoal\b|\bdream\b|\bhop(?:es|ing)\s+to\b|\bwants\s+to\b|\bgoing\s+to\b|\bwill\b|\bgetting\s+married\b|"
    r"\btraining\s+for\b|\bsaving\b|\bintends?\b|\baim|\bambition\b|\bresolution\b|\bis\s+moving\b",
    _I,
)
_PREFERENCE_RE = re.compile(
    r"\bloves?\b|\bhates?\b|\bprefers?\b|\bfavou?rite\b|\benjoys?\b|\blikes?\b|\bdislikes?\b|\bfan\s+of\b|"
    r"\bcannot\s+stand\b|\bpassionate\b|\bobsessed\b|\badores?\b",
    _I,
)


def _profile_rank(fact: str) -> tuple[int, int]:
    for sub, pat in _PROFILE_ORDER:
        if pat.search(fact):
            return (0, sub)
    if _HEALTH_RE.search(fact):
        return (1, 0)
    if _GOAL_RE.search(fact):
        return (2, 0 if _DATE_RE.search(fact) else 1)
    if _PREFERENCE_RE.search(fact):
        return (3, 0)
    return (5, 0)


# =========================================================================== the model


def _usage(inp: BaseModel, out: BaseModel | str) -> Usage:
    text = out if isinstance(out, str) else out.model_dump_json()
    return Usage(prompt_tokens=estimate_tokens(inp.model_dump_json()), completion_tokens=estimate_tokens(text), calls=1)


_GENERIC_AUTHORS = frozenset({"", "user", "human", "me", "unknown", "customer", "client", "anonymous"})


class OfflineModel:
    """A :class:`~memlane.formation.model.FormationModel` answered by rules: deterministic, no network.

    One call per method is recorded in :attr:`meter` (tokens are estimates of the
    input and output JSON), so benchmarks count calls the same way as for an LLM.
    """

    name: str = "offline"

    def __init__(self, meter: UsageMeter | None = None) -> None:
        self.meter: UsageMeter = meter if meter is not None else UsageMeter()

    async def aclose(self) -> None:
        """Nothing to release."""

    # ------------------------------------------------------------------ 1. extraction

    async def extract_facts(self, inp: ExtractionInput) -> ExtractionOutput:
        out = self._extract(inp)
        self.meter.record(self.name, "extract", _usage(inp, out))
        return out

    def _extract(self, inp: ExtractionInput) -> ExtractionOutput:
        if not (inp.allow_user_scope or inp.allow_agent_scope):
            return ExtractionOutput()
        scope: Literal["user", "agent"] = "user" if inp.allow_user_scope else "agent"
        blocked = _blocked_categories(inp.instructions) if inp.instructions else frozenset()
        default_user = (inp.user_name or "").strip() or "The user"
        labels: dict[str, str] = {}
        learned: dict[str, str] = {}
        found: list[tuple[str, _Draft, str]] = []
        last_user_key: str | None = None
        for turn in inp.conversation:
            if turn.role == "user":
                key = self._speaker_key(turn, default_user, labels)
                last_user_key = key
                drafts = self._turn_drafts(turn.text)
            else:
                key = last_user_key or "\x01user"
                labels.setdefault(key, default_user)
                drafts = self._assistant_drafts(turn.text)
            suffix = ""
            for d in drafts:
                if d.category in blocked:
                    continue
                if d.learn and labels[key] == default_user and default_user == "The user":
                    learned.setdefault(key, d.learn)
                if turn.at is not None and _has_relative_date(d.value + d.tail):
                    suffix = f" (said on {_date_phrase(turn.at)})"
                else:
                    suffix = ""
                found.append((key, d, suffix))
        facts: list[ExtractedFact] = []
        seen: dict[str, int] = {}
        for key, d, suffix in found:
            if d.learn and d.learn.casefold() == labels[key].casefold():
                continue  # "I'm Sam" said by Sam: "Sam's name is Sam" says nothing
            text = self._render(d, labels[key] if d.own_label else learned.get(key, labels[key]), suffix)
            if text is None:
                continue
            norm = _normalise(text)
            if norm in seen:
                continue
            seen[norm] = len(facts)
            facts.append(ExtractedFact(content=text, scope=scope))
        return ExtractionOutput(facts=self._drop_contained(facts))

    @staticmethod
    def _speaker_key(turn: Turn, default_user: str, labels: dict[str, str]) -> str:
        author = turn.author.strip()
        if author.lower() in _GENERIC_AUTHORS:
            labels.setdefault("\x01user", default_user)
            return "\x01user"
        labels.setdefault(author, author)
        return author

    @staticmethod
    def _turn_drafts(text: str) -> list[_Draft]:
        out: list[_Draft] = []
        for sentence in _sentences(text):
            if _is_question(sentence):
                continue
            lead = ""
            for clause in _clauses(sentence):
                out.extend(_drafts(clause, lead))
                lead += clause + ", "
        return out

    @staticmethod
    def _assistant_drafts(text: str) -> list[_Draft]:
        """Only what the assistant reports about the user ("You mentioned you're vegetarian")."""
        out: list[_Draft] = []
        for sentence in _sentences(text):
            if _is_question(sentence):
                continue
            expanded = _expand(sentence)
            for m in _ASSISTANT_MARKER.finditer(expanded):
                rest = expanded[m.end() :]
                if not re.match(r"you(?:r)?\b", rest, _I):
                    continue
                first = _TO_FIRST_PERSON.sub(lambda x: _FIRST_PERSON_MAP[_SPACES.sub(" ", x.group().lower())], rest)
                for clause in _clauses(first):
                    out.extend(_drafts(clause))
                break
        return out

    @staticmethod
    def _render(d: _Draft, name: str, suffix: str) -> str | None:
        def fill(s: str, start: bool) -> str:
            if not s:
                return s
            label = name
            if start and s.startswith(_SPEAKER):
                s = label + s[1:]
            lower = label[0].lower() + label[1:] if label == "The user" else label
            return s.replace(_SPEAKER, lower)

        head, value, tail = fill(d.head, True), fill(d.value, False), fill(d.tail, False)
        text = _SPACES.sub(" ", " ".join(p for p in (head, value) if p) + tail + suffix).strip()
        if word_count(text) <= MAX_FACT_WORDS:
            return text
        fixed = word_count(head) + word_count(tail) + word_count(suffix)
        room = MAX_FACT_WORDS - fixed
        if room <= 0 or not value:
            return None
        toks = value.split()[:room]
        for i in range(len(toks), 0, -1):
            if toks[i - 1].endswith(",") or (i < len(toks) and toks[i].lower() in {"and", "with", "for", "to", "in"}):
                short = _TRAIL_PUNCT.sub("", " ".join(toks[:i]))
                if _content(short):
                    return _SPACES.sub(" ", f"{head} {short}{tail}{suffix}").strip()
        return None

    @staticmethod
    def _drop_contained(facts: list[ExtractedFact]) -> list[ExtractedFact]:
        """Within a batch, drop a fact another fact of the same subject and relation already covers."""
        claims = [_parse_claim(f.content) for f in facts]
        groups: dict[tuple[str, str, bool], list[int]] = {}
        for i, c in enumerate(claims):
            if c is not None:
                groups.setdefault((c.subject, c.key, c.positive), []).append(i)
        drop: set[int] = set()
        for members in groups.values():
            for i in members:
                ti = _content(facts[i].content)
                for j in members:
                    if i != j and j not in drop:
                        tj = _content(facts[j].content)
                        if ti < tj:
                            drop.add(i)
                            break
        return [f for i, f in enumerate(facts) if i not in drop]

    # ------------------------------------------------------------------ 2. dedup

    async def decide(self, inp: DedupInput) -> DedupOutput:
        out = DedupOutput(decisions=[self._decide_one(item) for item in inp.items])
        self.meter.record(self.name, "dedup", _usage(inp, out))
        return out

    @staticmethod
    def _decide_one(item: DedupItem) -> Decision:
        new = item.content
        key = _normalise(new)
        cands = item.candidates
        for c in cands:
            if _normalise(c.content) == key:
                return Decision(index=item.index, event="NONE", fact_id=c.id)
        claim = _parse_claim(new)
        parsed = [(c, _parse_claim(c.content)) for c in cands]
        if claim is not None:
            for c, old in parsed:
                if old is not None and _contradicts(claim, old):
                    return Decision(index=item.index, event="DELETE", fact_id=c.id)
            for c, old in parsed:
                if old is not None and _supersedes(claim, old):
                    return Decision(index=item.index, event="UPDATE", fact_id=c.id, text=new)
        tokens = _content(new)
        negated = _has_negation(new)
        for c in cands:
            if _has_negation(c.content) != negated:
                continue
            if (tokens and tokens <= _content(c.content)) or c.similarity >= 0.95:
                return Decision(index=item.index, event="NONE", fact_id=c.id)
        return Decision(index=item.index, event="ADD")

    # ------------------------------------------------------------------ 3. reflections

    async def reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        out = self._reflect(inp)
        self.meter.record(self.name, "reflect", _usage(inp, out))
        return out

    def _reflect(self, inp: ReflectionInput) -> ReflectionOutput:
        pool = self._sentences_of(inp)
        used: set[int] = set()
        base = list(inp.new_facts)
        agent: list[_Sentence] = []
        if inp.agent is not None:
            nov = _Novelty([*base, *_memory_lines(inp.agent)])
            agent = _pick(pool, lambda s: 3 if _AGENT_CUES.search(s.plain) and not s.question else 0, 3, nov, used)
        user: list[_Sentence] = []
        if inp.user is not None:
            nov = _Novelty([*base, *_memory_lines(inp.user), *(s.text for s in agent)])
            user_pool = [s for s in pool if s.role == "user"]
            user = _pick(
                user_pool,
                lambda s: (
                    3 if _RULE_CUES.search(s.plain) else 2 if _INTEREST_CUES.search(s.plain) and not s.question else 0
                ),
                3,
                nov,
                used,
            )
        nov = _Novelty([*base, *_memory_lines(inp.session), *(s.text for s in agent + user)])
        decisions = [s for s in pool if _DECISION_CUES.search(s.plain) and not s.question and s.position not in used]
        session: list[_Sentence] = []
        for s in reversed(decisions):  # the latest decision
            if nov.is_new(s.tokens):
                session.append(s)
                nov.add(s.tokens)
                used.add(s.position)
                break
        user_side = [s for s in pool if s.role == "user"]

        def session_score(s: _Sentence) -> int:
            if _SESSION_CUES.search(s.plain):
                return 3
            if s.question and len(s.tokens) >= 3:
                return 2
            return 0

        session += _pick(user_side, session_score, 3 - len(session), nov, used)
        if not session:
            fallback = [s for s in user_side if not s.question and len(s.tokens) >= 4]
            session = _pick(fallback, lambda s: 1, 1, nov, used)
        session.sort(key=lambda s: s.position)
        return ReflectionOutput(
            agent=[_reflection(s) for s in agent],
            user=[_reflection(s) for s in user],
            session=[_reflection(s) for s in session],
        )

    @staticmethod
    def _sentences_of(inp: ReflectionInput) -> list[_Sentence]:
        default_user = (inp.user_name or "").strip() or "The user"
        default_agent = (inp.agent_name or "").strip() or "The assistant"
        out: list[_Sentence] = []
        for turn in inp.conversation:
            author = turn.author.strip()
            if turn.role == "user":
                speaker = default_user if author.lower() in _GENERIC_AUTHORS else author
            else:
                speaker = author if author and author.lower() not in {"assistant", "agent", "ai"} else default_agent
            for sentence in _sentences(turn.text):
                text = sentence.strip()
                if _SMALL_TALK.match(text):
                    continue
                out.append(
                    _Sentence(text, speaker, turn.role, len(out), _content(text), _is_question(text), _expand(text))
                )
        return out

    # ------------------------------------------------------------------ 4. consolidation

    async def consolidate(self, inp: ConsolidationInput) -> str:
        out = self._consolidate(inp)
        self.meter.record(self.name, "consolidate", _usage(inp, out))
        return out

    @staticmethod
    def _consolidate(inp: ConsolidationInput) -> str:
        header = f"VERSION: {inp.version}"
        lines = inp.current.splitlines()
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines and _VERSION_RE.match(lines[0]):
            lines = lines[1:]
        headings: list[str] = []
        items: list[_Item] = []
        current_section = -1
        for raw in lines:
            line = raw.strip()
            if not line:
                continue
            if _HEADING_RE.match(line):
                headings.append(line)
                current_section = len(headings) - 1
                continue
            items.append(
                _Item(line, current_section, len(items), _content(line), _parse_claim(_BULLET_RE.sub("", line)))
            )
        has_sections = bool(headings)
        recent: int | None = None
        for refl in inp.reflections:
            for raw in refl.splitlines():
                text = raw.strip()
                if not text or _VERSION_RE.match(text) or _HEADING_RE.match(text):
                    continue
                line = text if _BULLET_RE.match(text) else f"- {text}"
                section = -1
                if has_sections:
                    match = _section_for(text, headings)
                    if match is None:
                        if recent is None:
                            existing = [i for i, h in enumerate(headings) if h.strip().upper() == "[RECENT]"]
                            if existing:
                                recent = existing[0]
                            else:
                                headings.append("[RECENT]")
                                recent = len(headings) - 1
                        match = recent
                    section = match
                items.append(_Item(line, section, len(items), _content(line), _parse_claim(_BULLET_RE.sub("", text))))
        # Newest first: drop older duplicates, then keep what fits.
        kept: list[_Item] = []
        seen_keys: set[str] = set()
        slots: set[tuple[str, str]] = set()
        for it in sorted(items, key=lambda x: -x.age):
            key = _normalise(_BULLET_RE.sub("", it.line))
            if not key or key in seen_keys:
                continue
            if any(_contained(it.tokens, k.tokens, 0.9) for k in kept):
                continue
            if it.claim is not None and it.claim.functional and (it.claim.subject, it.claim.key) in slots:
                continue
            seen_keys.add(key)
            if it.claim is not None and it.claim.functional:
                slots.add((it.claim.subject, it.claim.key))
            kept.append(it)
        budget = inp.word_limit - word_count(header)
        chosen: list[_Item] = []
        opened: set[int] = set()
        for it in kept:  # newest first, greedily
            cost = word_count(it.line)
            if it.section >= 0 and it.section not in opened:
                cost += word_count(headings[it.section])
            if cost <= budget:
                budget -= cost
                chosen.append(it)
                if it.section >= 0:
                    opened.add(it.section)
        out = [header]
        for section in [-1, *range(len(headings))]:
            members = sorted((it for it in chosen if it.section == section), key=lambda x: x.age)
            if not members:
                continue
            if section >= 0:
                out.append(headings[section])
            out.extend(it.line for it in members)
        return "\n".join(out)

    # ------------------------------------------------------------------ 5. profile

    async def distill_profile(self, inp: ProfileInput) -> ProfileOutput:
        out = self._profile(inp)
        self.meter.record(self.name, "profile", _usage(inp, out))
        return out

    @staticmethod
    def _profile(inp: ProfileInput) -> ProfileOutput:
        if inp.limit <= 0:
            return ProfileOutput()
        facts: list[tuple[str, frozenset[str], _Claim | None]] = []
        seen: set[str] = set()
        slots: set[tuple[str, str]] = set()
        for raw in inp.facts:  # newest first: the first of a single-valued slot wins
            text = _SPACES.sub(" ", raw).strip()
            key = _normalise(text)
            if not key or key in seen:
                continue
            claim = _parse_claim(text)
            if claim is not None and claim.functional and claim.positive:
                if (claim.subject, claim.key) in slots:
                    continue
                slots.add((claim.subject, claim.key))
            seen.add(key)
            facts.append((text, _content(text), claim))
        merged: list[tuple[str, frozenset[str]]] = []
        for i, (text, toks, _) in enumerate(facts):
            # A fact another (distinct) fact fully contains adds nothing: keep the fuller one.
            if toks and any(j != i and toks < other for j, (_, other, _) in enumerate(facts)):
                continue
            merged.append((text, toks))
        ranked = sorted(enumerate(merged), key=lambda x: (*_profile_rank(x[1][0]), x[0]))
        bullets = [text for _, (text, _) in ranked if _profile_rank(text)[0] < 5]
        rest = [text for _, (text, _) in ranked if _profile_rank(text)[0] >= 5]
        seen_items: set[str] = set()
        work: list[str] = []
        for item in inp.items:
            text = _SPACES.sub(" ", item).strip()
            if text and _normalise(text) not in seen_items:
                seen_items.add(_normalise(text))
                work.append(f"Working on: {text}")
        return ProfileOutput(bullets=[*bullets, *work, *rest][: inp.limit])
