"""The committed OpenAPI schema (``docs/openapi.json``), generated from :func:`create_app`.

Regenerate after changing a route::

    python -m memlane.service.openapi > docs/openapi.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

from memlane.config import load_settings
from memlane.service.app import create_app

__all__ = ["REGENERATE", "schema", "schema_text"]

#: The command that rewrites the committed schema.
REGENERATE = "python -m memlane.service.openapi > docs/openapi.json"


def schema() -> dict[str, Any]:
    """The app's OpenAPI schema, built with default settings (the environment is not read)."""
    app = create_app(load_settings(env={}))
    result: dict[str, Any] = app.openapi()
    return result


def schema_text() -> str:
    """:func:`schema` as stable JSON text: keys sorted, two-space indent, a final newline."""
    return json.dumps(schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
