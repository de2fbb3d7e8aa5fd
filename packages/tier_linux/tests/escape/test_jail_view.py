"""Escape probes: what the jail's root and /etc hold, against lists written out here.

The argv builder takes the top-level entries and the /etc allowlist from `host`; a test
that compared the jail with those tables would follow any entry added to them (``var``,
``gshadow``). These lists are literals: a new entry must be reviewed here too, and until
then the probes below go red. Entries the host lacks (lib32 on most machines) are not
expected inside either.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Escape  # the suite's fixture type (tests get it as `esc`)

# Always there: the jail's own mounts (/proc, /dev, /tmp), /usr and /etc.
ROOT_ALWAYS = {"usr", "etc", "proc", "dev", "tmp"}
# There when the host has them (links into /usr on merged-/usr systems).
ROOT_IF_ON_HOST = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"}
ETC_IF_ON_HOST = {
    "alternatives",
    "group",
    "hosts",
    "ld.so.cache",
    "localtime",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "ssl",
}

LIST = """
import json
ok(json.dumps(sorted(os.listdir({path!r}))))
"""

EXISTS = """
try:
    os.lstat({path!r})
except OSError as exc:
    blocked(err(exc))
ok("exists")
"""


def listing(esc: Escape, path: str) -> set[str]:
    outcome = esc.inside(LIST.format(path=path))
    if not outcome.ok:
        pytest.fail(f"broken probe: listing {path} inside: {outcome.raw}")
    return set(json.loads(outcome.detail))


def test_the_root_holds_exactly_the_expected_entries(esc: Escape) -> None:
    # The workspace lives under /tmp here (pytest's tmp_path), inside the jail's own /tmp.
    assert str(esc.ws).startswith("/tmp/")
    on_host = {name for name in ROOT_IF_ON_HOST if os.path.lexists(f"/{name}")}
    assert listing(esc, "/") == ROOT_ALWAYS | on_host
    esc.held()


def test_etc_holds_exactly_the_expected_entries(esc: Escape) -> None:
    on_host = {name for name in ETC_IF_ON_HOST if os.path.lexists(f"/etc/{name}")}
    assert listing(esc, "/etc") == on_host
    esc.held()


@pytest.mark.parametrize("path", ["/etc/gshadow", "/etc/shadow", "/var", "/root", "/home"])
def test_host_paths_outside_the_allowlist_do_not_exist_inside(esc: Escape, path: str) -> None:
    esc.control(esc.outside(EXISTS.format(path=path)))
    esc.must_block(esc.inside(EXISTS.format(path=path)))
