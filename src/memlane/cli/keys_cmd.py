"""``memlane keys create/list/revoke``: the API keys of a memlane server.

The keys file is the settings' ``server.keys_file`` (``$MEMLANE_KEYS_FILE``, default
``<data dir>/keys.db``), or ``--keys-file``. ``create`` prints the new key once; nothing prints
a key or its hash afterwards. Needs only the standard library (no ``server`` extra).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from memlane.service.keys import ApiKey, KeyStore, default_keys_path

__all__ = ["add_parser", "cmd_keys_create", "cmd_keys_list", "cmd_keys_revoke"]


def _keys_file(args: argparse.Namespace) -> str:
    given = getattr(args, "keys_file", None)
    if given:
        return str(given)
    server = getattr(getattr(args, "settings", None), "server", None)
    configured = getattr(server, "keys_file", None)
    return str(configured) if configured else default_keys_path()


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _public(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "tenant": key.tenant,
        "user_id": key.user_id,
        "read_only": key.read_only,
        "admin": key.admin,
        "name": key.name,
        "created_at": key.created_at.isoformat(),
        "last_used_at": None if key.last_used_at is None else key.last_used_at.isoformat(),
        "revoked_at": None if key.revoked_at is None else key.revoked_at.isoformat(),
    }


def _flags(key: ApiKey) -> str:
    flags = [f for f, on in (("admin", key.admin), ("read-only", key.read_only), ("revoked", key.revoked)) if on]
    return ",".join(flags) or "-"


def cmd_keys_create(args: argparse.Namespace) -> int:
    with KeyStore(_keys_file(args)) as keys:
        new = keys.create(args.tenant, user_id=args.user, read_only=args.read_only, name=args.name, admin=args.admin)
    if args.json:
        print(json.dumps({**_public(new.key), "key": new.secret}, indent=2, ensure_ascii=False))
        return 0
    k = new.key
    bound = f"tenant {k.tenant!r}" + (f", user {k.user_id!r}" if k.user_id else ", any user")
    flags = (", admin: any tenant with X-Memlane-Tenant" if k.admin else "") + (", read-only" if k.read_only else "")
    print(f"created API key {k.id} ({bound}{flags})")
    print(f"key: {new.secret}")
    print("This is the only time the key is shown: store it now. Send it as 'Authorization: Bearer <key>'.")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    with KeyStore(_keys_file(args), create=False) as keys:  # looking creates no keys file
        found = keys.list(tenant=args.tenant, include_revoked=not args.active)
    if args.json:
        print(json.dumps([_public(k) for k in found], indent=2, ensure_ascii=False))
        return 0
    if not found:
        print("no API keys (the server is loopback-only without keys; create one: memlane keys create --tenant APP)")
        return 0
    rows = [
        (k.id, k.tenant, k.user_id or "(any)", _flags(k), _when(k.created_at), _when(k.last_used_at), k.name or "")
        for k in found
    ]
    header = ("ID", "TENANT", "USER", "FLAGS", "CREATED (UTC)", "LAST USED", "NAME")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    with KeyStore(_keys_file(args), create=False) as keys:  # no file: no such key
        key = keys.revoke(args.key_id)
    if args.json:
        print(json.dumps(_public(key), indent=2, ensure_ascii=False))
    else:
        print(f"revoked API key {key.id} (tenant {key.tenant!r}) at {_when(key.revoked_at)} UTC")
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``keys create/list/revoke`` to the CLI's sub-parsers."""
    files = argparse.ArgumentParser(add_help=False)
    files.add_argument(
        "--keys-file", metavar="FILE", help="the API keys file (default: server.keys_file, $MEMLANE_KEYS_FILE)"
    )
    k = sub.add_parser("keys", help="API keys of the memlane server: create, list, revoke")
    ksub = k.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    s = ksub.add_parser("create", parents=[common, files], help="create a key (printed once)")
    s.add_argument("--tenant", required=True, help="the app the key is bound to (its own store)")
    s.add_argument("--user", help="bind the key to this one user (default: any user of the tenant)")
    s.add_argument("--read-only", action="store_true", help="the key may only read")
    s.add_argument(
        "--admin",
        action="store_true",
        help="an admin key: may also act in any other tenant (header X-Memlane-Tenant) and list the tenants; "
        "not with --user",
    )
    s.add_argument("--name", help="a label for people")
    s.set_defaults(fn=cmd_keys_create)

    s = ksub.add_parser("list", parents=[common, files], help="list keys (ids and bindings; never secrets)")
    s.add_argument("--tenant", help="only this tenant's keys")
    s.add_argument("--active", action="store_true", help="leave out revoked keys")
    s.set_defaults(fn=cmd_keys_list)

    s = ksub.add_parser("revoke", parents=[common, files], help="revoke a key (refused from then on)")
    s.add_argument("key_id", metavar="KEY_ID", help="the key's id (from memlane keys list)")
    s.set_defaults(fn=cmd_keys_revoke)
