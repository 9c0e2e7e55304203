"""Contact resolution through the caller's own memory (Gaia's ``message_user``).

"Text my girlfriend", "e-mail mom", "call Bobby": :func:`resolve_contact` searches the
caller's own memories for the relationship or nickname, extracts contacts (a name plus phone
numbers, e-mail addresses, @handles) from the facts it finds, and decides:

* ``"resolved"`` — one clear match: a single person with one address per channel;
* ``"ambiguous"`` — several people (or one person with several numbers): ask the user, with
  the candidates and a ready question;
* ``"not_found"`` — nobody, or a name without any address: ask, or tell the user.

Extraction is deterministic (regular expressions for phone numbers, e-mail addresses and
handles; relationship phrases such as "my girlfriend is Dana", "Dana is my girlfriend",
"the user's girlfriend is Dana" for names), so it needs no model. An ``extractor`` (e.g. an
LLM call) may replace it.

Only the caller's own memories are read (``user_id``'s partitions under every agent): never
another user's, and never an agent's shared memories, which other users' words may have formed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from memlane import inputs
from memlane.agent._binding import Binding, MemoryLike
from memlane.memory import AsyncMemory
from memlane.models import Fact

__all__ = [
    "RELATIONS",
    "Channel",
    "Contact",
    "ContactExtractor",
    "Resolution",
    "extract_contacts",
    "resolve_contact",
    "resolve_contact_sync",
]

Channel = Literal["any", "phone", "email", "handle"]

#: Relationship words and the other words people use for them (first word: the canonical one).
RELATIONS: Final[tuple[tuple[str, ...], ...]] = (
    ("mom", "mother", "mum", "mommy", "mama", "ma"),
    ("dad", "father", "daddy", "papa", "pa"),
    ("girlfriend", "gf"),
    ("boyfriend", "bf"),
    ("wife",),
    ("husband",),
    ("partner", "spouse"),
    ("brother", "bro"),
    ("sister", "sis"),
    ("grandma", "grandmother", "granny", "nana"),
    ("grandpa", "grandfather", "granddad", "grandad"),
    ("son",),
    ("daughter",),
    ("boss", "manager"),
    ("best friend", "bff"),
    ("doctor", "gp"),
    ("roommate", "flatmate"),
)
#: Longest reference accepted (characters).
MAX_REFERENCE_CHARS: Final = 200

# An address starts where a run of its characters starts, and its parts have RFC 5321 lengths:
# a match may not start anew inside a long run, so scanning a long memory stays linear (see _NAME).
_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}"
)
_PHONE = re.compile(r"(?<![\w+])\+?\d[\d ().-]{5,}\d(?!\w)")
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}")
_HANDLE = re.compile(r"(?<![\w@.])@[A-Za-z0-9_]{2,32}\b")
# Bounded repetitions (a name word is at most 40 characters): unbounded ones backtrack
# quadratically on a long capitalised or hyphenated run (16,000 characters took ~19 s, on the
# event loop).
_NAME = r"([A-Z][\w'’-]{0,39}(?:[ \t]{1,8}[A-Z][\w'’-]{0,39})?)(?![\w'’-])"
#: Capitalised words that start sentences or clauses but are not names.
_NOT_NAMES: Final = frozenset(
    [
        "My",
        "Our",
        "The",
        "Her",
        "His",
        "Their",
        "She",
        "He",
        "They",
        "It",
        "Is",
        "Was",
        "Number",
        "Phone",
        "Email",
        "E-mail",
        "Mobile",
        "Cell",
        "Call",
        "Text",
    ]
)
_POSSESSIVE = re.compile(r"\A(?:my|our|the)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Contact:
    """A person the caller knows, as found in their memories."""

    name: str | None = None
    """The person's name, when a memory gives it."""
    relation: str | None = None
    """The relationship or nickname the caller used ("girlfriend", "mom", "Bobby")."""
    phones: tuple[str, ...] = ()
    """Phone numbers, normalised to ``+`` and digits."""
    emails: tuple[str, ...] = ()
    """E-mail addresses (lower-case)."""
    handles: tuple[str, ...] = ()
    """Messaging handles (``@name``)."""
    sources: tuple[str, ...] = ()
    """Ids of the memories this came from."""

    def addresses(self, channel: Channel = "any") -> tuple[str, ...]:
        """Where the contact can be reached on ``channel`` (every address for ``"any"``)."""
        if channel == "phone":
            return self.phones
        if channel == "email":
            return self.emails
        if channel == "handle":
            return self.handles
        return self.phones + self.emails + self.handles

    @property
    def label(self) -> str:
        """How to name the contact to the user: "Dana (+15550100)"."""
        who = self.name or self.relation or "someone"
        where = ", ".join(self.addresses())
        return f"{who} ({where})" if where else who

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "name": self.name,
            "relation": self.relation,
            "phones": list(self.phones),
            "emails": list(self.emails),
            "handles": list(self.handles),
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class Resolution:
    """What :func:`resolve_contact` decided."""

    status: Literal["resolved", "ambiguous", "not_found"]
    reference: str
    """What the caller said ("my girlfriend")."""
    contact: Contact | None = None
    """The contact, when ``resolved``."""
    candidates: tuple[Contact, ...] = ()
    """``ambiguous``: the people to choose from; ``not_found``: people known without an address."""
    question: str | None = None
    """What to ask (or tell) the user when not ``resolved``."""
    address: str | None = None
    """``resolved``: the address for the requested channel (the first, for ``"any"``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (a tool result)."""
        return {
            "status": self.status,
            "reference": self.reference,
            "contact": self.contact.to_dict() if self.contact else None,
            "address": self.address,
            "candidates": [c.to_dict() for c in self.candidates],
            "question": self.question,
        }


#: ``extractor(reference, facts)`` -> contacts: replaces the deterministic extraction (e.g. an LLM).
ContactExtractor = Callable[[str, Sequence[Fact]], "list[Contact] | Awaitable[list[Contact]]"]


def _phone(raw: str) -> str | None:
    digits = re.sub(r"\D", "", raw)
    if not 7 <= len(digits) <= 15 or _DATE.fullmatch(raw.strip()):
        return None
    return ("+" if raw.lstrip().startswith("+") else "") + digits


def _addresses(text: str) -> tuple[list[str], list[str], list[str]]:
    emails = [e.lower() for e in _EMAIL.findall(text)]
    rest = _EMAIL.sub(" ", text)
    phones = [p for p in (_phone(m) for m in _PHONE.findall(rest)) if p]
    handles = _HANDLE.findall(rest)
    return list(dict.fromkeys(phones)), list(dict.fromkeys(emails)), list(dict.fromkeys(handles))


def _terms(relation: str) -> tuple[str, ...]:
    low = relation.lower()
    for group in RELATIONS:
        if low in group:
            return group
    return (low,)


def _phrase(term: str) -> str:
    return r"\s+".join(re.escape(w) for w in term.split())


def _clean_name(name: str | None) -> str | None:
    if not name:
        return None
    words = [w for w in name.split() if w not in _NOT_NAMES]
    # "Dana Her" -> "Dana": a second word must itself look like a name part
    return " ".join(words) if words else None


def _names_for(text: str, terms: Sequence[str]) -> list[str]:
    """Names a text gives for the relationship ``terms``."""
    found: list[str] = []
    for term in terms:
        t = _phrase(term)
        patterns = (
            # my girlfriend is Dana / my girlfriend, Dana / my girlfriend Dana / Alice's girlfriend is Dana
            rf"(?i:\b(?:my|our|the\s+user's|[\w-]{{1,40}}'s)\s+{t}(?:'s\s+name)?)\s*(?:(?i:is|was|named|called|"
            rf"is\s+called|is\s+named)\s+|,\s*|:\s*|\s+)(?i:the\s+)?{_NAME}",
            # Dana is my girlfriend / Dana, my girlfriend / Dana (my girlfriend)
            rf"{_NAME}\s*(?:,\s*|\(\s*|\s+(?i:is|was)\s+)(?i:my|our|the\s+user's|[\w-]{{1,40}}'s)\s+{t}\b",
        )
        for pat in patterns:
            for m in re.finditer(pat, text):
                name = _clean_name(m.group(1))
                if name and name.lower() not in {w.lower() for w in terms}:
                    found.append(name)
    return list(dict.fromkeys(found))


def _mentions(text: str, terms: Sequence[str]) -> bool:
    return any(re.search(rf"(?i)\b{_phrase(t)}\b", text) for t in terms)


def extract_contacts(reference: str, facts: Sequence[Fact]) -> list[Contact]:
    """The deterministic extractor: one contact per fact that mentions the reference (a
    relationship word or its synonyms, or a nickname), with the name the fact gives for it and
    the fact's phone numbers, e-mail addresses and handles."""
    relation = _relation(reference)
    terms = _terms(relation)
    out: list[Contact] = []
    for fact in facts:
        if not _mentions(fact.content, terms):
            continue
        phones, emails, handles = _addresses(fact.content)
        names = _names_for(fact.content, terms)
        if not _is_relation(reference):  # a nickname: the nickname is the name
            names = [n for n in names if n] or [_nickname(fact.content, relation)]
        for name in list[str | None](names) or [None]:
            out.append(Contact(name, relation, tuple(phones), tuple(emails), tuple(handles), (fact.id,)))
    return out


def _nickname(text: str, nickname: str) -> str:
    m = re.search(rf"(?i)\b{_phrase(nickname)}\b", text)
    return m.group(0) if m else nickname


def _relation(reference: str) -> str:
    return _POSSESSIVE.sub("", reference.strip()).strip(" ?!.,")


def _is_relation(reference: str) -> bool:
    rel = _relation(reference).lower()
    return bool(_POSSESSIVE.match(reference.strip())) or any(rel in group for group in RELATIONS)


def _merge(contacts: Sequence[Contact]) -> list[Contact]:
    """One contact per person: same name (any case), or same address; a nameless mention (only
    the relationship) joins the single named person when there is exactly one."""

    def join(a: Contact, b: Contact) -> Contact:
        return replace(
            a,
            name=a.name or b.name,
            phones=tuple(dict.fromkeys(a.phones + b.phones)),
            emails=tuple(dict.fromkeys(a.emails + b.emails)),
            handles=tuple(dict.fromkeys(a.handles + b.handles)),
            sources=tuple(dict.fromkeys(a.sources + b.sources)),
        )

    people: list[Contact] = []
    for c in [c for c in contacts if c.name] + [c for c in contacts if not c.name]:
        for i, p in enumerate(people):
            same_name = c.name is not None and p.name is not None and c.name.lower() == p.name.lower()
            if same_name or set(c.addresses()) & set(p.addresses()):
                people[i] = join(p, c)
                break
        else:
            people.append(c)
    named = [p for p in people if p.name]
    nameless = [p for p in people if not p.name]
    if len(named) == 1 and nameless:
        merged = named[0]
        for p in nameless:
            merged = join(merged, p)
        return [merged]
    return people


def _you(reference: str) -> str:
    ref = " ".join(reference.split())
    m = re.match(r"(?i)(my|our)\s+(.*)", ref)
    return f"your {m.group(2)}" if m else ref


_WHAT: Final[dict[str, str]] = {
    "any": "phone number or e-mail address",
    "phone": "phone number",
    "email": "e-mail address",
    "handle": "handle",
}


async def _resolve(
    engine: AsyncMemory, reference: str, user_id: str, channel: Channel, top_k: int, extractor: ContactExtractor | None
) -> Resolution:
    # a number or an address needs no memory
    phones, emails, handles = _addresses(reference)
    direct = Contact(None, None, tuple(phones), tuple(emails), tuple(handles))
    if direct.addresses(channel):
        return Resolution("resolved", reference, direct, address=direct.addresses(channel)[0])
    relation = _relation(reference)
    if not relation:
        return Resolution("not_found", reference, question="Who do you mean?")
    terms = _terms(relation)
    queries = [" ".join(terms), f"{relation} phone number e-mail contact"]
    result = await engine.search(queries, user_id=user_id, top_k=top_k)  # user_id alone: only the caller's own
    facts = [h.fact for h in result.hits]
    if extractor is not None:
        got = extractor(reference, facts)
        found = await got if inspect.isawaitable(got) else got
    else:
        found = extract_contacts(reference, facts)
        # "my girlfriend is Dana" + "Dana's number is ...": look the names up too
        names = sorted({c.name for c in found if c.name and not c.addresses(channel)})
        if names:
            more = await engine.search(names[:3], user_id=user_id, top_k=top_k)
            seen = {s for c in found for s in c.sources}
            for hit in more.hits:
                if hit.fact.id in seen:
                    continue
                ph, em, hd = _addresses(hit.fact.content)
                for name in names:
                    if re.search(rf"\b{re.escape(name)}\b", hit.fact.content):
                        found.append(Contact(name, relation, tuple(ph), tuple(em), tuple(hd), (hit.fact.id,)))
    people = _merge(found)
    reachable = [p for p in people if p.addresses(channel)]
    you = _you(reference)
    if not reachable:
        known = tuple(p for p in people if p.name)
        if known:
            known_names = " or ".join(p.name for p in known if p.name)
            q = f"I know {you} is {known_names}, but I have no {_WHAT[channel]} stored. What is it?"
            return Resolution("not_found", reference, candidates=known, question=q)
        return Resolution("not_found", reference, question=f"I don't know who {you} is. Who do you mean?")
    if len(reachable) == 1:
        person = reachable[0]
        kinds = [person.addresses(channel)] if channel != "any" else [person.phones, person.emails, person.handles]
        if all(len(k) <= 1 for k in kinds):
            return Resolution("resolved", reference, person, address=person.addresses(channel)[0])
        options = " or ".join(person.addresses(channel))
        who = person.name or you
        return Resolution(
            "ambiguous", reference, candidates=(person,), question=f"I have several for {who}: {options}. Which one?"
        )
    labels = " or ".join(p.label for p in reachable)
    return Resolution("ambiguous", reference, candidates=tuple(reachable), question=f"Which one do you mean: {labels}?")


async def resolve_contact(
    memory: MemoryLike,
    reference: str,
    *,
    user_id: str,
    channel: Channel = "any",
    top_k: int = 20,
    extractor: ContactExtractor | None = None,
) -> Resolution:
    """Resolve ``reference`` ("my girlfriend", "mom", "Bobby", or a number / address) to a
    contact through ``user_id``'s own memories.

    Args:
        memory: the engine (:class:`~memlane.AsyncMemory` or :class:`~memlane.Memory`).
        reference: who the caller means.
        user_id: the caller, fixed by the app.
        channel: the address wanted (``"phone"``, ``"email"``, ``"handle"``, or ``"any"``).
        top_k: memories searched.
        extractor: replaces the deterministic extraction: ``extractor(reference, facts)``
            returning (or awaiting to) a list of :class:`Contact`; merging and the decision
            stay the same.

    Raises:
        ConfigError: ``memory`` is None.
        InvalidInputError: an empty or oversized reference, a bad channel or top_k.
        ScopeError: a missing or malformed user_id.
    """
    user_id = inputs.identifier(user_id, "user_id")
    reference = inputs.clean_text(reference, "reference", max_chars=MAX_REFERENCE_CHARS)
    inputs.choice(channel, "channel", get_args(Channel))
    top_k = inputs.integer(top_k, "top_k", 1, 100)
    binding = Binding(memory, allow_none=True)
    engine = binding.require("resolve_contact")
    return await binding.run(_resolve(engine, reference, user_id, channel, top_k, extractor))


def resolve_contact_sync(
    memory: MemoryLike,
    reference: str,
    *,
    user_id: str,
    channel: Channel = "any",
    top_k: int = 20,
    extractor: ContactExtractor | None = None,
) -> Resolution:
    """Blocking :func:`resolve_contact` for the sync :class:`memlane.Memory`."""
    user_id = inputs.identifier(user_id, "user_id")
    reference = inputs.clean_text(reference, "reference", max_chars=MAX_REFERENCE_CHARS)
    inputs.choice(channel, "channel", get_args(Channel))
    top_k = inputs.integer(top_k, "top_k", 1, 100)
    binding = Binding(memory, allow_none=True)
    engine = binding.require("resolve_contact")
    return binding.run_sync(_resolve(engine, reference, user_id, channel, top_k, extractor))
