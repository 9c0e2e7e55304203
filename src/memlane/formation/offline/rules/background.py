"""Rules for where the speaker lives and comes from, their work, studies and languages."""

from __future__ import annotations

import re

from memlane.formation.offline.drafts import _Draft, _one, _registry, _Rule
from memlane.formation.offline.lexicon import _ADV, _DATE_RE, _HAVE_NOUN, _I, _VAL
from memlane.formation.offline.lexicon import _SPEAKER as _S

_RULES: list[_Rule] = []
_rule = _registry(_RULES)


@_rule("from", ("from",), rf"\bI\s+(?:am\s+{_ADV}(?:originally\s+)?from|(?:originally\s+)?come\s+from)\s+{_VAL}")
def _r_from(m: re.Match[str], _: str) -> list[_Draft]:
    if not re.search(r"[A-Z]", m["v"]):
        return []
    return _one(f"{_S} is from", m["v"], "location", max_words=8)


@_rule(
    "live",
    ("live", "living", "reside", "based", "located"),
    r"\bI\s+(?:currently\s+|now\s+|still\s+|also\s+)?(?P<neg>do\s+not\s+)?(?:live|am\s+(?:currently\s+|now\s+)?"
    r"living|reside|am\s+(?:currently\s+|now\s+)?(?:based|located)|have\s+(?:been\s+living|lived))\s+"
    rf"(?P<p>in|at|on|near|outside(?:\s+of)?|close\s+to)\s+{_VAL}",
)
def _r_live(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "does not live" if m["neg"] else "has lived" if "have" in m.group().lower() else "lives"
    return _one(f"{_S} {verb} {m['p'].lower()}", m["v"], "location", max_words=10)


@_rule(
    "moved",
    ("moved", "relocated", "moving", "relocating"),
    r"\bI\s+(?:recently\s+|just\s+|finally\s+|also\s+)?(?P<verb>moved|relocated|am\s+moving|am\s+relocating)\s+(?:back\s+)?(?P<p>to|from|here\s+from)\s+"
    + _VAL,
)
def _r_moved(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "is moving" if m["verb"].lower().startswith("am") else "moved"
    return _one(f"{_S} {verb} {m['p'].lower()}", m["v"], "location", max_words=12)


@_rule("born", ("born",), rf"\bI\s+was\s+born\s+(?P<p>in|on|at)\s+{_VAL}")
def _r_born(m: re.Match[str], _: str) -> list[_Draft]:
    cat = "age" if _DATE_RE.match(m["v"].strip()) and m["p"].lower() == "on" else "location"
    return _one(f"{_S} was born {m['p'].lower()}", m["v"], cat, max_words=10)


@_rule("grew_up", ("grew up",), rf"\bI\s+grew\s+up\s+(?P<p>in|on|near|around|outside(?:\s+of)?)\s+{_VAL}")
def _r_grew_up(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} grew up {m['p'].lower()}", m["v"], "location", max_words=10)


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
    return _one(f"{_S} {verb} {'at' if p == 'by' else p}", m["v"], "work", max_words=10)


@_rule(
    "new_job",
    ("job", "hired", "started working"),
    r"\bI\s+(?:just\s+|recently\s+|finally\s+)?(?:got\s+(?:a\s+|the\s+|my\s+first\s+)?(?:new\s+)?job|got\s+hired|"
    rf"started\s+(?:a\s+new\s+job|working|my\s+new\s+job))\s+(?P<p>at|for|as|in)\s+{_VAL}",
)
def _r_new_job(m: re.Match[str], _: str) -> list[_Draft]:
    verb = "started a new job" if "started" in m.group().lower() else "got a job"
    return _one(f"{_S} {verb} {m['p'].lower()}", m["v"], "work", max_words=12)


@_rule(
    "teach_own", ("teach", "own", "run", "manage"), rf"\bI\s+(?:also\s+|now\s+)?(?P<verb>teach|own|run|manage)\s+{_VAL}"
)
def _r_teach_own(m: re.Match[str], _: str) -> list[_Draft]:
    verb = m["verb"].lower()
    if verb != "teach" and not re.match(r"\s*(?:a|an|my\s+own|two|three|several)\b", m["v"], _I):
        return []
    if verb == "own" and not re.search(_HAVE_NOUN, m["v"], _I):
        return []
    return _one(f"{_S} {verb}{'es' if verb == 'teach' else 's'}", m["v"], "work", max_words=10)


@_rule(
    "study",
    ("stud", "major"),
    r"\bI\s+(?:currently\s+|now\s+|also\s+)?(?:study|am\s+(?:currently\s+|now\s+)?(?:studying|majoring\s+in|doing\s+"
    r"(?:a|my)\s+(?:degree|phd|masters?|master's|bachelor's)\s+in)|major\s+in)\s+(?!for\b|hard\b|up\b|with\b|a\s+lot\b)"
    + _VAL,
)
def _r_study(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} studies", m["v"], "education", max_words=10)


@_rule(
    "graduated", ("graduated",), rf"\bI\s+(?:just\s+|recently\s+|finally\s+)?graduated\s+(?P<p>from|in|with)\s+{_VAL}"
)
def _r_graduated(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} graduated {m['p'].lower()}", m["v"], "education", max_words=12)


@_rule(
    "degree",
    ("degree", "phd", "master", "diploma", "mba"),
    r"\bI\s+(?:also\s+)?have\s+(?:a|an)\s+(?P<k>(?:(?:bachelor'?s|master'?s|masters|phd|doctorate|associate'?s|law|"
    rf"medical|college|university)\s+)?(?:degree|diploma)|phd|master'?s|masters|mba)\s+in\s+{_VAL}",
)
def _r_degree(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} has a {m['k'].lower()} in", m["v"], "education", max_words=10)


@_rule(
    "learning",
    ("learning",),
    rf"\bI\s+am\s+(?:currently\s+|also\s+|now\s+)?learning\s+(?P<to>to\s+|how\s+to\s+)?(?!a\s+lot\b|so\s+much\b|more\b|lots\b|from\b|about\b){_VAL}",
)
def _r_learning(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} is learning{' ' + m['to'].strip() if m['to'] else ''}", m["v"], "education", max_words=10)


@_rule(
    "speak",
    ("speak", "fluent", "native"),
    r"\bI\s+(?:also\s+|can\s+)?(?:speak|am\s+fluent\s+in|am\s+a\s+native\s+speaker\s+of)\s+(?P<v>(?-i:[A-Z])[^.!?;:()]*)",
)
def _r_speak(m: re.Match[str], _: str) -> list[_Draft]:
    return _one(f"{_S} speaks", m["v"], "languages", max_words=8)
