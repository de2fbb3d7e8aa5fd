"""The benchmark harness behind `nox -s bench`: measure side by side, record, render.

Budgets are ratios between variants measured in the same run, interleaved round by round
(in a rotating order), never absolute times: machines differ and this one is shared.

Results are merged into ``benchmarks/results.json`` under each benchmark's own top-level
key, so a benchmark added later adds a key rather than rewriting the file (standalone
scripts such as ``bench_egress.py`` write their keys the same way). ``docs/benchmarks.md``
is rendered from the whole file: a table and a chart for each benchmark measured through
this harness (an entry with ``variants``), the figures of every other entry as a table.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results.json"
DOC = REPO / "docs" / "benchmarks.md"
CHARTS = REPO / "docs" / "benchmarks"

Json = dict[str, object]


class _Axes(Protocol):
    """The part of matplotlib's Axes the charts use (matplotlib is in the bench group only)."""

    def barh(
        self, y: list[str], width: list[float], *, xerr: list[list[float]], color: str, capsize: int
    ) -> object: ...
    def invert_yaxis(self) -> None: ...
    def set_xlabel(self, label: str) -> object: ...
    def set_title(self, label: str) -> object: ...


class _Figure(Protocol):
    def tight_layout(self) -> None: ...
    def savefig(self, fname: Path, *, dpi: int, metadata: dict[str, None]) -> None: ...


class _Pyplot(Protocol):
    def subplots(self, *, figsize: tuple[float, float]) -> tuple[_Figure, _Axes]: ...
    def close(self, fig: _Figure) -> None: ...


@dataclass
class Variant:
    name: str
    label: str
    run: Callable[[], None]
    samples: list[float] = field(default_factory=list[float])

    def summary(self) -> dict[str, float]:
        ms = sorted(s * 1000 for s in self.samples)
        return {
            "median_ms": round(statistics.median(ms), 3),
            "p10_ms": round(ms[len(ms) // 10], 3),
            "p90_ms": round(ms[(len(ms) * 9) // 10], 3),
            "min_ms": round(ms[0], 3),
            "samples": len(ms),
        }


def interleave(variants: Sequence[Variant], *, rounds: int, warmup: int) -> None:
    """Run every variant once per round, rotating the order so none always goes first."""
    for i in range(warmup + rounds):
        order = list(variants[i % len(variants) :]) + list(variants[: i % len(variants)])
        for variant in order:
            start = time.perf_counter()
            variant.run()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                variant.samples.append(elapsed)


def median_ms(step: Callable[[], object], runs: int = 200, *, warmup: int = 0) -> float:
    """The median of `runs` timings of `step` alone, in ms (a part of a variant, timed on
    its own to split the variant's time)."""
    for _ in range(warmup):
        step()
    samples: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return round(statistics.median(samples) * 1000, 3)


def raw_bwrap(benchmark: str) -> tuple[str, list[str]]:
    """The bwrap a session uses ("path (source)") and the raw jail every startup benchmark
    compares with: `bwrap --unshare-all --die-with-parent --ro-bind / / /bin/true`."""
    if not sys.platform.startswith("linux"):
        raise SystemExit(f"{benchmark}: needs Linux; this host is {sys.platform}")
    from panday_tier_linux.host import find_bwrap  # noqa: PLC0415 - Linux only

    bwrap = find_bwrap()
    if bwrap is None:
        raise SystemExit(f"{benchmark}: bwrap not found")
    argv = [bwrap.path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "/bin/true"]
    return f"{bwrap.path} ({bwrap.source})", argv


def host_info() -> Json:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(load[0], 2),
    }


def record(name: str, entry: Json) -> None:
    """Merge one benchmark's entry into results.json (other benchmarks' keys untouched)."""
    doc: Json = {}
    if RESULTS.exists():
        doc = cast("Json", json.loads(RESULTS.read_text(encoding="utf-8")))
    # An older harness nested its entries under "benchmarks"; each now has its own key.
    doc.pop("benchmarks", None)
    doc[name] = {
        **entry,
        "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _chart(name: str, entry: Json) -> str:
    # Imported by name: matplotlib is only installed with the bench dependency group.
    importlib.import_module("matplotlib").use("Agg")
    plt = cast("_Pyplot", importlib.import_module("matplotlib.pyplot"))

    variants = cast("dict[str, dict[str, float]]", entry["variants"])
    labels = cast("dict[str, str]", entry.get("labels", {}))
    names = list(variants)
    medians = [variants[n]["median_ms"] for n in names]
    low = [variants[n]["median_ms"] - variants[n]["p10_ms"] for n in names]
    high = [variants[n]["p90_ms"] - variants[n]["median_ms"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.7 * len(names)))
    ax.barh(
        [labels.get(n, n) for n in names], medians, xerr=[low, high], color="#4c72b0", capsize=4
    )
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds (median; whiskers p10-p90)")
    ax.set_title(str(entry.get("title", name)))
    fig.tight_layout()
    CHARTS.mkdir(parents=True, exist_ok=True)
    path = CHARTS / f"{name}.png"
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return f"benchmarks/{name}.png"


def _leaves(prefix: str, node: object) -> list[tuple[str, object]]:
    if isinstance(node, dict):
        out: list[tuple[str, object]] = []
        for key, value in sorted(cast("dict[str, object]", node).items()):
            out += _leaves(f"{prefix}.{key}" if prefix else key, value)
        return out
    return [(prefix, node)]


def _foreign(name: str, entry: Json) -> list[str]:
    """An entry written by a standalone benchmark script: its figures, as it recorded them."""
    lines = [f"## {name}", "", f"Recorded by `tools/bench/bench_{name}.py`.", ""]
    lines += ["| figure | value |", "|---|---|"]
    lines += [f"| `{key}` | {value} |" for key, value in _leaves("", entry)]
    return [*lines, ""]


def render() -> None:
    """Write docs/benchmarks.md (and its charts) from results.json."""
    benchmarks = cast("dict[str, Json]", json.loads(RESULTS.read_text(encoding="utf-8")))
    lines = [
        "# Benchmarks",
        "",
        "Generated by `nox -s bench` from `benchmarks/results.json`; do not edit by hand.",
        "Each benchmark measures its variants side by side in one run, interleaved round by",
        "round, and its budget is a ratio between them: absolute times depend on the machine",
        "(and on what else it runs), ratios much less so. `tools/bench/run.py` starts each one",
        "when the 1-minute load average is below 1.0 (waiting at most 90 s), so that none is",
        "measured in the wake of the one before it (the Ray cluster's); each records its load.",
        "",
    ]
    for name in sorted(benchmarks):
        entry = benchmarks[name]
        if "variants" not in entry:
            lines += _foreign(name, entry)
            continue
        variants = cast("dict[str, dict[str, float]]", entry["variants"])
        labels = cast("dict[str, str]", entry.get("labels", {}))
        host = cast("Json", entry.get("host", {}))
        lines += [f"## {entry.get('title', name)}", "", str(entry.get("description", "")), ""]
        lines += [
            "| variant | median ms | p10 ms | p90 ms | min ms | samples |",
            "|---|---|---|---|---|---|",
        ]
        for vname, s in variants.items():
            lines.append(
                f"| {labels.get(vname, vname)} | {s['median_ms']:.2f} | {s['p10_ms']:.2f} | "
                f"{s['p90_ms']:.2f} | {s['min_ms']:.2f} | {int(s['samples'])} |"
            )
        lines.append("")
        ratio, budget = entry.get("ratio"), entry.get("budget")
        if ratio is not None or "over_budget" in entry:
            verdict = "within budget" if entry.get("within_budget") else "OVER BUDGET"
            lines += [
                f"**Ratio** {entry.get('ratio_of', '')}: **{ratio}** (budget {budget}; {verdict}).",
                "",
            ]
            over = cast("list[str]", entry.get("over_budget", []))
            if over:
                lines += ["Over budget: " + "; ".join(over) + ".", ""]
        measured = (
            f"Measured {entry.get('measured', '?')} on {host.get('platform', '?')}, "
            f"{host.get('cpus', '?')} CPUs, Python {host.get('python', '?')}, "
            f"load average {host.get('loadavg_1m_at_start', '?')} at the start."
        )
        if "difference_ms" in entry:
            lines += [f"Difference of the medians, (b) - (a): **{entry['difference_ms']} ms**.", ""]
        lines += [f"![{name}]({_chart(name, entry)})", "", measured, ""]
        if "where_the_time_goes" in entry:
            lines += _where(cast("Json", entry["where_the_time_goes"]))
    DOC.write_text("\n".join(lines), encoding="utf-8")


def _where(where: Json) -> list[str]:
    """The "Where the time goes" section of a benchmark entry that records one: its notes,
    then tables given as lists of rows (first column a name, then figures)."""
    lines = ["### Where the time goes", ""]
    lines += [str(p) + "\n" for p in cast("list[str]", where.get("notes", []))]
    tables = (
        ("split_of_b_ms", "part of (b), from the medians of the variants", ("ms",)),
        ("by_owner_ms", "imported first by", ("ms", "its costliest modules (self ms)")),
        ("top_modules_self_ms", "module (self time)", ("ms", "imported first by")),
    )
    for table in cast("list[Json]", where.get("tables", [])):
        columns = cast("list[str]", table["columns"])
        lines += [f"| {table['title']} | " + " | ".join(columns) + " |"]
        lines += ["|---" * (len(columns) + 1) + "|"]
        for name, *rest in cast("list[list[object]]", table["rows"]):
            cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in rest]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    for key, head, columns in tables:
        rows = cast("list[list[object]]", where.get(key, []))
        if not rows:
            continue
        if key == "by_owner_ms":
            runs = where.get("importtime_runs", "?")
            lines += [
                (
                    f"Import time by first importer (`-X importtime`, median of {runs} runs; "
                    "a module counts once, for whoever imported it first, and the tool's own "
                    "overhead inflates every figure, so read them as shares):"
                ),
                "",
            ]
        lines += [f"| {head} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
        for name, *rest in rows:
            cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in rest]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines
