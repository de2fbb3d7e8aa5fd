"""The loopback OSV endpoint: OSV range semantics, loopback-only binding, fail-closed errors."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gatelib import GateError
from osv_server import Advisory, AdvisoryDB, affects, serve, snapshot_date

FIXTURE_DB = Path(__file__).parent / "fixtures" / "advisories"


def _advisory(events: list[dict[str, str]], versions: list[str] | None = None) -> Advisory:
    return msgspec.convert(
        {
            "id": "T-1",
            "modified": "2024-01-01T00:00:00Z",
            "affected": [
                {
                    "package": {"name": "Demo_Pkg", "ecosystem": "PyPI"},
                    "ranges": [{"type": "ECOSYSTEM", "events": events}],
                    "versions": versions or [],
                }
            ],
        },
        Advisory,
    )


class _Id(msgspec.Struct):
    id: str
    modified: str | None = None


class _Answer(msgspec.Struct):
    vulns: list[_Id] = []


class _BatchAnswer(msgspec.Struct):
    results: list[_Answer]


class _Error(msgspec.Struct):
    message: str


def _post(url: str, body: object) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")  # noqa: S310 - loopback test server
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback test server
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _query(name: str, version: str) -> dict[str, object]:
    return {"package": {"name": name, "ecosystem": "PyPI"}, "version": version}


versions = st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5))


@given(low=versions, high=versions, probe=versions)
def test_introduced_fixed_range_matches_half_open_interval(
    low: tuple[int, int, int], high: tuple[int, int, int], probe: tuple[int, int, int]
) -> None:
    def text(v: tuple[int, int, int]) -> str:
        return ".".join(map(str, v))

    assume(low < high)  # a fix ordered before its introduction describes a different range
    advisory = _advisory(
        [{"fixed": text(high)}, {"introduced": text(low)}]
    )  # order must not matter
    assert affects(advisory, "demo-pkg", text(probe)) == (low <= probe < high)


def test_last_affected_is_inclusive_and_introduced_zero_means_everything_before() -> None:
    advisory = _advisory([{"introduced": "0"}, {"last_affected": "1.4"}])
    assert affects(advisory, "demo-pkg", "0.1")
    assert affects(advisory, "demo-pkg", "1.4")
    assert not affects(advisory, "demo-pkg", "1.4.1")


def test_explicit_versions_match_even_without_ranges_and_names_are_canonical() -> None:
    advisory = _advisory([], versions=["2.0.0"])
    assert affects(advisory, "demo-pkg", "2.0.0")
    assert not affects(advisory, "demo-pkg", "2.0.1")
    assert not affects(advisory, "other", "2.0.0")


def test_withdrawn_advisory_matches_nothing() -> None:
    advisory = msgspec.structs.replace(
        _advisory([{"introduced": "0"}]), withdrawn="2024-02-02T00:00:00Z"
    )
    assert not affects(advisory, "demo-pkg", "1.0")


def test_refuses_to_serve_on_a_non_loopback_address() -> None:
    with pytest.raises(GateError, match="non-loopback"), serve(AdvisoryDB(FIXTURE_DB), "0.0.0.0"):  # noqa: S104 - the address being refused
        pytest.fail("a server was started on a non-loopback address")


def test_serves_queries_for_the_fixture_snapshot() -> None:
    with serve(AdvisoryDB(FIXTURE_DB)) as url:
        assert url.startswith("http://127.0.0.1:")
        status, raw = _post(url, _query("Requests", "2.19.0"))
        assert status == 200
        ids = [v.id for v in msgspec.json.decode(raw, type=_Answer).vulns]
        assert ids == ["PANDAY-TEST-2018-1"]
        status, raw = _post(url, _query("requests", "2.20.0"))
        assert (status, msgspec.json.decode(raw)) == (200, {"vulns": []})
        status, raw = _post(
            url.replace("/query", "/querybatch"), {"queries": [_query("requests", "2.0")]}
        )
        assert status == 200
        batch = msgspec.json.decode(raw, type=_BatchAnswer)
        assert batch.results == [_Answer([_Id("PANDAY-TEST-2018-1", "2024-01-01T00:00:00Z")])]


def test_malformed_advisory_is_a_server_error_not_silence(tmp_path: Path) -> None:
    db = tmp_path / "db"
    shutil.copytree(FIXTURE_DB, db)
    (db / "vulns" / "requests" / "BROKEN.yaml").write_text("id: [unclosed\n", encoding="utf-8")
    with serve(AdvisoryDB(db)) as url:
        status, raw = _post(url, _query("requests", "2.19.0"))
    assert status == 500
    assert "BROKEN.yaml" in msgspec.json.decode(raw, type=_Error).message


def test_directory_without_vulns_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="not an OSV advisory directory"):
        AdvisoryDB(tmp_path)


def test_snapshot_date_reports_label_and_newest_record() -> None:
    label = snapshot_date(FIXTURE_DB)
    assert "taken 2024-01-01 per SNAPSHOT.txt" in label
    assert "newest advisory modified 2024-01-01" in label
