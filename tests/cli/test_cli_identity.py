"""``memlane identity link|unlink|resolve|list`` and ``memlane add --channel --sender``."""

from __future__ import annotations

import json

import pytest

from cli_helpers import one_line_error, run


def test_identity_commands(capsys: pytest.CaptureFixture[str], db: list[str]) -> None:
    code, out, _ = run(capsys, "identity", "link", "sms", "+15550100", "sam", *db)
    assert code == 0 and out.strip() == "linked '+15550100' on 'sms' to user 'sam'"
    run(capsys, "identity", "link", "telegram", "sam", "sam", *db)
    assert run(capsys, "identity", "resolve", "sms", "+15550100", *db)[:2] == (0, "sam\n")
    code, out, _ = run(capsys, "identity", "resolve", "sms", "+1999", *db)
    assert code == 1 and "no user is linked" in out
    code, _, err = run(capsys, "identity", "link", "sms", "+15550100", "bob", *db)
    assert code == 2 and "already linked to another user" in one_line_error(err)
    code, out, _ = run(capsys, "identity", "list", "sam", "--json", *db)
    assert [(i["channel"], i["sender"]) for i in json.loads(out)] == [("sms", "+15550100"), ("telegram", "sam")]
    code, out, _ = run(capsys, "add", "I am vegetarian", "--channel", "sms", "--sender", "+15550100", *db)
    assert code == 0 and out.startswith("added ")
    assert "I am vegetarian" in run(capsys, "list", "-u", "sam", *db)[1]
    code, _, err = run(capsys, "add", "who am I", "--channel", "sms", "--sender", "+1999", *db)
    assert code == 2 and "link it first" in one_line_error(err)
    assert run(capsys, "identity", "unlink", "sms", "+15550100", *db)[0] == 0
    code, out, _ = run(capsys, "identity", "unlink", "sms", "+15550100", *db)
    assert code == 1 and out.strip() == "no such link"
    run(capsys, "forget", "sam", "--yes", *db)
    code, out, _ = run(capsys, "identity", "list", "sam", *db)
    assert code == 0 and out.strip() == "no links for user 'sam'"
