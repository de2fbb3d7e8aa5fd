"""A loopback-only OSV query endpoint over a local advisory snapshot, for offline audits.

`PANDAY_ADVISORY_DB` names a directory in the layout of the PyPA advisory database: OSV
records as YAML under `vulns/<package>/*.yaml`. This module answers the subset of the OSV
API that pip-audit (`/v1/query`) and `uv audit` (`/v1/querybatch`, `/v1/vulns/<id>`) use,
matching versions with OSV's ECOSYSTEM range semantics and PEP 440 ordering.

It binds to a loopback address only and refuses to start on any other. A record it cannot
parse is an error answered with HTTP 500 (the audit then fails), never skipped: a silently
dropped advisory is a silently passed audit.

Run it by hand for `uv audit --service-url` or `pip-audit -s osv --osv-url`:

    python tools/osv_server.py ../shared/advisories/pypa     # prints both URLs, serves until ^C
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import msgspec
from packaging.version import InvalidVersion, Version

from gatelib import GateError, canonical

if TYPE_CHECKING:
    from collections.abc import Generator


class _Event(msgspec.Struct, forbid_unknown_fields=True):
    introduced: str | None = None
    fixed: str | None = None
    last_affected: str | None = None
    limit: str | None = None


class _Range(msgspec.Struct):
    type: str
    events: list[_Event]


class _Package(msgspec.Struct):
    name: str
    ecosystem: str


class _Affected(msgspec.Struct):
    package: _Package
    ranges: list[_Range] = []
    versions: list[str] = []


class Advisory(msgspec.Struct):
    id: str
    modified: str
    affected: list[_Affected] = []
    withdrawn: str | None = None


class _QueryPackage(msgspec.Struct):
    name: str
    ecosystem: str = "PyPI"


class _Query(msgspec.Struct):
    """An OSV query for one exact version (the form pip-audit and uv audit send)."""

    package: _QueryPackage
    version: str


class _Batch(msgspec.Struct):
    queries: list[_Query]


@dataclass(frozen=True, slots=True)
class Record:
    """One advisory: its parsed form for matching and its OSV JSON for answering."""

    advisory: Advisory
    json: dict[str, object]


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _in_range(version: Version, events: list[_Event]) -> bool:
    """OSV ECOSYSTEM range evaluation: walk the events in version order."""
    keyed: list[tuple[Version, str]] = []
    for event in events:
        for kind in ("introduced", "fixed", "last_affected"):
            value: str | None = getattr(event, kind)
            if value is None:
                continue
            at = Version("0") if value == "0" else _version(value)
            if at is None:
                # An unparsable bound cannot be ordered; treat the range as matching so
                # that a malformed advisory errs towards reporting, not towards silence.
                return True
            keyed.append((at, kind))
    # At equal versions "introduced" sorts first, so a re-introduction wins over a fix.
    keyed.sort(key=lambda item: (item[0], item[1] != "introduced"))
    affected = False
    for at, kind in keyed:
        if kind == "introduced" and at <= version:
            affected = True
        elif (kind == "fixed" and at <= version) or (kind == "last_affected" and at < version):
            affected = False
    return affected


def affects(advisory: Advisory, package: str, version: str) -> bool:
    """True when `advisory` lists `package` at `version` as affected (PyPI ecosystem)."""
    if advisory.withdrawn is not None:
        return False
    parsed = _version(version)
    for entry in advisory.affected:
        if entry.package.ecosystem != "PyPI" or canonical(entry.package.name) != package:
            continue
        if version in entry.versions:
            return True
        if parsed is None:
            continue
        for rng in entry.ranges:
            if rng.type == "ECOSYSTEM" and _in_range(parsed, rng.events):
                return True
    return False


class AdvisoryDB:
    """The snapshot, indexed by canonical package name and loaded lazily per package."""

    def __init__(self, root: Path) -> None:
        vulns = root / "vulns"
        if not vulns.is_dir():
            raise GateError(f"{root} is not an OSV advisory directory: it has no vulns/")
        self.root = root
        self._dirs = {canonical(d.name): d for d in vulns.iterdir() if d.is_dir()}
        if not self._dirs:
            raise GateError(f"{vulns} holds no advisories")
        self._cache: dict[str, list[Record]] = {}
        self._by_id: dict[str, Record] = {}
        self._lock = threading.Lock()

    @property
    def package_count(self) -> int:
        return len(self._dirs)

    def records(self, package: str) -> list[Record]:
        name = canonical(package)
        with self._lock:
            if name not in self._cache:
                self._cache[name] = [self._load(p) for p in self._files(name)]
                for record in self._cache[name]:
                    self._by_id[record.advisory.id] = record
            return self._cache[name]

    def by_id(self, advisory_id: str) -> Record | None:
        with self._lock:
            if advisory_id in self._by_id:
                return self._by_id[advisory_id]
        for name in self._dirs:  # rare path (uv audit's follow-up request): load everything
            self.records(name)
        with self._lock:
            return self._by_id.get(advisory_id)

    def query(self, package: str, version: str) -> list[Record]:
        name = canonical(package)
        return [r for r in self.records(name) if affects(r.advisory, name, version)]

    def _files(self, name: str) -> list[Path]:
        directory = self._dirs.get(name)
        if directory is None:
            return []
        return sorted([*directory.glob("*.yaml"), *directory.glob("*.json")])

    @staticmethod
    def _load(path: Path) -> Record:
        try:
            raw: object = (
                msgspec.json.decode(path.read_bytes())
                if path.suffix == ".json"
                else msgspec.yaml.decode(path.read_bytes())
            )
            # Round-trip through JSON: YAML may carry dates as datetime objects, while the
            # OSV API (and pip-audit) speaks RFC 3339 strings.
            as_json = msgspec.json.encode(raw)
            advisory = msgspec.json.decode(as_json, type=Advisory)
            document: dict[str, object] = msgspec.json.decode(as_json, type=dict[str, object])
        except (OSError, msgspec.MsgspecError) as exc:
            raise GateError(f"cannot read advisory {path}: {exc}") from exc
        return Record(advisory, document)


def snapshot_date(root: Path) -> str:
    """A human label for how old the snapshot is; never empty.

    SNAPSHOT.txt (in the directory or beside it) states when it was taken; the newest
    `modified` stamp among the records says how fresh its content is. Both are shown.
    """
    parts: list[str] = []
    for candidate in (root / "SNAPSHOT.txt", root.parent / "SNAPSHOT.txt"):
        if candidate.is_file():
            text = candidate.read_text(encoding="utf-8", errors="replace")
            found = re.search(r"\b(\d{4}-\d{2}-\d{2})\b", text)
            if found:
                parts.append(f"taken {found.group(1)} per {candidate.name}")
            break
    newest = ""
    stamp = re.compile(r"^modified:\s*[\"']?(\d{4}-\d{2}-\d{2})", re.MULTILINE)
    for path in (root / "vulns").glob("*/*.yaml"):
        for match in stamp.finditer(path.read_text(encoding="utf-8", errors="replace")):
            newest = max(newest, match.group(1))
    parts.append(f"newest advisory modified {newest or 'unknown'}")
    return "; ".join(parts)


class _Handler(BaseHTTPRequestHandler):
    db: ClassVar[AdvisoryDB]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base class name
        """Quiet: the audit prints its own summary."""

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _peer_is_loopback(self) -> bool:
        host = self.client_address[0]
        return ipaddress.ip_address(host).is_loopback

    def do_GET(self) -> None:
        if not self._peer_is_loopback():
            self._send(403, {"message": "loopback clients only"})
            return
        prefix = "/v1/vulns/"
        if not self.path.startswith(prefix):
            self._send(404, {"message": f"unknown path {self.path}"})
            return
        try:
            record = self.db.by_id(self.path.removeprefix(prefix))
        except GateError as exc:
            self._send(500, {"message": str(exc)})
            return
        if record is None:
            self._send(404, {"message": "no such advisory"})
        else:
            self._send(200, record.json)

    def do_POST(self) -> None:
        if not self._peer_is_loopback():
            self._send(403, {"message": "loopback clients only"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        try:
            if self.path == "/v1/query":
                query = msgspec.json.decode(body, type=_Query)
                self._send(200, {"vulns": [r.json for r in self._match(query)]})
            elif self.path == "/v1/querybatch":
                batch = msgspec.json.decode(body, type=_Batch)
                results = [
                    {
                        "vulns": [
                            {"id": r.advisory.id, "modified": r.advisory.modified}
                            for r in self._match(q)
                        ]
                    }
                    for q in batch.queries
                ]
                self._send(200, {"results": results})
            else:
                self._send(404, {"message": f"unknown path {self.path}"})
        except msgspec.DecodeError as exc:
            self._send(400, {"message": f"bad query: {exc}"})
        except GateError as exc:
            self._send(500, {"message": str(exc)})

    def _match(self, query: _Query) -> list[Record]:
        if query.package.ecosystem != "PyPI":
            raise GateError(f"only the PyPI ecosystem is served, not {query.package.ecosystem!r}")
        return self.db.query(query.package.name, query.version)


@contextmanager
def serve(db: AdvisoryDB, host: str = "127.0.0.1", port: int = 0) -> Generator[str]:
    """Serve `db` on a loopback address for the duration of the block; yield the query URL."""
    if not ipaddress.ip_address(host).is_loopback:
        raise GateError(f"refusing to serve advisories on non-loopback address {host}")

    handler = type("Handler", (_Handler,), {"db": db})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="osv-server", daemon=True)
    thread.start()
    try:
        bound_host, bound_port = server.server_address[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
        yield f"http://{shown}:{bound_port}/v1/query"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve an OSV advisory directory on loopback.")
    parser.add_argument("db", type=Path, help="directory with vulns/<package>/*.yaml")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    args = parser.parse_args(argv)
    try:
        db = AdvisoryDB(args.db)
        with serve(db, args.host, args.port) as url:
            print(
                f"serving {db.package_count} packages' advisories from {args.db} at {url}",
                flush=True,
            )
            threading.Event().wait()
    except GateError as exc:
        print(f"osv_server: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
