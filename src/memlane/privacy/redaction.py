"""PII redaction before storage: detectors, the three modes and :class:`Redactor` (pure, no I/O).

Detectors (``kinds``), each a regular expression that finds candidates and a check that
keeps only real ones:

* ``email``: ``name@domain.tld``;
* ``phone``: ``+`` and 8-15 digits, or 10-15 digits in groups (``(555) 123-4567``,
  ``020 7946 0958``); dates (``2024-05-17``, ``17.05.2024``) and shorter numbers are left;
* ``card``: 13-19 digits (optionally in groups of spaces or dashes) starting 2-6 that pass
  the Luhn check;
* ``iban``: a country code, two check digits and 11-30 letters or digits (compact or in
  groups of four) that pass the ISO 13616 mod-97 check;
* ``ip``: IPv4 (not after ``v``, ``version``, ``release`` or ``build``, not part of a longer
  dotted number) and IPv6 (checked by :mod:`ipaddress`);
* user patterns: ``{name: regex}`` (or a list of regexes, named ``custom``).

Modes: ``mask`` writes ``[email]``; ``hash`` writes ``[email:1f2e3d4c5b6a]``, an HMAC-SHA256
of the normalised value (an e-mail in lower case, a number's digits, an IBAN without spaces)
under the memory's key, so equal values give equal tokens and still match each other in
search; ``drop`` removes the value (and one space beside it).

:class:`Redactor` applies a configuration to a text (:meth:`Redactor.redact`) or to every
string inside JSON-like data (:meth:`Redactor.redact_value`: dict values, list items).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from memlane.errors import InvalidInputError

__all__ = [
    "KEY_META",
    "KINDS",
    "MODES",
    "Detector",
    "Finding",
    "RedactSpec",
    "RedactionConfig",
    "RedactionKind",
    "RedactionMode",
    "Redactor",
    "as_config",
    "iban_valid",
    "luhn_valid",
]

RedactionKind: TypeAlias = Literal["email", "phone", "card", "iban", "ip"]
RedactionMode: TypeAlias = Literal["mask", "hash", "drop"]
#: The built-in detectors, in the order they run (user patterns run first).
KINDS: tuple[RedactionKind, ...] = ("email", "iban", "card", "ip", "phone")
MODES: tuple[RedactionMode, ...] = ("mask", "hash", "drop")
#: Hex characters of a hash-mode token (48 bits).
TOKEN_HEX = 12
#: The ``meta`` key under which a store keeps the hash key it generated (``memlane migrate``
#: copies it, so tokens written before and after a copy still match).
KEY_META = "redaction_key"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


# ---------------------------------------------------------------------------- checks
def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of a payment card number (digits only)."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """The ISO 13616 check of an IBAN (spaces allowed): 15-34 characters, country code,
    and the number (country and check digits moved to the end, letters as 10-35) mod 97 is 1."""
    s = iban.replace(" ", "").upper()
    if not (15 <= len(s) <= 34) or not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]+", s):
        return False
    moved = s[4:] + s[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


# ---------------------------------------------------------------------------- detectors
@dataclass(frozen=True)
class Finding:
    """One detected value: its detector, where it is in the text, and the value."""

    kind: str
    start: int
    end: int
    value: str


@dataclass(frozen=True)
class Detector:
    """A named detector: ``pattern`` finds candidates, ``check`` (on the match) keeps the
    real ones, ``normal`` turns a value into the form hash mode keys on; ``needs``, when set,
    is a quick test a text must pass for ``pattern`` to be tried (most texts have no ``@``)."""

    kind: str
    pattern: re.Pattern[str]
    check: Callable[[re.Match[str]], bool] = lambda m: True
    normal: Callable[[str], str] = lambda v: v
    needs: re.Pattern[str] | None = None

    def find(self, text: str) -> Iterable[Finding]:
        if self.needs is not None and self.needs.search(text) is None:
            return
        for m in self.pattern.finditer(text):
            if self.check(m):
                yield Finding(self.kind, m.start(), m.end(), m.group())


def _digits(value: str) -> str:
    return re.sub(r"\D", "", value)


_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-])"
)

_CARD = re.compile(r"(?<![\w.+-])[2-6]\d{3}(?:([ -]?)\d{2,4}){2,4}(?:[ -]?\d{1,4})?(?![\w]|[.-]\d)")


#: How card numbers are grouped when written with separators (4-4-4-4, Amex 4-6-5, ...).
_CARD_GROUPS = frozenset(
    {(4, 4, 4, 4), (4, 6, 5), (4, 6, 4), (4, 4, 4, 4, 3), (4, 4, 4, 3), (4, 4, 4, 2), (4, 4, 4, 1)}
)


def _card_ok(m: re.Match[str]) -> bool:
    text = m.group()
    seps = set(re.findall(r"\D", text))
    if len(seps) > 1 or (seps and tuple(len(g) for g in re.split(r"\D", text)) not in _CARD_GROUPS):
        return False
    if not seps and _after_id_word(m):  # an IMEI, a serial number: Luhn-checked too
        return False
    return 13 <= len(_digits(text)) <= 19 and luhn_valid(_digits(text))


_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?|[A-Z0-9]{11,30})(?![A-Za-z0-9])"
)

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)")
_VERSION_BEFORE = re.compile(r"(?:\bv|\bversion|\brelease|\bbuild|\bver\.?|\brev\.?)\s*$", re.IGNORECASE)
_IPV6 = re.compile(r"(?<![\w:.])(?=[0-9A-Fa-f:]*::|(?:[0-9A-Fa-f]{1,4}:){7})[0-9A-Fa-f:]{3,39}(?![\w:])")


def _ipv4_ok(m: re.Match[str]) -> bool:
    return _VERSION_BEFORE.search(m.string[max(0, m.start() - 12) : m.start()]) is None


def _ipv6_ok(m: re.Match[str]) -> bool:
    text = m.group()
    if sum(c in "0123456789abcdefABCDEF" for c in text) < 2:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _ip_normal(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:  # pragma: no cover - only checked addresses reach here
        return value


_PHONE = re.compile(
    r"(?<![\w+.:/-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?"
    r"(?:\d{6,13}|\d{1,5}(?:[ .-]\d{1,8}){0,5})(?![\w]|[.:/-]\d)"
)
_DATE = re.compile(r"^(?:\d{4}[-./]\d{1,2}[-./]\d{1,2}(?:$|\D)|\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$)")
#: Words before a run of digits that make it an identifier, not a phone number or a card.
_ID_BEFORE = re.compile(
    r"(?:\border|\binvoice|\bserial|\btracking|\bref|\breference|\bid|\bsku|\bisbn|\bticket|\bimei|#)"
    r"\W{0,3}(?:no\.?|number)?\W{0,3}$",
    re.IGNORECASE,
)


def _after_id_word(m: re.Match[str]) -> bool:
    return _ID_BEFORE.search(m.string[max(0, m.start() - 24) : m.start()]) is not None


def _phone_ok(m: re.Match[str]) -> bool:
    text = m.group()
    n = len(_digits(text))
    dotted = re.fullmatch(r"\d+(?:\.\d+)+", text) and not re.fullmatch(r"\d{3}\.\d{3}\.\d{4}", text)
    if _DATE.match(text) or dotted or _after_id_word(m):
        return False
    if text.startswith("+"):
        return 8 <= n <= 15
    if "(" in text:
        return 9 <= n <= 15
    groups = re.split(r"[ .-]", text)
    if len(groups) == 1:  # one unbroken run of digits: only a 10-11 digit national number
        return (10 <= n <= 11 and text[0] == "0") or (n == 10 and text[0] in "23456789")
    return 10 <= n <= 15 and len({s for s in re.findall(r"[ .-]", text)}) == 1


def _phone_normal(value: str) -> str:
    return ("+" if value.startswith("+") else "") + _digits(value)


_AT, _DIGIT, _DOTTED, _COLONS = re.compile("@"), re.compile(r"\d"), re.compile(r"\d\.\d"), re.compile(r":.*:")

BUILTIN: dict[RedactionKind, tuple[Detector, ...]] = {
    "email": (Detector("email", _EMAIL, normal=str.lower, needs=_AT),),
    "iban": (
        Detector(
            "iban",
            _IBAN,
            check=lambda m: iban_valid(m.group()),
            normal=lambda v: v.replace(" ", "").upper(),
            needs=_DIGIT,
        ),
    ),
    "card": (Detector("card", _CARD, check=_card_ok, normal=_digits, needs=_DIGIT),),
    "ip": (
        Detector("ip", _IPV4, check=_ipv4_ok, normal=_ip_normal, needs=_DOTTED),
        Detector("ip", _IPV6, check=_ipv6_ok, normal=_ip_normal, needs=_COLONS),
    ),
    "phone": (Detector("phone", _PHONE, check=_phone_ok, normal=_phone_normal, needs=_DIGIT),),
}


# ---------------------------------------------------------------------------- configuration
class RedactionConfig(BaseModel):
    """What to redact before anything is stored (``AsyncMemory(redact=...)``, YAML
    ``memory.redact``).

    Attributes:
        kinds: built-in detectors: ``email``, ``phone``, ``card``, ``iban``, ``ip`` (default: all).
        mode: ``mask`` (``[email]``), ``hash`` (``[email:1f2e3d4c5b6a]``, equal values equal
            tokens) or ``drop`` (the value removed).
        patterns: user detectors, ``{name: regex}`` (the token is ``[name]``) or a list of
            regexes (named ``custom``).
        key: hash mode's HMAC key. None: ``$MEMLANE_REDACT_KEY``, else a random key the store
            keeps (so tokens stay the same across restarts). Never printed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kinds: tuple[RedactionKind, ...] = KINDS
    mode: RedactionMode = "mask"
    patterns: dict[str, str] = Field(default_factory=dict)
    key: SecretStr | None = None

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, Sequence):
            unknown = [k for k in value if k not in KINDS]
            if unknown:
                raise ValueError(f"unknown redaction kind(s) {unknown}; kinds are: {', '.join(KINDS)}")
            return tuple(dict.fromkeys(value))
        return value

    @field_validator("patterns", mode="before")
    @classmethod
    def _patterns(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple):
            if len(value) == 1:
                value = {"custom": value[0]}
            else:  # several unnamed patterns: one alternation named custom
                value = {"custom": "|".join(f"(?:{p})" for p in value)} if value else {}
        if isinstance(value, Mapping):
            for name, regex in value.items():
                if not isinstance(name, str) or not _NAME.match(name):
                    raise ValueError(f"pattern name {name!r} must be lower-case letters, digits and _ (a letter first)")
                if not isinstance(regex, str) or not regex:
                    raise ValueError(f"pattern {name!r} must be a non-empty regular expression")
                try:
                    compiled = re.compile(regex)
                except re.error as exc:
                    raise ValueError(f"pattern {name!r} is not a valid regular expression: {exc}") from None
                if compiled.match(""):
                    raise ValueError(f"pattern {name!r} matches the empty string")
        return value

    def __repr__(self) -> str:
        key = "set" if self.key is not None else None
        return f"RedactionConfig(kinds={self.kinds!r}, mode={self.mode!r}, patterns={self.patterns!r}, key={key!r})"

    __str__ = __repr__


#: What ``redact=`` accepts: None (off), True (every built-in kind, masked), a list of kind
#: names and custom regexes, a dict of :class:`RedactionConfig`'s fields, or a config.
RedactSpec: TypeAlias = "RedactionConfig | Sequence[str] | Mapping[str, Any] | bool | None"


def as_config(spec: Any) -> RedactionConfig | None:
    """``redact=``'s value as a :class:`RedactionConfig` (None: redaction off).

    Raises:
        InvalidInputError: an unknown kind, mode or a bad pattern (the message says which).
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        return RedactionConfig()
    if isinstance(spec, RedactionConfig):
        return spec
    try:
        if isinstance(spec, Mapping):
            return RedactionConfig.model_validate(dict(spec))
        if isinstance(spec, Sequence) and not isinstance(spec, str | bytes):
            if not all(isinstance(item, str) for item in spec):
                raise InvalidInputError("redact= takes detector names and regex patterns (strings)")
            typos = [s for s in spec if s not in KINDS and re.fullmatch(r"[a-z_]+", s)]
            if typos:  # a bare word is a misspelt kind far more often than a pattern
                raise InvalidInputError(
                    f"unknown redaction kind(s) {typos}; kinds are: {', '.join(KINDS)} "
                    f"(to redact a word, give a pattern such as '\\b{typos[0]}\\b')"
                )
            kinds = [s for s in spec if s in KINDS]
            patterns = [s for s in spec if s not in KINDS]
            if not spec:
                raise InvalidInputError("redact=[] names nothing to redact; give kinds (email, phone, ...) or None")
            return RedactionConfig.model_validate({"kinds": kinds, "patterns": patterns})
    except ValueError as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError(f"redact: {_first_error(exc)}") from None
    raise InvalidInputError(
        f"redact= must be None, True, a list of kinds / regexes, a dict or a RedactionConfig, got {type(spec).__name__}"
    )


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else str(first["msg"])
    return str(exc)


# ---------------------------------------------------------------------------- the redactor
class Redactor:
    """Applies detectors to texts: ``Redactor(detectors, mode, key).redact(text)``.

    Args:
        detectors: the detectors, run in order; a span one has claimed is not looked at again.
        mode: ``mask``, ``hash`` or ``drop``.
        key: the HMAC key of hash mode (required there; ignored otherwise). Never shown.
    """

    def __init__(self, detectors: Sequence[Detector], mode: RedactionMode = "mask", key: bytes | None = None) -> None:
        if mode not in MODES:
            raise InvalidInputError(f"redaction mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "hash" and not key:
            raise InvalidInputError("hash mode needs a key")
        self.detectors = tuple(detectors)
        self.mode: RedactionMode = mode
        self._key = key or b""

    @classmethod
    def from_config(cls, config: RedactionConfig, key: bytes | None = None) -> Redactor:
        """The redactor ``config`` describes (``key``: hash mode's, when not in the config)."""
        detectors = [Detector(name, re.compile(regex)) for name, regex in config.patterns.items()]
        detectors += [d for kind in KINDS if kind in config.kinds for d in BUILTIN[kind]]
        if config.key is not None:
            key = config.key.get_secret_value().encode()
        return cls(detectors, config.mode, key if config.mode == "hash" else None)

    def __repr__(self) -> str:
        kinds = sorted({d.kind for d in self.detectors})
        return f"Redactor(kinds={kinds}, mode={self.mode!r})"

    def findings(self, text: str) -> list[Finding]:
        """Every value the detectors find in ``text``, in text order, without overlaps (an
        earlier detector wins a span)."""
        taken: list[Finding] = []
        for det in self.detectors:
            for f in det.find(text):
                if f.start < f.end and all(f.end <= t.start or f.start >= t.end for t in taken):
                    taken.append(f)
        return sorted(taken, key=lambda f: f.start)

    def token(self, kind: str, value: str) -> str:
        """What replaces ``value`` (mask and hash modes)."""
        if self.mode == "mask":
            return f"[{kind}]"
        normal = next((d.normal for d in self.detectors if d.kind == kind), str)(value)
        digest = hmac.new(self._key, f"{kind}\x1f{normal}".encode(), hashlib.sha256).hexdigest()
        return f"[{kind}:{digest[:TOKEN_HEX]}]"

    def redact(self, text: str) -> str:
        """``text`` with every detected value replaced (or removed in drop mode)."""
        found = self.findings(text)
        if not found:
            return text
        out: list[str] = []
        pos = 0
        for f in found:
            start, end = f.start, f.end
            if self.mode == "drop":
                if start > pos and text[start - 1] == " " and (end == len(text) or text[end] in " .,;:!?)"):
                    start -= 1  # "call +44 20 7946 0958 now" -> "call now"
                elif start == 0 and end < len(text) and text[end] == " ":
                    end += 1
                out.append(text[pos:start])
            else:
                out.append(text[pos:start])
                out.append(self.token(f.kind, f.value))
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def redact_value(self, value: Any) -> Any:
        """Every string inside JSON-like ``value`` redacted (dict values and list items; keys
        are kept); other values unchanged."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value
