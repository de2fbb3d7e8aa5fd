"""T2MacosSandbox on any OS: what `create` refuses before anything runs, the environment a
command gets, and the start step that runs inside the profile. (What the profile denies is
the escape suite's job, on macOS.)"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from panday_core.errors import PolicyViolation, TierUnavailable
from panday_core.policy import policy_from_dict
from panday_core.types import SessionSpec
from panday_tier_macos import T2MacosSandbox
from panday_tier_macos.sandbox import (
    BASE_ENV,
    START,
    build_environment,
    resolve_session_dir,
    stricter_limit,
)


def _temp_sessions() -> set[str]:
    return {
        p.name for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("panday-t2m-")
    }


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
        ({"net": {"allow": ["api.github.com"]}}, "net.allow"),
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


def test_a_workspace_or_staged_path_inside_a_protected_path_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / "project").mkdir()
    homes = [str(home.resolve())]
    assert resolve_session_dir("fs.workspace", str(home / "project"), homes) == str(
        (home / "project").resolve()
    )
    assert resolve_session_dir("fs.workspace", str(home), homes) == str(home.resolve())
    with pytest.raises(PolicyViolation) as info:
        resolve_session_dir("fs.staged_ro[0]", str(home / ".ssh"), homes)
    assert info.value.field == "fs.staged_ro[0]"
    assert ".ssh" in info.value.reason
    (home / "project" / "link").symlink_to(home / ".ssh")
    with pytest.raises(PolicyViolation, match=r"\.ssh"):
        resolve_session_dir("fs.workspace", str(home / "project" / "link"), homes)
    with pytest.raises(PolicyViolation, match="does not exist"):
        resolve_session_dir("fs.workspace", str(tmp_path / "missing"), homes)


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
