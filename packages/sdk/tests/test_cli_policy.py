"""`panday policy check` end to end, through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from panday import exitcodes

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def panday(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("panday", path=str(Path(sys.executable).parent))
    assert exe is not None, "the panday console script is not installed in this environment"
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd
    )


def one_clean_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


COMMAND_OS = sys.platform.startswith("linux") or sys.platform == "darwin"


@pytest.mark.skipif(not COMMAND_OS, reason="panday has a command tier on Linux and macOS only")
def test_an_allowlist_is_enforceable_through_the_egress_proxy() -> None:
    result = panday("policy", "check", str(EXAMPLES / "allowlist.toml"))
    assert result.returncode == exitcodes.OK, result.stdout + result.stderr
    assert "valid policy, enforceable on" in result.stdout


def test_a_refusal_names_the_field_the_value_and_the_reason(tmp_path: Path) -> None:
    # T2 macOS has no per-tree process ceiling: it refuses limits.pids on every host.
    path = tmp_path / "pids.toml"
    path.write_text("version = 1\n[limits]\npids = 64\n")
    result = panday("policy", "check", str(path))
    assert "t2-macos" in result.stdout
    assert "refused limits.pids: 64:" in result.stdout
    assert "RLIMIT_NPROC" in result.stdout


def test_json_output_is_structured(tmp_path: Path) -> None:
    path = tmp_path / "pids.toml"
    path.write_text("version = 1\n[limits]\npids = 64\n")
    result = panday("policy", "check", "--json", str(path))
    doc = json.loads(result.stdout)
    assert doc["valid"] is True
    tiers = {row["tier"]: row for row in doc["tiers"]}
    assert "t2-linux" in tiers
    assert "t2-macos" in tiers
    assert [r["field"] for r in tiers["t2-macos"]["refused"]] == ["limits.pids"]
    assert tiers["t2-linux"]["refused"] == []


def test_missing_file_is_one_line_and_no_input(tmp_path: Path) -> None:
    result = panday("policy", "check", str(tmp_path / "nope.toml"))
    assert result.returncode == exitcodes.NO_INPUT
    assert "cannot read policy file" in one_clean_line(result)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[net\nallow = 1\n", "invalid TOML"),
        ("[limits]\npid = 3\n", "limits.pid: unknown key 'pid'"),
        ('[net]\nallow = ["https://x.y/"]\n', "net.allow[0]"),
        ('[limits]\nmem_bytes = "lots"\n', "limits.mem_bytes: expected an integer"),
        ('[fs]\nworkspace = "rel"\n', "fs.workspace"),
    ],
)
def test_bad_policy_is_one_line_and_invalid_policy(
    tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(content)
    result = panday("policy", "check", str(path))
    assert result.returncode == exitcodes.INVALID_POLICY
    assert fragment in one_clean_line(result)


def test_usage_errors_are_one_line() -> None:
    result = panday("policy", "check")
    assert result.returncode == exitcodes.USAGE
    assert one_clean_line(result).startswith("panday: usage:")


def test_schema_is_printed() -> None:
    result = panday("policy", "schema")
    assert result.returncode == exitcodes.OK
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
