"""T1's cached plan for `panday run` (`panday_tier_linux.t1.plan`): the value round-trips,
and a file that is not exactly what this user sealed for this key, or a plan of another
format, is never read as a plan. Sealing is T2's (`panday_tier_linux.plan`), tested there;
a cached run's behaviour is the escape suite's (test_t1.py)."""

from __future__ import annotations

import marshal

import pytest

from panday_tier_linux.plan import seal, unseal
from panday_tier_linux.t1 import plan as t1plan

PROGRAM = b"\x06\x00\x00\x00\x00\x00\xff\x7f"  # one BPF instruction: return ALLOW


def _plan(**changes: object) -> t1plan.Plan:
    fields: dict[str, object] = {
        "abi": 7,
        "program": PROGRAM,
        "workspace": "/w",
        "access": "rw",
        "staged_ro": ("/s",),
        "protect": (".x",),
        "unprotect": (),
        "allow_home": False,
        "env": (("A", "1"), ("TOKEN", "secret")),
        "caller_env": ("TOKEN",),
        "output_bytes": 1 << 20,
        "wall_clock_ms": None,
    }
    fields.update(changes)
    return t1plan.Plan(**fields)  # pyright: ignore[reportArgumentType] - the fields above


def test_a_plan_round_trips_without_the_callers_values() -> None:
    made = _plan()
    back = t1plan.Plan.decode(made.encode())
    assert back is not None
    assert back.workspace == "/w"
    assert back.staged_ro == ("/s",)
    assert back.program == PROGRAM
    assert dict(back.env) == {"A": "1", "TOKEN": ""}  # the caller's value is never cached
    assert back.caller_env == ("TOKEN",)


def test_another_format_or_a_malformed_field_is_not_a_plan() -> None:
    body = _plan().encode()
    fields = list(marshal.loads(body))  # noqa: S302 - the plan this test just made
    for index, value in ((0, t1plan.FORMAT + 1), (2, b"\x00" * 7), (3, "relative"), (4, "rx")):
        changed = list(fields)
        changed[index] = value
        assert t1plan.Plan.decode(marshal.dumps(tuple(changed))) is None, index
    assert t1plan.Plan.decode(b"not marshal") is None


def test_a_plan_sealed_for_another_key_or_altered_is_refused() -> None:
    secret = b"k" * 32
    key = "tier t1-linux\nworkspace /w"
    blob = seal(secret, key, _plan().encode())
    assert unseal(secret, key, blob) is not None
    assert unseal(secret, key + "x", blob) is None
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    assert unseal(secret, key, tampered) is None


@pytest.mark.skipif(t1plan.host_facts() is None, reason="T1 cannot run here")
def test_the_key_names_the_tier_and_t1s_code_and_rules() -> None:
    facts = t1plan.host_facts()
    assert facts is not None
    assert facts[0] == "tier t1-linux"
    assert any(f.startswith("code ") and "jail.py:" in f for f in facts)
    assert any(f.startswith("seccomp ") for f in facts)
    assert any(f.startswith("landlock ") for f in facts)
