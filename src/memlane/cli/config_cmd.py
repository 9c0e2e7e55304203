"""``memlane config show``: the effective configuration, secrets redacted, with the source of
every value (``default``, ``file:PATH``, ``env:NAME``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from memlane.config import CONFIG_ENV, MemlaneSettings, load_settings

__all__ = ["add_parser", "cmd_config_show", "config_argument"]


def config_argument(argv: Sequence[str]) -> str | None:
    """The ``--config FILE`` / ``--config=FILE`` given on the command line (the last wins), or None."""
    found: str | None = None
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--config" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--config="):
            found = arg.split("=", 1)[1]
    return found


def _settings(args: argparse.Namespace) -> MemlaneSettings:
    settings = getattr(args, "settings", None)
    if isinstance(settings, MemlaneSettings):
        return settings
    return load_settings(getattr(args, "config", None))


def _text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return json.dumps(text, ensure_ascii=False) if text == "" or "\n" in text else text


def cmd_config_show(args: argparse.Namespace) -> int:
    shown = _settings(args).redacted()
    if args.json:
        print(json.dumps(shown, indent=2, ensure_ascii=False))
        return 0
    print(f"config file: {shown['config_file'] or f'none (give --config FILE or set ${CONFIG_ENV})'}")
    rows = [(key, _text(v["value"]), v["source"]) for key, v in shown["values"].items()]
    width = max(len(k) for k, _, _ in rows)
    vwidth = min(48, max(len(v) for _, v, _ in rows))
    block = ""
    for key, value, source in rows:
        if key.split(".")[0] != block:
            block = key.split(".")[0]
            print(f"\n{block}:")
        print(f"  {key:<{width}}  {value:<{vwidth}}  {source}")
    print("\nsecrets (environment only, never in the config file):")
    for name, state in shown["secrets"].items():
        print(f"  {name:<{width}}  {state}")
    return 0


def add_parser(sub: Any) -> None:
    """``memlane config show`` on the CLI's sub-command parser."""
    c = sub.add_parser(
        "config",
        help="show the effective configuration (file, environment, defaults)",
        description="memlane's configuration: defaults < YAML file (--config FILE or $MEMLANE_CONFIG) < "
        "environment variables. See docs/configuration.md.",
    )
    csub = c.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--config", metavar="FILE", default=argparse.SUPPRESS, help=f"the YAML config file (default: ${CONFIG_ENV})"
    )
    options.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    s = csub.add_parser(
        "show",
        parents=[options],
        help="every setting with its value and where it came from; secrets redacted",
        description="Print every setting with its effective value and its source (default, file:PATH or "
        "env:NAME). Passwords in URLs are masked; API keys are shown only as set / not set.",
    )
    s.set_defaults(fn=cmd_config_show)
