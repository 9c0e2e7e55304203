"""Reading a benchmark file: one JSON list, with errors that say what is wrong and where."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlane.errors import InvalidInputError


def read_json_list(p: Path, items: str, not_format: Callable[[Path, str], InvalidInputError]) -> list[Any]:
    """The JSON list in ``p``; ``not_format(path, why)`` builds the error for a file that is not
    UTF-8 JSON holding a list (``items`` names what the list holds, for the message)."""
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {p}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise not_format(p, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise not_format(p, f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError:
        raise not_format(p, "JSON nested too deeply") from None
    if not isinstance(data, list):
        raise not_format(p, f"expected a JSON list of {items}, got {type(data).__name__}")
    return data
