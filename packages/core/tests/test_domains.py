"""Host patterns: the accepted forms and how they match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from panday_core.domains import EXACT, IP, WILDCARD, host_matches, normalize_pattern, pattern_kind

label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10).filter(
    lambda s: not s.isdigit()
)
name = st.lists(label, min_size=2, max_size=4).map(".".join)


@pytest.mark.parametrize(
    ("text", "normal", "kind"),
    [
        ("api.github.com", "api.github.com", EXACT),
        ("API.GitHub.COM", "api.github.com", EXACT),
        ("localhost", "localhost", EXACT),
        ("*.example.com", "*.example.com", WILDCARD),
        ("203.0.113.7", "203.0.113.7", IP),
        ("2001:DB8:0::1", "2001:db8::1", IP),
        ("xn--bcher-kva.de", "xn--bcher-kva.de", EXACT),
    ],
)
def test_accepted_forms(text: str, normal: str, kind: str) -> None:
    assert normalize_pattern(text) == normal
    assert pattern_kind(normal) == kind


def test_wildcard_matches_subdomains_at_any_depth_but_never_the_apex() -> None:
    assert host_matches("*.example.com", "a.example.com")
    assert host_matches("*.example.com", "a.b.example.com")
    assert not host_matches("*.example.com", "example.com")
    assert not host_matches("*.example.com", "badexample.com")
    assert not host_matches("*.example.com", "example.com.evil.net")


def test_exact_names_match_case_insensitively_and_only_themselves() -> None:
    assert host_matches("api.github.com", "API.github.com")
    assert not host_matches("api.github.com", "x.api.github.com")
    assert not host_matches("api.github.com", "github.com")


def test_ip_literals_compare_as_addresses() -> None:
    assert host_matches("::1", "0:0::1")
    assert not host_matches("10.0.0.1", "10.0.0.10")
    assert not host_matches("example.com", "127.0.0.1")
    assert not host_matches("*.example.com", "127.0.0.1")


@given(name)
def test_normalisation_is_idempotent(host: str) -> None:
    once = normalize_pattern(host)
    assert normalize_pattern(once) == once
    assert host_matches(once, host.upper())


@given(name, label)
def test_a_wildcard_never_covers_its_apex(apex: str, sub: str) -> None:
    pattern = normalize_pattern(f"*.{apex}")
    assert not host_matches(pattern, apex)
    assert host_matches(pattern, f"{sub}.{apex}")


@given(st.text(max_size=30))
def test_arbitrary_text_normalises_or_raises_value_error(text: str) -> None:
    try:
        normal = normalize_pattern(text)
    except ValueError:
        return
    assert normal == normal.lower()
    assert "/" not in normal
    assert "://" not in normal
