"""The detectors one by one (checks: Luhn, IBAN mod-97; near misses left alone), the three
modes, and the configuration's checks."""

from __future__ import annotations

import pytest

from memlane.errors import InvalidInputError
from memlane.privacy.redaction import KINDS, RedactionConfig, Redactor, as_config, iban_valid, luhn_valid


def masked(text: str, **config: object) -> str:
    return Redactor.from_config(RedactionConfig.model_validate(config)).redact(text)


@pytest.mark.parametrize(
    ("number", "valid"),
    [
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("378282246310005", True),  # Amex
        ("5555555555554444", True),
        ("5555555555554445", False),
        ("6011111111111117", True),
        ("79927398713", True),  # the classic Luhn example
        ("79927398710", False),
        ("4111-1111", False),
    ],
)
def test_luhn(number: str, valid: bool) -> None:
    assert luhn_valid(number) is valid


@pytest.mark.parametrize(
    ("iban", "valid"),
    [
        ("DE89370400440532013000", True),
        ("DE89 3704 0044 0532 0130 00", True),
        ("GB82WEST12345698765432", True),
        ("gb82west12345698765432", True),
        ("FR1420041010050500013M02606", True),
        ("DE89370400440532013001", False),  # one digit off
        ("GB83WEST12345698765432", False),  # wrong check digits
        ("DE8937040044", False),  # too short
        ("1234WEST12345698765432", False),
    ],
)
def test_iban_mod97(iban: str, valid: bool) -> None:
    assert iban_valid(iban) is valid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail Jane.Doe+x@example.co.uk, thanks", "mail [email], thanks"),
        ("card 4111 1111 1111 1111 exp 12/27", "card [card] exp 12/27"),
        ("card 4111-1111-1111-1111.", "card [card]."),
        ("card 4111 1111 1111 1112 is a typo", "card 4111 1111 1111 1112 is a typo"),  # Luhn fails
        ("iban DE89 3704 0044 0532 0130 00 AND more", "iban [iban] AND more"),
        ("iban DE89 3704 0044 0532 0130 01", "iban DE89 3704 0044 0532 0130 01"),  # mod-97 fails
        ("call +44 20 7946 0958 now", "call [phone] now"),
        ("call (555) 123-4567", "call [phone]"),
        ("call 555-123-4567 or 07700900123", "call [phone] or [phone]"),
        ("born 2024-05-17, met 17.05.2024", "born 2024-05-17, met 17.05.2024"),  # dates
        ("order 1234567890 and zip 90210", "order 1234567890 and zip 90210"),
        ("host 192.168.1.20 is down", "host [ip] is down"),
        ("fe80::1ff:fe23:4567:890a and 2001:db8::1", "[ip] and [ip]"),
        ("upgrade to version 1.2.3.4 or v10.0.0.1", "upgrade to version 1.2.3.4 or v10.0.0.1"),  # versions
        ("release 2.10.1.0.5 and 999.1.1.1", "release 2.10.1.0.5 and 999.1.1.1"),
        ("at 10:30:00, std::vector", "at 10:30:00, std::vector"),
    ],
)
def test_detectors_find_real_values_and_leave_near_misses(text: str, expected: str) -> None:
    assert masked(text) == expected


def test_kinds_select_detectors_and_patterns_are_named() -> None:
    text = "a@b.io, 192.168.0.1, EMP-123456"
    assert masked(text, kinds=["ip"]) == "a@b.io, [ip], EMP-123456"
    assert masked(text, kinds=["email"], patterns={"badge": r"EMP-\d{6}"}) == "[email], 192.168.0.1, [badge]"
    assert masked(text, kinds=[], patterns=[r"EMP-\d{6}", r"\bb\.io"]) == "a@[custom], 192.168.0.1, [custom]"


def test_hash_mode_is_keyed_stable_and_normalised() -> None:
    r = Redactor.from_config(RedactionConfig(mode="hash"), key=b"k1")
    a, b = r.redact("Jane@Example.com"), r.redact("jane@example.com")
    assert a == b and a.startswith("[email:") and len(a) == len("[email:]") + 12
    assert r.redact("+44 20 7946 0958") == r.redact("+44-20-7946-0958")
    assert r.redact("4111 1111 1111 1111") == r.redact("4111111111111111")
    assert r.redact("DE89 3704 0044 0532 0130 00") == r.redact("DE89370400440532013000")
    other = Redactor.from_config(RedactionConfig(mode="hash"), key=b"k2")
    assert other.redact("jane@example.com") != a  # another key, another token
    assert r.redact("joe@example.com") != a
    with pytest.raises(InvalidInputError, match="key"):
        Redactor.from_config(RedactionConfig(mode="hash"))


def test_drop_mode_removes_the_value_and_a_space() -> None:
    assert masked("call +44 20 7946 0958 now", mode="drop") == "call now"
    assert masked("mail me: a@b.io.", mode="drop") == "mail me:."
    assert masked("a@b.io is mine", mode="drop") == "is mine"
    assert masked("a@b.io", mode="drop") == ""


def test_redact_value_walks_json_data() -> None:
    r = Redactor.from_config(RedactionConfig())
    data = {"a@b.io": ["x 10.0.0.1", {"n": 3, "t": "c@d.io"}], "n": None}
    assert r.redact_value(data) == {"a@b.io": ["x [ip]", {"n": 3, "t": "[email]"}], "n": None}


def test_key_is_never_shown() -> None:
    config = RedactionConfig(mode="hash", key="s3cret-key")  # type: ignore[arg-type]
    r = Redactor.from_config(config)
    for shown in (repr(config), str(config), repr(r), config.model_dump_json()):
        assert "s3cret" not in shown


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["email", "bogus("], "not a valid regular expression"),
        ({"kinds": ["mail"]}, "unknown redaction kind"),
        ({"mode": "scramble"}, "mode"),
        ({"patterns": {"Bad Name": "x"}}, "pattern name"),
        ({"patterns": {"empty": "x*"}}, "matches the empty string"),
        ({"colour": "red"}, "colour"),
        ([], "names nothing"),
        ("email", "must be None, True, a list"),
        ([1], "strings"),
        (["email", "fax"], "unknown redaction kind"),
    ],
)
def test_bad_configuration_is_refused(spec: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        as_config(spec)


def test_spec_forms() -> None:
    assert as_config(None) is None and as_config(False) is None
    assert as_config(True) == RedactionConfig() and RedactionConfig().kinds == KINDS
    config = as_config(["email", "phone", r"EMP-\d+"])
    assert config is not None and config.kinds == ("email", "phone") and config.patterns == {"custom": r"EMP-\d+"}
    assert as_config({"kinds": "ip", "mode": "drop"}) == RedactionConfig(kinds=("ip",), mode="drop")


def test_the_benchmark_prints_the_documented_numbers() -> None:
    """bench/redaction.py on the labelled set prints the tables docs/benchmarks.md shows."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "bench" / "redaction.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "detector" not in line]
    assert len(rows) == 12  # five detectors and all, for the tuning and the held-out lines
    section = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8").split("## PII redaction detectors")[1]
    for row in rows:
        assert row in section, row
