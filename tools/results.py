"""Machine-readable gate results, for the run report (`nox -s report` writes RUN-REPORT.md).

Each gate records one small JSON file under `.nox/results/`: its status, the short label it
contributes to the verification line (``612 tests, 0 failed``) and its figures. Records
carry the id of the `nox` run that produced them (``PANDAY_GATE_RUN``, set by noxfile.py),
so the report never mixes one run's figures with another's. Standard library only: the
noxfile imports this module too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / ".nox" / "results"
RUN_ENV = "PANDAY_GATE_RUN"
COMMIT_ENV = "PANDAY_GATE_COMMIT"
"""The commit the gates run on, and ``+dirty`` when the tree had uncommitted changes (set by
noxfile.py once per run, so every record of the run names the same state)."""


def run_id() -> str:
    """This nox run's id (empty when a tool runs outside nox)."""
    return os.environ.get(RUN_ENV, "")


def record(gate: str, label: str | None = None, *, status: str = "ok", **figures: object) -> None:
    """Write (or overwrite) this gate's result for the current run.

    Outside a nox run (no run id: a tool run by hand, or a tool's own tests calling its
    `main`) nothing is recorded, so test fixtures never reach the report.
    """
    if not run_id():
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    commit = os.environ.get(COMMIT_ENV, "")
    doc = {
        "gate": gate,
        "status": status,
        "label": label or gate,
        "figures": figures,
        "run": run_id(),
        "written": time.time(),
        "commit": commit.removesuffix("+dirty"),
        "dirty": commit.endswith("+dirty"),
    }
    tmp = RESULTS / f".{gate}.json.tmp"
    tmp.write_text(json.dumps(doc, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    tmp.replace(RESULTS / f"{gate}.json")


def recorded_this_run(gate: str) -> bool:
    path = RESULTS / f"{gate}.json"
    if not path.is_file() or not run_id():
        return False
    doc = cast("dict[str, object]", json.loads(path.read_text(encoding="utf-8")))
    return doc.get("run") == run_id()


def load() -> dict[str, dict[str, object]]:
    """Every recorded gate of the newest run (this run's when called inside one)."""
    if not RESULTS.is_dir():
        return {}
    docs: list[dict[str, object]] = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            docs.append(cast("dict[str, object]", json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    if not docs:
        return {}
    current = run_id()
    if current and any(d.get("run") == current for d in docs):
        wanted = current
    else:
        newest = max(docs, key=lambda d: cast("float", d.get("written", 0.0)))
        wanted = newest.get("run")
    return {str(d["gate"]): d for d in docs if d.get("run") == wanted}
