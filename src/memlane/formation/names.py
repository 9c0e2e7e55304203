"""What formation calls the user: a person's name, never a raw id.

Facts name their subject. A turn's author may be a display name ("Sam", "Ana Lima") or an
account id ("u_8f3a", "5f2c9e01", "sam@example.org"); only a name is a subject. Otherwise the
user's name once known (a stored "The user's name is Alice" fact), else "the user".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: A name as people write it: one to four words of letters (a hyphen or an apostrophe inside a
#: word, a trailing dot for an initial), at most 24 letters a word.
_NAME = re.compile(r"[^\W\d_]{1,24}(?:['’-][^\W\d_]{1,24})*\.?(?:\s+[^\W\d_]{1,24}(?:['’-][^\W\d_]{1,24})*\.?){0,3}")
#: Authors that name no one in particular.
GENERIC_AUTHORS = frozenset({"", "user", "human", "me", "unknown", "customer", "client", "anonymous", "you"})
#: A stored fact that gives the user's name ("The user's name is Alice", "The user goes by Al").
_NAME_FACT = re.compile(
    r"^the\s+user(?:'s\s+(?:first\s+|full\s+)?name\s+is|\s+is\s+(?:named|called)|\s+goes\s+by|"
    r"\s+prefers\s+to\s+be\s+called)\s+(?P<n>.+?)\.?$",
    re.IGNORECASE,
)


def person_name(author: str | None) -> str | None:
    """``author`` as a person's name, or None when it is an id or a generic role.

    ``"Sam"`` -> ``"Sam"``, ``"ana lima"`` -> ``"Ana Lima"``; ``"u_8f3a"``, ``"user-42"``,
    ``"sam@example.org"``, ``"user"`` -> None."""
    text = " ".join((author or "").split())
    if text.lower() in GENERIC_AUTHORS or not _NAME.fullmatch(text):
        return None
    return " ".join(w[:1].upper() + w[1:] if w.islower() else w for w in text.split())


def name_from_id(user_id: str | None) -> str | None:
    """A display name from a user id that looks like one (``sam`` -> ``Sam``), else None."""
    if user_id and user_id.isalpha() and len(user_id) <= 24 and user_id.lower() not in GENERIC_AUTHORS:
        return user_id[:1].upper() + user_id[1:]
    return None


def name_in_facts(facts: Iterable[str]) -> str | None:
    """The user's name from their stored facts (newest first: the first one that gives it)."""
    for text in facts:
        m = _NAME_FACT.match(" ".join(text.split()))
        if m is not None:
            name = person_name(m["n"])
            if name is not None:
                return name
    return None
