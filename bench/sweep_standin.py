"""The instant worker of the sweep benchmark: ``kyai judge`` reports a score per Workload.

As ``opbench/standin.py`` (which ``bench/bench_operator.py`` uses), run by the devcluster in
its own event loop in place of the worker image's entrypoint, reporting through the run's
status subresource with the pod's own credentials. The difference: a sweep ranks its cells
within a Snapshot and comparison key, so the result depends on the cell. A run named
``<sweep>-wl-<i>-snap-<j>-<hash>`` scores 1 on the first ``QUESTIONS - 2 i`` of
``QUESTIONS`` questions (Workload 0 best, each next one two questions worse), and every run
of Snapshot ``j`` reports the comparison key ``standin-snap-<j>``: the table's paired tests,
Holm correction and tie-aware ranks have real work to do.
"""

from __future__ import annotations

import re
from typing import Any

from kyai_devcluster._runtime import Launch
from opbench.standin import _now, _option, report_status

#: Questions of every Snapshot of the sweep benchmark (its rows).
QUESTIONS = 20
_CELL = re.compile(r"-wl-(\d+)-snap-(\d+)-[0-9a-f]{8}$")


def scores_of(workload: int) -> list[float]:
    """Workload ``workload``'s per-question scores: right on the first 20 - 2 i questions."""
    right = max(0, QUESTIONS - 2 * workload)
    return [1.0] * right + [0.0] * (QUESTIONS - right)


def report(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(namespace/name of the run, the status the worker reports), None: nothing to report."""
    if not argv or argv[0] not in ("generate", "judge"):
        raise ValueError(f"sweep standin: only generate and judge stand in (got {argv[:1]})")
    run = _option(argv, "--report-run")
    if run is None:
        return None
    progress = {"phase": argv[0], "done": QUESTIONS, "total": QUESTIONS, "errors": 0,
                "updatedAt": _now()}  # fmt: skip
    if argv[0] == "generate":
        return run, {"progress": progress}
    cell = _CELL.search(run)
    if cell is None:
        raise ValueError(f"sweep standin: {run} is not a sweep benchmark cell's run")
    scores = scores_of(int(cell.group(1)))
    return run, {
        "progress": progress,
        "avgScore": sum(scores) / QUESTIONS,
        "avgLatencyMs": 1.0 + int(cell.group(1)),
        "questions": QUESTIONS,
        "errors": {},
        "errorCount": 0,
        "comparisonKey": f"standin-snap-{cell.group(2)}",
        "scores": scores,
    }


async def run(launch: Launch) -> int:
    """The worker container: report as the real worker would; the exit code."""
    found = report(launch.argv)
    if found is None:
        return 0
    return await report_status(launch, *found, who="sweep standin")
