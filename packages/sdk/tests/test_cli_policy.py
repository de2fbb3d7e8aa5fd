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


def test_allowlist_is_refused_naming_the_field_the_hosts_and_the_reason() -> None:
    result = panday("policy", "check", str(EXAMPLES / "allowlist.toml"))
    assert result.returncode == exitcodes.FAILED, result.stdout + result.stderr
    assert "NOT enforceable" in result.stdout
    assert "net.allow" in result.stdout
    assert "api.github.com" in result.stdout
    assert "no egress proxy" in result.stdout


def test_json_output_is_structured() -> None:
    result = panday("policy", "check", "--json", str(EXAMPLES / "allowlist.toml"))
    doc = json.loads(result.stdout)
    assert doc["valid"] is True
    assert doc["enforceable_here"] is False
    tiers = {row["tier"]: row for row in doc["tiers"]}
    assert "t2-linux" in tiers
    assert "t2-macos" in tiers
    refused = [r["field"] for row in doc["tiers"] for r in row["refused"]]
    assert "net.allow" in refused


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
