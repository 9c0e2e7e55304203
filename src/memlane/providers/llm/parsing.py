"""From a model's text to a validated pydantic object.

Chat models wrap JSON in all kinds of packaging: ``<think>`` blocks, Markdown code fences,
a sentence before and after, trailing commas, one wrapper key too many. This module
unwraps all of that leniently (:func:`extract_json`, :func:`parse_output`) and gives a
model exactly one chance to correct a bad answer (:func:`generate`), so that providers
only have to return text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

from memlane.errors import OutputParseError
from memlane.providers.llm.base import LLM, ChatMessage, Usage, UsageMeter

log = logging.getLogger("memlane.llm")

T = TypeVar("T", bound=BaseModel)

_THINK_BLOCK = re.compile(r"<think(?:ing)?>.*?</think(?:ing)?>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json5?|javascript|js)?[ \t]*\r?\n?(.*?)```", re.IGNORECASE | re.DOTALL)

#: Give up after failed ``{`` / ``[`` attempts scanned this many characters (protects
#: against pathological text: every failed attempt may scan to the end).
_MAX_FAILED_SCAN_CHARS = 1_000_000
#: How much of a bad answer is echoed back in the corrective retry.
_MAX_ECHO_CHARS = 8000
_MAX_REASON_CHARS = 300

_OPEN_TO_CLOSE = {"{": "}", "[": "]"}
_OPENER = re.compile(r"[\[{]")


def _strip_think(text: str) -> tuple[str, bool]:
    """Remove reasoning blocks. Returns the rest and whether an unterminated ``<think>`` was cut."""
    text = _THINK_BLOCK.sub("", text)
    close = _THINK_CLOSE.search(text)
    if close is not None and not _THINK_OPEN.search(text, 0, close.start()):
        # a server that strips the opening tag but leaves the closing one
        text = text[close.end() :]
    opened = _THINK_OPEN.search(text)
    if opened is not None and not text[: opened.start()].strip():
        # an unterminated leading <think>: the answer (if any) is whatever JSON comes last
        return text[opened.end() :], True
    return text, False


def _scan(text: str, start: int) -> tuple[str | None, int]:
    """Match the bracket at ``start``, dropping trailing commas on the way.

    Returns ``(segment, end)``: the cleaned JSON text and the index after its closing
    bracket, or ``(None, i)`` with ``i`` the position of a mismatched bracket, or
    ``(None, len(text))`` when the text ends before the value closes.
    """
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch in _OPEN_TO_CLOSE:
            stack.append(_OPEN_TO_CLOSE[ch])
            out.append(ch)
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None, i
            out.append(ch)
            if not stack:
                return "".join(out), i + 1
        elif ch == ",":
            j = i + 1
            while j < n and text[j].isspace():
                j += 1
            if j >= n or text[j] not in "}]":
                out.append(ch)  # a trailing comma (before a closing bracket) is dropped
        else:
            out.append(ch)
        i += 1
    return None, n


def _find_json(text: str, *, prefer_last: bool) -> Any:
    """The decodable object/array in ``text``, ignoring prose around it.

    Of several top-level values the longest wins (a stray ``[1]`` in a sentence loses to
    the real answer), or the last one when ``prefer_last`` (after unterminated reasoning).
    """
    best: Any = None
    best_len = -1
    truncated = False
    pos = wasted = 0
    while (match := _OPENER.search(text, pos)) is not None:
        if wasted >= _MAX_FAILED_SCAN_CHARS:
            break
        start = match.start()
        segment, end = _scan(text, start)
        value: Any = None
        if segment is None:
            truncated = truncated or end == len(text)
        else:
            try:
                value = json.loads(segment)
            except (ValueError, RecursionError):
                segment = None
        if segment is None:
            wasted += end - start + 1
            pos = start + 1
            continue
        if prefer_last or end - start > best_len:
            best, best_len = value, end - start
        pos = end
    if best_len >= 0:
        return best
    if truncated:
        raise ValueError("the JSON is incomplete (output cut off?)")
    raise ValueError("no JSON object or array found")


def extract_json(text: str) -> Any:
    """The JSON object or array in a model's answer.

    Lenient about packaging: drops ``<think>...</think>`` blocks (and an unterminated
    leading ``<think>``, taking the last JSON value after it), Markdown code fences, prose
    before the first ``{`` / ``[`` and after its matching close, and trailing commas.

    Raises:
        ValueError: with a short reason when there is no usable JSON object or array.
    """
    if not text or not text.strip():
        raise ValueError("empty output")
    body, unterminated_think = _strip_think(text)
    if not body.strip():
        raise ValueError("the output holds only reasoning, no answer")
    stripped = body.strip()
    try:  # fast path: the whole answer is JSON
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        pass
    else:
        if isinstance(value, dict | list):
            return value
    fenced = [m.group(1) for m in _FENCE.finditer(body)]
    for block in reversed(fenced) if unterminated_think else fenced:
        try:
            return _find_json(block, prefer_last=unterminated_think)
        except ValueError:
            continue
    return _find_json(body, prefer_last=unterminated_think)


def _field_names(model: type[BaseModel]) -> set[str]:
    names: set[str] = set()
    for name, info in model.model_fields.items():
        names.add(name)
        if isinstance(info.alias, str):
            names.add(info.alias)
    return names


def _list_fields(model: type[BaseModel]) -> list[str]:
    return [
        name
        for name, info in model.model_fields.items()
        if info.annotation is list or get_origin(info.annotation) is list
    ]


def _item_model(model: type[BaseModel], field: str) -> type[BaseModel] | None:
    args = get_args(model.model_fields[field].annotation)
    return args[0] if args and isinstance(args[0], type) and issubclass(args[0], BaseModel) else None


def _reshape(data: Any, model: type[BaseModel], *, nested: bool = False) -> Any:
    """Fit common near-misses to the model's shape (bare arrays, one wrapper key too many).

    Raises ValueError for a non-empty object that has none of the model's fields (it would
    otherwise validate as an all-defaults object and silently lose the answer).
    """
    list_fields = _list_fields(model)
    names = _field_names(model)
    if isinstance(data, list):
        return {list_fields[0]: data} if len(list_fields) == 1 else data
    if not isinstance(data, dict) or not data or names & data.keys():
        return data
    if len(data) == 1:
        value = next(iter(data.values()))
        if isinstance(value, dict) and not nested:  # {"result": {...}}
            try:
                return _reshape(value, model, nested=True)
            except ValueError:
                pass
        elif len(model.model_fields) == 1:  # {"memory": "..."} for a one-field model
            return {next(iter(model.model_fields)): value}
        elif isinstance(value, list) and len(list_fields) == 1:  # {"items": [...]}
            return {list_fields[0]: value}
    if len(list_fields) == 1:  # one item instead of a list of them
        item = _item_model(model, list_fields[0])
        if item is not None and _field_names(item) & data.keys():
            return {list_fields[0]: [data]}
    keys = ", ".join(sorted(data))
    expected = ", ".join(model.model_fields)
    raise ValueError(f"expected a JSON object with {expected}; got one with {keys[:80]}")


def parse_output(text: str, model: type[T]) -> T:
    """Parse a model's answer into ``model``.

    :func:`extract_json`, then: a bare JSON array is wrapped as ``{field: array}`` when the
    model has exactly one list field (and so is a lone item of that list); an object
    wrapped one level deeper under a single unexpected key (``{"result": {...}}``) is
    unwrapped; a one-field model also takes a single unexpected key as that field; then
    ``model.model_validate``.

    Raises:
        ValueError: no usable JSON (see :func:`extract_json`), or a non-empty object with
            none of the model's fields.
        pydantic.ValidationError: the JSON does not fit the model.
    """
    return model.model_validate(_reshape(extract_json(text), model))


def _short_reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        parts = [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:3]]
        if len(errors) > 3:
            parts.append(f"and {len(errors) - 3} more errors")
        reason = "; ".join(parts)
    else:
        reason = str(exc) or type(exc).__name__
    return reason if len(reason) <= _MAX_REASON_CHARS else reason[: _MAX_REASON_CHARS - 1] + "…"


def _record(meter: UsageMeter | None, model_name: str, task: str, usage: Usage) -> None:
    if meter is not None:
        meter.record(model_name, task, Usage(usage.prompt_tokens, usage.completion_tokens, max(1, usage.calls)))


async def generate(
    llm: LLM,
    messages: Sequence[ChatMessage],
    model: type[T],
    *,
    task: str,
    meter: UsageMeter | None,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
) -> T:
    """Ask ``llm`` for a ``model`` object, with one corrective retry on bad output.

    Each call is recorded in ``meter`` under ``task``. When the answer cannot be parsed or
    validated, the bad answer and a short description of what was wrong are sent back once,
    asking for JSON matching the schema only.

    Raises:
        OutputParseError: the second answer was not usable either (``raw`` holds it).
        LLMError: the provider failed (propagated unchanged).
    """
    schema = model.model_json_schema()
    schema_name = model.__name__
    convo: list[ChatMessage] = list(messages)
    reason = ""
    text = ""
    for attempt in range(2):
        completion = await llm.complete(
            convo, schema=schema, schema_name=schema_name, temperature=temperature, max_tokens=max_tokens
        )
        _record(meter, llm.name, task, completion.usage)
        text = completion.text or ""
        try:
            return parse_output(text, model)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError too
            reason = _short_reason(exc)
            if attempt:
                break
            log.debug("%s: %s output rejected (%s); asking once more", llm.name, task, reason)
            echoed = text if len(text) <= _MAX_ECHO_CHARS else text[:_MAX_ECHO_CHARS] + "…"
            convo.append(ChatMessage(role="assistant", content=echoed.strip() or "(empty answer)"))
            convo.append(
                ChatMessage(
                    role="user",
                    content=(
                        f"Your previous answer could not be used: {reason}\n"
                        f"Answer again with only a JSON object matching this JSON schema "
                        f"(no prose, no code fences):\n{json.dumps(schema, separators=(',', ':'))}"
                    ),
                )
            )
    raise OutputParseError(
        f"{llm.name}: {task} output was not valid JSON for {model.__name__} even after one corrective retry "
        f"({reason}); try a stronger model or check the provider's structured-output support",
        raw=text,
    )
