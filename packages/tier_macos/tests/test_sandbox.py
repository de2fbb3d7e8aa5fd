"""T2MacosSandbox on any OS: what `create` refuses before anything runs, the environment a
command gets, and the start step that runs inside the profile. (What the profile denies is
the escape suite's job, on macOS.)"""

from __future__ import annotations

import asyncio
import base64
import errno
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from panday_core.egress import ProxySettings, ProxyThread, StaticResolver
from panday_core.egress.testing import HttpUpstream, LoopbackOnly
from panday_core.errors import PolicyViolation, TierUnavailable
from panday_core.policy import policy_from_dict
from panday_core.types import (
    ExecExit,
    ExecSpec,
    OutputChunk,
    SandboxHandle,
    SandboxTier,
    SessionSpec,
)
from panday_tier_macos import T2MacosSandbox
from panday_tier_macos.profile import SeatbeltProfile
from panday_tier_macos.roots import (
    Roots,
    _entry_name,  # pyright: ignore[reportPrivateUsage] - the lookup rule under test
    check_root,
    disk_spelling,
    open_roots,
)
from panday_tier_macos.sandbox import (
    BASE_ENV,
    START,
    _Session,  # pyright: ignore[reportPrivateUsage] - the per-command environment under test
    build_environment,
    env_refusals,
    guard_params,
    start_proxy,
    stricter_limit,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def _temp_sessions() -> set[str]:
    """The sessions' temp dirs: in the per-user base (and the old flat names, should any
    code still make one)."""
    top = Path(tempfile.gettempdir())
    base = top / "panday-t2m"
    inside: set[str] = set()
    if base.is_dir():
        inside = {f"panday-t2m/{p.name}" for p in base.iterdir()}
    return inside | {p.name for p in top.iterdir() if p.name.startswith("panday-t2m-")}


def _create(doc: dict[str, object], workspace: str | None = "/w") -> None:
    policy = policy_from_dict(doc)
    if workspace is not None:
        policy = policy.with_workspace(workspace)
    asyncio.run(T2MacosSandbox().create(SessionSpec(policy=policy)))


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"limits": {"pids": 64}}, "limits.pids"),
        ({"limits": {"mem_bytes": 1 << 30}}, "limits.mem_bytes"),
        ({"limits": {"cpu_ms": 1000}}, "limits.cpu_ms"),
        ({"limits": {"disk_bytes": 1 << 30}}, "limits.disk_bytes"),
    ],
)
def test_create_refuses_by_field_name_before_making_anything(
    doc: dict[str, object], field: str
) -> None:
    before = _temp_sessions()
    with pytest.raises(PolicyViolation) as info:
        _create(doc)
    assert info.value.field == field
    assert _temp_sessions() == before


def test_create_without_a_workspace_is_refused() -> None:
    with pytest.raises(PolicyViolation) as info:
        _create({}, workspace=None)
    assert info.value.field == "fs.workspace"


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the refusal given off macOS")
def test_create_off_macos_says_the_tier_is_unavailable(tmp_path: Path) -> None:
    before = _temp_sessions()
    with pytest.raises(TierUnavailable) as info:
        _create({}, workspace=str(tmp_path))
    assert "macOS" in info.value.reason
    assert _temp_sessions() == before


def _check(path: Path | str, homes: list[str], field: str = "fs.workspace", **kw: bool) -> str:
    """`check_root`'s verdict: the accepted path, or the refusal's reason (field checked)."""
    got = check_root(
        field,
        str(path),
        writable=kw.get("writable", True),
        allow_home=kw.get("allow_home", False),
        homes=homes,
    )
    if isinstance(got, str):
        return got
    assert got.field == field
    return "REFUSED: " + got.reason


def test_a_workspace_or_staged_path_inside_a_protected_path_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "project").mkdir()
    homes = [str(home)]
    assert _check(home / "project", homes) == str(home / "project")
    assert _check(home, homes) == str(home)  # not $HOME here: a home only to the profile
    refused = _check(home / ".ssh", homes, "fs.staged_ro[0]", writable=False)
    assert refused.startswith("REFUSED: ")
    assert ".ssh" in refused
    assert "No such file" in _check(tmp_path / "missing", homes)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    assert "not a directory" in _check(tmp_path / "file", homes)


def test_a_root_reached_through_a_link_is_refused_naming_the_link_and_the_real_path(
    tmp_path: Path,
) -> None:
    """On macOS /tmp and /var are links into /private: the refusal says which path to give.
    A link planted by an earlier command (``ln -s ../../.. sub/data``) is refused the same way,
    never followed, so no later session mounts what it names."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    (real / "sub" / "data").symlink_to("../../..")
    homes: list[str] = []
    control = _check(real / "sub", homes)
    assert control == str(real / "sub"), "the real path is accepted"
    whole = _check(tmp_path / "link", homes)
    assert whole.startswith("REFUSED: ")
    assert "symbolic link" in whole
    assert repr(str(real)) in whole, "the real path to give instead"
    middle = _check(tmp_path / "link" / "sub", homes, "fs.staged_ro[0]", writable=False)
    assert f"passes through {str(tmp_path / 'link')!r}" in middle
    assert repr(str(real / "sub")) in middle
    planted = _check(real / "sub" / "data", homes, "fs.staged_ro[1]", writable=False)
    assert "symbolic link" in planted


@pytest.mark.parametrize(
    ("path", "writable"),
    [("/etc", False), ("/usr", False), ("/usr/lib", True), ("/proc", False), ("/", False)],
)
def test_system_directories_are_refused_as_roots(path: str, writable: bool) -> None:
    got = _check(path, [], writable=writable)
    assert got.startswith("REFUSED: ")


def test_a_name_is_matched_as_a_case_insensitive_volume_would_find_it() -> None:
    """macOS volumes ignore case (and Unicode normalization): `/users/a` opens `/Users/a`,
    while every check and Seatbelt rule compares strings. The entry a lookup finds is the
    spelling roots must be given in, and protected entries are written in."""
    listing = ["Users", "deploy", ".git", "caf\u00e9", "Ab", "aB"]
    assert _entry_name(listing, "Users") == "Users"
    assert _entry_name(listing, "users") == "Users"
    assert _entry_name(listing, "Deploy") == "deploy"
    assert _entry_name(listing, ".GIT") == ".git"
    assert _entry_name(listing, "cafe\u0301") == "caf\u00e9", "NFD finds the NFC name"
    assert _entry_name(listing, "ab") is None, "two entries fold alike: no guess"
    assert _entry_name(listing, "missing") is None


def test_an_exactly_spelled_root_keeps_its_spelling(tmp_path: Path) -> None:
    (tmp_path / "Mixed" / "Case").mkdir(parents=True)
    path = str(tmp_path / "Mixed" / "Case")
    assert disk_spelling(path) == path
    assert _check(path, []) == path


def test_a_home_directory_is_a_workspace_only_with_allow_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    refused = _check(home, [])
    assert "fs.allow_home" in refused
    assert "fs.allow_home" in _check(tmp_path, []), "a directory holding a home, too"
    assert _check(home, [], allow_home=True) == str(home)


def _create_refused(doc: dict[str, object], workspace: str) -> PolicyViolation:
    before = _temp_sessions()
    with pytest.raises(PolicyViolation) as info:
        _create(doc, workspace=workspace)
    assert _temp_sessions() == before, "refused before anything was made"
    return info.value


def test_create_refuses_roots_by_field_before_making_anything(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "ws")
    assert _create_refused({}, "/etc").field == "fs.workspace"
    linked = _create_refused({}, str(tmp_path / "link"))
    assert linked.field == "fs.workspace"
    assert str(tmp_path / "ws") in linked.reason
    staged = _create_refused({"fs": {"staged_ro": ["/proc/self"]}}, str(tmp_path / "ws"))
    assert staged.field == "fs.staged_ro[0]"


def test_dyld_variables_are_refused_by_name_even_when_allowed(tmp_path: Path) -> None:
    """Issue 12, 6(e): SIP drops DYLD_* when /bin/sh (which starts every command) starts;
    a variable the command would never see is refused, not silently dropped."""
    doc: dict[str, object] = {
        "env": {"DYLD_INSERT_LIBRARIES": "/x.dylib", "LD_PRELOAD": "/x.so", "OK": "1"},
        "allow_env_hooks": ["DYLD_INSERT_LIBRARIES", "LD_PRELOAD"],
    }
    refused = _create_refused(doc, str(tmp_path))
    assert [v.field for v in refused.violations] == ["env.DYLD_INSERT_LIBRARIES"]
    assert "System Integrity Protection" in refused.reason
    # the other listed hook is accepted: the refusal is DYLD_*'s, not allow_env_hooks'
    allowed = policy_from_dict({"env": {"LD_PRELOAD": "/x.so"}, "allow_env_hooks": ["LD_PRELOAD"]})
    assert env_refusals(allowed) == []


def _git_workspace(ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\thooksPath = tools/hooks\n", encoding="utf-8")
    (ws / ".gitmodules").write_text('[submodule "lib"]\n\tpath = vendor/lib\n', encoding="utf-8")
    (ws / "vendor" / "lib").mkdir(parents=True)
    (ws / "vendor" / "lib" / ".git").write_text(
        "gitdir: ../../.git/modules/lib\n", encoding="utf-8"
    )
    (ws / "data" / "in").mkdir(parents=True)


def _roots(ws: Path, fs: dict[str, object] | None = None, homes: tuple[str, ...] = ()) -> Roots:
    policy = policy_from_dict({"fs": fs or {}}).with_workspace(str(ws))
    return open_roots(policy.fs, homes)


def test_protected_entries_of_a_writable_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git_workspace(ws)
    roots = _roots(ws, {"protect": ["deploy/prod/run.sh"], "staged_ro": [str(ws / "data/in")]})
    got = {p[len(str(ws)) + 1 :] for p in roots.protected}
    # present, or missing and not to be created: protected as they are
    assert {".git", ".gitmodules", "vendor/lib/.git"} <= got
    # missing and not to be created: protected at the first missing component, so no
    # directory holding them can be made or renamed into place either
    assert {".vscode", ".idea", ".mcp.json", ".claude", "tools", "deploy"} <= got
    # missing, and creating them is harmless: left out
    assert not {".envrc", ".husky", ".pre-commit-config.yaml"} & got
    assert all(p.startswith(str(ws) + "/") for p in roots.protected)
    assert roots.staged == (str(ws / "data/in"),)
    assert roots.ancestors == (
        str(ws),
        str(ws / "data"),
        str(ws / "vendor"),
        str(ws / "vendor/lib"),
    )


def test_unprotect_and_read_only_leave_entries_out(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git_workspace(ws)
    unprotected = _roots(ws, {"unprotect": [".git"]})
    assert str(ws / ".git") not in unprotected.protected
    assert str(ws / ".vscode") in unprotected.protected
    read_only = _roots(ws, {"access": "ro", "staged_ro": [str(ws / "data/in")]})
    assert read_only.protected == ()
    assert read_only.ancestors == (), "nothing is writable, nothing can be moved"


def test_a_protected_entry_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """Seatbelt judges a write through a link by its target: a linked .vscode would leave
    its target writable, so the session is refused instead."""
    ws = tmp_path / "ws"
    (ws / "elsewhere").mkdir(parents=True)
    assert _roots(ws).protected  # control: the same workspace opens without the link
    (ws / ".vscode").symlink_to(ws / "elsewhere")
    with pytest.raises(PolicyViolation) as info:
        _roots(ws)
    assert info.value.field == "fs.protect"
    assert "'.vscode' is a symbolic link" in info.value.reason


def test_a_home_inside_the_workspace_pins_the_directories_above_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    home = ws / "homes" / "al"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    roots = _roots(ws, {"allow_home": True}, homes=(str(home),))
    assert str(home / ".ssh") in roots.protected
    assert str(home / ".config") in roots.protected
    assert {str(ws), str(ws / "homes"), str(home)} <= set(roots.ancestors)


def test_guard_params_number_the_paths_in_order() -> None:
    roots = Roots(workspace="/w", staged=(), protected=("/w/.git", "/w/.idea"), ancestors=("/w",))
    assert guard_params(roots) == {
        "PROTECTED_0": "/w/.git",
        "PROTECTED_1": "/w/.idea",
        "ANCESTOR_0": "/w",
    }
    profile = SeatbeltProfile.from_policy(
        policy_from_dict({}).with_workspace("/w"), protected=2, ancestors=1
    )
    assert set(guard_params(roots)) <= set(profile.params)


def test_the_environment_is_rebuilt_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    policy = policy_from_dict({"env": {"LANG": "C", "MY_SETTING": "1"}})
    env = build_environment(policy, "/ws", "/tmp/session")
    assert env == {
        "PATH": BASE_ENV["PATH"],
        "TERM": BASE_ENV["TERM"],
        "LANG": "C",
        "HOME": "/ws",
        "TMPDIR": "/tmp/session/",
        "MY_SETTING": "1",
    }


def test_the_stricter_wall_clock_applies() -> None:
    assert stricter_limit(None, None) is None
    assert stricter_limit(5, None) == 5
    assert stricter_limit(None, 7) == 7
    assert stricter_limit(5, 7) == 5


def _start(cwd: str, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["/bin/sh", "-c", START, "panday", cwd, *argv],
        capture_output=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "OLDPWD": "/caller"},
        cwd="/",
    )


def test_the_start_step_enters_the_directory_and_passes_arguments_verbatim(
    tmp_path: Path,
) -> None:
    hostile = "$(touch pwned); `touch pwned2` ; echo $HOME"
    done = _start(
        str(tmp_path),
        "/bin/sh",
        "-c",
        'pwd; printf "%s\\n" "$1"; echo "oldpwd=${OLDPWD-unset}"; ulimit -c',
        "x",
        hostile,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert Path(lines[0]).resolve() == tmp_path.resolve()
    assert lines[1] == hostile
    assert lines[2] == "oldpwd=unset"
    assert lines[3] == "0"
    assert not (tmp_path / "pwned").exists()
    assert not (tmp_path / "pwned2").exists()


def test_the_start_step_exits_125_when_the_directory_is_missing(tmp_path: Path) -> None:
    done = _start(str(tmp_path / "missing"), "/usr/bin/env")
    assert done.returncode == 125
    assert done.stdout == b""


# ---------------------------------------------------------------------- the egress proxy
# Everything but sandbox-exec itself runs on any OS: the proxy, its two loopback listeners,
# the environment each command gets, and the refusal when the proxy cannot start.


def _settings() -> ProxySettings:
    return ProxySettings(
        resolver=StaticResolver({"allowed.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}),
        connector=LoopbackOnly(),
    )


def _get_via(env: dict[str, str], url: str, *, family: socket.AddressFamily) -> str:
    """A plain-HTTP request through the proxy named by `env`, as a tool would send it; the
    status code of the answer."""
    proxy = urllib.parse.urlsplit(env["HTTP_PROXY"])
    auth = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode()
    where = "::1" if family == socket.AF_INET6 else proxy.hostname
    with socket.create_connection((where, proxy.port), timeout=10) as sock:
        sock.sendall(
            f"GET {url} HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        return sock.recv(4096).split(b"\r\n", 1)[0].decode().split(" ")[1]


def test_the_session_proxy_serves_both_loopbacks_with_per_command_credentials(
    tmp_path: Path,
) -> None:
    upstream = HttpUpstream()
    policy = policy_from_dict(
        {"net": {"allow": ["allowed.test", "127.0.0.1"], "ports": [upstream.port]}}
    ).with_workspace(str(tmp_path))
    proxy, endpoint = start_proxy(policy, "t2m-test", _settings())
    try:
        assert endpoint.host == "127.0.0.1"
        profile = SeatbeltProfile.from_policy(policy, endpoint)
        assert f'(remote tcp "localhost:{endpoint.port}")' in profile.text
        session = _Session(
            session_id="t2m-test",
            policy=policy,
            profile=profile,
            params={},
            workspace=str(tmp_path),
            tmpdir=str(tmp_path),
            files=SandboxHandle(id="t2m-test", tier=SandboxTier.T0, workspace=str(tmp_path)),
            proxy=proxy,
        )
        (first, _), (second, _) = session.env_for(None), session.env_for("build-7")
        assert first["HTTP_PROXY"].startswith("http://cmd-1:")
        assert first["HTTP_PROXY"].endswith(f"@127.0.0.1:{endpoint.port}")
        assert first["ALL_PROXY"].startswith("socks5h://cmd-1:")
        assert second["HTTP_PROXY"].startswith("http://build-7:")
        assert first["NO_PROXY"] == "localhost,127.0.0.1,::1"
        with pytest.raises(ValueError, match="command_id"):
            session.env_for("not an id")
        for family in (socket.AF_INET, socket.AF_INET6):
            url = f"http://allowed.test:{upstream.port}/"
            assert _get_via(first, url, family=family) == "200"
            url = f"http://other.test:{upstream.port}/"
            assert _get_via(second, url, family=family) == "403"
    finally:
        proxy.close()
        upstream.close()
    assert not proxy.alive


def test_a_proxy_that_cannot_start_refuses_the_net_fields_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_port(self: ProxyThread) -> int:
        del self
        raise OSError(errno.EADDRINUSE, "no port is free on both 127.0.0.1 and ::1")

    monkeypatch.setattr(ProxyThread, "start_loopback", no_port)
    threads = threading.active_count()
    policy = policy_from_dict({"net": {"allow": ["allowed.test"]}}).with_workspace(str(tmp_path))
    with pytest.raises(PolicyViolation) as refused:
        start_proxy(policy, "t2m-test", _settings())
    assert refused.value.field == "net.allow"
    assert "no port is free" in refused.value.reason
    assert "refused rather than opening the whole network" in refused.value.reason
    assert threading.active_count() == threads


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the refusal given off macOS")
def test_no_proxy_starts_where_the_tier_cannot_run(tmp_path: Path) -> None:
    threads = threading.active_count()
    with pytest.raises(TierUnavailable):
        _create({"net": {"allow": ["allowed.test"]}}, workspace=str(tmp_path))
    assert threading.active_count() == threads


class _BareProfile(SeatbeltProfile, frozen=True, kw_only=True):
    """Runs the command without sandbox-exec (which only macOS has): what the test below
    checks is the session's proxy credentials around a command, not what Seatbelt denies."""

    def argv(self, command: Sequence[str], values: Mapping[str, str]) -> list[str]:
        del values
        return list(command)


# The command: its proxy URL, then the status of a request through the proxy while it runs.
_USES_THE_PROXY = r"""
import base64, os, socket, urllib.parse
p = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = base64.b64encode(f"{p.username}:{p.password}".encode()).decode()
with socket.create_connection((p.hostname, p.port), timeout=10) as s:
    s.sendall(f"GET {os.environ['URL']} HTTP/1.1\r\nHost: x\r\n"
              f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode())
    print(os.environ["HTTP_PROXY"])
    print(s.recv(4096).split(b" ", 2)[1].decode())
"""


@pytest.mark.parametrize("command_id", [None, "build-7"])
def test_a_commands_proxy_credentials_die_when_it_ends(
    tmp_path: Path, command_id: str | None
) -> None:
    upstream = HttpUpstream()
    url = f"http://allowed.test:{upstream.port}/"
    policy = policy_from_dict(
        {
            # The literal lets allowed.test's loopback answer through (see _settings).
            "net": {"allow": ["allowed.test", "127.0.0.1"], "ports": [upstream.port]},
            "env": {"URL": url},
        }
    ).with_workspace(str(tmp_path))
    proxy, endpoint = start_proxy(policy, "t2m-test", _settings())
    sandbox = T2MacosSandbox()
    handle = SandboxHandle(id="t2m-test", tier=SandboxTier.T2_MACOS, workspace=str(tmp_path))
    sandbox._sessions[handle.id] = _Session(  # pyright: ignore[reportPrivateUsage] - a session without sandbox-exec
        session_id=handle.id,
        policy=policy,
        profile=_BareProfile(text="", params=(), proxy=endpoint),
        params={},
        workspace=str(tmp_path),
        tmpdir=str(tmp_path),
        files=SandboxHandle(id=handle.id, tier=SandboxTier.T0, workspace=str(tmp_path)),
        proxy=proxy,
    )

    async def run() -> tuple[bytes, ExecExit | None]:
        out, end = b"", None
        spec = ExecSpec(argv=(sys.executable, "-I", "-c", _USES_THE_PROXY), command_id=command_id)
        async for event in sandbox.exec(handle, spec):
            if isinstance(event, OutputChunk) and event.stream == "stdout":
                out += event.data
            elif isinstance(event, ExecExit):
                end = event
        return out, end

    try:
        out, end = asyncio.run(run())
        assert end is not None, "the command did not end"
        assert end.exit_code == 0, out
        proxy_url, status = out.decode().split()
        user = urllib.parse.urlsplit(proxy_url).username
        assert user == (command_id or "cmd-1")
        # Positive control: while the command ran, its credentials got it through.
        assert status == "200", f"the command's own request got {status}"
        # The command has ended: the same credentials, presented by anyone, get nothing.
        assert _get_via({"HTTP_PROXY": proxy_url}, url, family=socket.AF_INET) == "407"
        assert upstream.count == 1
    finally:
        asyncio.run(sandbox.destroy(handle))
        upstream.close()
    assert not proxy.alive
