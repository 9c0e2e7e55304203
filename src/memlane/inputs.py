"""Input validation and normalisation at the public API boundary.

Every public method of :class:`memlane.AsyncMemory` passes its arguments through these
functions before touching a store, so bad input fails with a typed error
(:class:`~memlane.errors.InvalidInputError`, or :class:`~memlane.errors.ScopeError` for
user/agent/session/app ids) whose message says what was wrong, and nothing is written.

The rules, in one place:

- **Text** (memories, queries): ``str`` (or UTF-8 ``bytes``), no lone surrogates, at least one
  visible character (whitespace, control and zero-width characters alone are "empty"), at
  most :data:`MAX_TEXT_CHARS` characters.
- **Ids** (``user_id``, ``agent_id``, ``session_id``, ``app``, fact and job ids): ``str``,
  not blank after ``strip()``, at most :data:`MAX_ID_CHARS` characters, no lone surrogates.
  Any other character is allowed (the stores encode ids, so separators are safe). The id is
  kept as given, not stripped.
- **Metadata**: a mapping with ``str`` keys and JSON values (``None``, ``bool``, ``int`` within
  64 bits, finite ``float``, ``str``, lists and mappings of these), nested at most
  :data:`MAX_METADATA_DEPTH` deep and at most :data:`MAX_METADATA_CHARS` characters as JSON.
- **Filters**: a mapping with non-empty ``str`` keys and JSON scalar values; a key with dots
  is a path into nested metadata (``"sender.id"``), so none of its parts may be empty.
- **Timestamps**: a ``datetime`` or an ISO-8601 string, returned timezone-aware in UTC
  (a naive time is taken as UTC).
- **Counts** (``top_k``, ``limit``, ...): an ``int`` (not a ``bool``) within the stated range.
- **Flags**: a ``bool``. **Choices** (``scope``, job ``status``): one of the listed strings.
- **Memory kinds** (``add(kind=...)``): ``fact``, ``message``, ``description`` or ``custom``
  (``document`` goes through ``add_document``; ``fragment`` rows are made by memlane).
- **Scopes** (``add(scope=...)``): ``user``, ``agent`` or ``room``, or elizaOS's ``private``
  (= ``user``) and ``shared`` (= ``agent``).
- **Embedding priorities** (``add(embed=...)``): ``now``, ``high``, ``normal`` or ``low``.
"""

from __future__ import annotations

import json
import math
import operator
import re
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time
from typing import Any, cast

from memlane.errors import InvalidInputError, ScopeError
from memlane.models import SCOPE_ALIASES, EmbedPriority, FactKind, FactScope

#: Longest text accepted for one memory or query (characters). Longer input is rejected,
#: not truncated, so nothing is stored half.
MAX_TEXT_CHARS = 32_000
#: Longest id accepted (user, agent, session, app, fact and job ids), in characters.
MAX_ID_CHARS = 256
#: Deepest nesting of lists and mappings accepted in ``metadata`` (the mapping itself is level 1).
MAX_METADATA_DEPTH = 32
#: Largest ``metadata`` accepted, in characters of its JSON encoding.
MAX_METADATA_CHARS = 65_536
#: Integers in metadata and filters must fit in 64 bits (what SQL databases store).
MAX_INT = 2**63 - 1

#: Unicode categories that draw nothing on their own: controls, format characters (zero-width
#: space, joiners, BOM, bidi marks), surrogates, unassigned code points, separators and
#: combining marks with no base character.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp", "Mn", "Me"})
#: Letters and symbols that render as blank space (Hangul fillers, braille blank).
_BLANK_CHARS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def show(value: object, limit: int = 60) -> str:
    """A short description of a rejected value for an error message: its type and a
    clipped ``repr`` (a 1 MB string must not become a 1 MB message)."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = "<unprintable>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(value).__name__} {text}"


#: An ASCII character that draws something (the others are control characters and space).
_VISIBLE_ASCII = re.compile(r"[!-~]")


def has_visible(text: str) -> bool:
    """True when ``text`` has at least one character that draws something."""
    if text.isascii():  # one regex scan in C instead of a generator step per character
        return _VISIBLE_ASCII.search(text) is not None
    return any(
        not ch.isspace() and ch not in _BLANK_CHARS and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        for ch in text
    )


def _surrogate_at(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def clean_text(value: object, what: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """A memory or query text, checked: ``str`` or UTF-8 ``bytes``, valid UTF-8, at least one
    visible character, at most :data:`MAX_TEXT_CHARS` characters. Returned unchanged."""
    if type(value) is str and value.isascii() and len(value) <= max_chars and _VISIBLE_ASCII.search(value):
        return value  # plain ASCII with a visible character: valid UTF-8, not empty (the checks below agree)
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from exc
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text, got {show(value)}")
    at = _surrogate_at(value)
    if at is not None:
        raise InvalidInputError(f"{what} is not valid UTF-8 (lone surrogate at {at})")
    if len(value) > max_chars:
        raise InvalidInputError(f"{what} has {len(value)} characters; the limit is {max_chars}")
    if not value.strip():
        raise InvalidInputError(f"{what} is empty")
    if not has_visible(value):
        raise InvalidInputError(
            f"{what} is empty: it has only invisible characters (zero-width, control or format characters)"
        )
    return value


# --------------------------------------------------------------------------- ids


def identifier(value: object, name: str, *, error: type[InvalidInputError] = ScopeError) -> str:
    """A required id: ``str``, not blank, at most :data:`MAX_ID_CHARS` characters, valid UTF-8.

    Args:
        name: the argument's name, for the message.
        error: :class:`ScopeError` for user/agent/session/app ids (the default),
            :class:`InvalidInputError` for fact and job ids.
    """
    if value is None:
        raise error(f"{name} is required: pass {name}=...")
    if not isinstance(value, str):
        raise error(f"{name} must be a string, got {show(value)}")
    if not value.strip():
        raise error(f"{name} must be a non-empty string, got {value!r}")
    if len(value) > MAX_ID_CHARS:
        raise error(f"{name} has {len(value)} characters; the limit is {MAX_ID_CHARS}")
    at = _surrogate_at(value)
    if at is not None:
        raise error(f"{name} is not valid UTF-8 (lone surrogate at {at})")
    return value


def optional_id(value: object, name: str, *, error: type[InvalidInputError] = ScopeError) -> str | None:
    """Like :func:`identifier`, but ``None`` (not given) is allowed."""
    return None if value is None else identifier(value, name, error=error)


def scope_ids(
    user_id: object, agent_id: object, session_id: object = None
) -> tuple[str | None, str | None, str | None]:
    """The optional ``user_id``, ``agent_id`` and ``session_id`` of a call, each checked."""
    return optional_id(user_id, "user_id"), optional_id(agent_id, "agent_id"), optional_id(session_id, "session_id")


def reflection_scope(scope: object, user_id: object, agent_id: object, session_id: object) -> None:
    """Check a reflection scope name and that the id it is keyed by was given."""
    choice(scope, "scope", ("agent", "user", "session"))
    scope_ids(user_id, agent_id, session_id)
    needed = {"agent": ("agent_id", agent_id), "user": ("user_id", user_id), "session": ("session_id", session_id)}
    name, value = needed[str(scope)]
    if value is None:
        raise ScopeError(f"{scope!s}-scope reflections need {name}=...")


# --------------------------------------------------------------------------- scalars


def integer(value: object, name: str, lo: int, hi: int) -> int:
    """An ``int`` in ``lo..hi`` (``bool`` is refused: ``True`` is not a count)."""
    if isinstance(value, bool | float | str | bytes):
        raise InvalidInputError(f"{name} must be a whole number from {lo} to {hi}, got {show(value)}")
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidInputError(f"{name} must be a whole number from {lo} to {hi}, got {show(value)}") from None
    if not lo <= number <= hi:
        raise InvalidInputError(f"{name} must be from {lo} to {hi}, got {number}")
    return number


def optional_integer(value: object, name: str, lo: int, hi: int) -> int | None:
    """Like :func:`integer`, but ``None`` is allowed."""
    return None if value is None else integer(value, name, lo, hi)


def flag(value: object, name: str) -> bool:
    """A ``bool`` (``"no"`` or ``0`` are refused rather than read as truthy/falsy)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {show(value)}")
    return value


def optional_number(value: object, name: str, lo: float, hi: float) -> float | None:
    """A real number in ``lo..hi``, or None (``bool`` and NaN are refused)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be a number from {lo:g} to {hi:g}, got {show(value)}")
    return float(value)


def optional_flag(value: object, name: str) -> bool | None:
    """Like :func:`flag`, but ``None`` is allowed."""
    return None if value is None else flag(value, name)


def choice(value: object, name: str, allowed: Sequence[str]) -> None:
    """Check that ``value`` is one of the ``allowed`` strings."""
    if not isinstance(value, str) or value not in allowed:
        options = ", ".join(repr(a) for a in allowed)
        raise InvalidInputError(f"{name} must be one of {options}; got {show(value)}")


def optional_choice(value: object, name: str, allowed: Sequence[str]) -> None:
    """Like :func:`choice`, but ``None`` is allowed."""
    if value is not None:
        choice(value, name, allowed)


def timestamp(value: object, what: str = "timestamp") -> datetime | None:
    """A time as a timezone-aware UTC ``datetime`` (``None`` stays ``None``).

    Accepts a ``datetime`` (naive is taken as UTC), a ``date`` (midnight UTC) or an ISO-8601
    string such as ``"2024-05-01T09:30:00Z"`` or ``"2024-05-01"``.
    """
    if value is None:
        return None
    when: datetime
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, date):
        when = datetime.combine(value, time())
    elif isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(
                f"{what} must be a datetime or an ISO-8601 string such as '2024-05-01T09:30:00Z', got {show(value)}"
            ) from None
    else:
        raise InvalidInputError(f"{what} must be a datetime or an ISO-8601 string, got {show(value)}")
    try:
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except (OverflowError, ValueError):
        raise InvalidInputError(f"{what} is out of range in UTC: {show(value)}") from None


def cursor(value: object) -> str | None:
    """A page cursor: ``None`` (first page) or the ``next_cursor`` string of a previous page.
    Its content is the store's business; this checks only its type and size."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise InvalidInputError(f"cursor must be a page's next_cursor string, got {show(value)}")
    return value


# --------------------------------------------------------------------------- JSON values


def _json_scalar(value: object, where: str) -> str | int | float | bool | None:
    """A JSON scalar checked for storage: 64-bit ints, finite floats, valid UTF-8 text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -MAX_INT - 1 <= value <= MAX_INT:
            raise InvalidInputError(f"{where} is an integer beyond 64 bits; store it as a string")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where} is {value}; JSON has no NaN or infinity")
        return float(value)
    if isinstance(value, str):
        at = _surrogate_at(value)
        if at is not None:
            raise InvalidInputError(f"{where} is not valid UTF-8 (lone surrogate at {at})")
        return value
    raise InvalidInputError(
        f"{where} must be a JSON value (text, number, true/false, null, list or dict), got {show(value)};"
        " convert it first (e.g. a datetime with .isoformat(), a set with list())"
    )


def _json_value(value: object, where: str, depth: int) -> Any:
    if isinstance(value, Mapping | list | tuple):
        if depth >= MAX_METADATA_DEPTH:
            root = where.split("[", 1)[0]
            raise InvalidInputError(f"{root} is nested more than {MAX_METADATA_DEPTH} levels deep")
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidInputError(f"{where} has a key that is not a string: {show(key)}")
                if _surrogate_at(key) is not None:
                    raise InvalidInputError(f"{where} has a key that is not valid UTF-8: {key!r}")
                out[key] = _json_value(item, f"{where}[{key!r}]", depth + 1)
            return out
        return [_json_value(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    return _json_scalar(value, where)


def metadata(value: object, what: str = "metadata") -> dict[str, Any]:
    """Metadata checked and copied as plain JSON data (tuples become lists); ``None`` is ``{}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{what} must be a dict, got {show(value)}")
    out: dict[str, Any] = _json_value(value, what, 0)
    size = len(json.dumps(out, ensure_ascii=False))
    if size > MAX_METADATA_CHARS:
        raise InvalidInputError(f"{what} is {size} characters as JSON; the limit is {MAX_METADATA_CHARS}")
    return out


def filters(value: object) -> dict[str, str | int | float | bool | None] | None:
    """Search filters: a mapping of non-empty ``str`` keys to JSON scalars; ``None`` is no filter."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(f'filters must be a dict such as {{"source": "email"}}, got {show(value)}')
    out: dict[str, str | int | float | bool | None] = {}
    for key, want in value.items():
        if not isinstance(key, str) or not key.strip() or _surrogate_at(key) is not None:
            raise InvalidInputError(f"filters keys must be non-empty strings, got {show(key)}")
        if any(not part.strip() for part in key.split(".")):
            raise InvalidInputError(
                f"filters key {key!r} has an empty part: a dotted key is a path into nested metadata"
                " (such as 'sender.id')"
            )
        if isinstance(want, Mapping | list | tuple):
            raise InvalidInputError(f"filters[{key!r}] must be a single value to match exactly, got {show(want)}")
        out[key] = _json_scalar(want, f"filters[{key!r}]")
    return out


# --------------------------------------------------------------------------- memory types

#: Kinds a caller may give ``add(kind=...)``.
ADD_KINDS: tuple[str, ...] = ("fact", "message", "description", "custom")
#: Scope names ``add`` accepts, memlane's and elizaOS's (see :data:`memlane.models.SCOPE_ALIASES`).
SCOPE_NAMES: tuple[str, ...] = ("user", "agent", "room", "private", "shared")
#: Embedding priorities: ``now`` embeds before ``add`` returns; the others queue.
EMBED_PRIORITIES: tuple[str, ...] = ("now", "high", "normal", "low")


def memory_kind(value: object) -> FactKind | None:
    """``add``'s ``kind``: ``None`` (a text is a ``fact``, a message a ``message``) or one of
    :data:`ADD_KINDS`."""
    if value is None:
        return None
    if value == "document":
        raise InvalidInputError("kind='document': use add_document(text, ...) to store a document")
    if value == "fragment":
        raise InvalidInputError("kind='fragment': fragments are made by memlane from a document's text")
    choice(value, "kind", ADD_KINDS)
    return cast("FactKind", value)


def fact_scope(value: object) -> FactScope:
    """A scope name as memlane's: ``user`` / ``agent`` / ``room``; elizaOS's ``private`` and
    ``shared`` are ``user`` and ``agent``."""
    choice(value, "scope", SCOPE_NAMES)
    assert isinstance(value, str)
    return SCOPE_ALIASES.get(value, cast("FactScope", value))


def embed_priority(value: object) -> EmbedPriority:
    """An embedding priority: one of :data:`EMBED_PRIORITIES`."""
    choice(value, "embed", EMBED_PRIORITIES)
    return cast("EmbedPriority", value)


# --------------------------------------------------------------------------- sequences


def queries(value: object, max_queries: int) -> list[str]:
    """One query or a list of 1 to ``max_queries`` queries, each a checked text."""
    if isinstance(value, str | bytes | bytearray):
        items: list[object] = [value]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise InvalidInputError(f"query must be a text or a list of 1 to {max_queries} texts, got {show(value)}")
    if not 1 <= len(items) <= max_queries:
        raise InvalidInputError(f"give 1 to {max_queries} queries, got {len(items)}")
    return [clean_text(q, "query") for q in items]


def texts(value: object, name: str, max_items: int) -> list[str]:
    """A list (or tuple) of up to ``max_items`` checked texts; a lone string is refused
    (it would be read as a list of characters)."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise InvalidInputError(f"{name} must be a list of texts, got {show(value)}")
    if len(value) > max_items:
        raise InvalidInputError(f"{name} has {len(value)} items; the limit is {max_items}")
    return [clean_text(v, f"{name}[{i}]") for i, v in enumerate(value)]


def check_cursor(cursor: str | None) -> int | None:
    """A listing cursor (a store row id as decimal text, as a page's ``next_cursor`` gives it),
    None for the first page.

    Raises:
        InvalidInputError: anything else.
    """
    if cursor is None or cursor == "":
        return None
    if not isinstance(cursor, str) or not cursor.isascii() or not cursor.isdigit() or len(cursor) > 18:
        raise InvalidInputError(f"invalid cursor {cursor!r}: pass back a page's next_cursor unchanged")
    return int(cursor)
