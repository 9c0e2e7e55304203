"""Word lists and the regex fragments built from them, shared by the extraction rules and the ranking.

Fragments (``_NAME``, ``_REL``, ``_VAL``, ...) are strings meant to be embedded in larger patterns
compiled case-insensitively; ``(?-i:...)`` marks the parts that must keep their case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The word tables below keep their packed layout (the formatter skips them): one word a line, as the
# formatter would have them, makes a list of 60 words 60 lines long and no easier to read.

_I = re.IGNORECASE
_SPEAKER = "\x00"
"""Placeholder for the speaker's name inside a draft fact (resolved once the batch is read)."""


def _alt(items: Iterable[str]) -> str:
    """A regex alternation of literal phrases, longest first, spaces matching any whitespace."""
    return "|".join(re.escape(x).replace(r"\ ", r"\s+") for x in sorted(set(items), key=len, reverse=True))


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
_DEGREE_WORDS = (
    r"(?:bit|little|lot|tad|kind|sort|couple|few|mess|wreck|total\s+mess|huge\s+mess|bit\s+of|"
    r"fan\s+of\s+(?:it|that|this))"
)
_EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
_PHONE = r"\+?\d[\d\s().-]{5,}\d"

# Words that name a personal detail the rules are for (home, work, contact, name, family, pets, health,
# age, studies, languages): a first-person statement holding one that no rule read is reported unread.
_DETAIL_WORDS = [
    "live", "lives", "lived", "living", "home", "moved", "move", "moving", "relocated", "relocating", "city",
    "apartment", "house", "work", "works", "worked", "working", "job", "employer", "company", "boss", "career",
    "retired", "email", "mail", "phone", "address", "name", "named", "called", "allergic", "allergy",
    "diet", "vegan", "vegetarian", "medication", "diagnosed", "married", "engaged", "divorced", "born", "birthday",
    "study", "studies", "studying", "school", "college", "university", "degree", "speak",
    "speaks", "religion",
]  # fmt: skip
_TOKEN = re.compile(r"\w+")
_DETAIL_CUES = frozenset(_TOKEN.findall(w.lower())[-1] for w in [*_DETAIL_WORDS, *_REL_FORMS])
"""Checked word by word (a set lookup; a regex alternation of these is ten times slower)."""

_GENERIC_AUTHORS = frozenset({"", "user", "human", "me", "unknown", "customer", "client", "anonymous"})
