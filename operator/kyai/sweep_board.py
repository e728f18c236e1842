"""``kyai leaderboard --sweep NAME``: an EvaluationSweep's ranked table, as the leaderboard shows.

The rows are the sweep's own (``status.table``, or the whole table from its ConfigMap when
``status.tableConfigMap`` names one: more than 64 rows): ranked by the operator with the
leaderboard's method (:data:`kyai.ranking.RANKING_METHOD`) within each Snapshot and
comparison key, so nothing is computed again here. Outputs: ``table`` (kubectl-like
columns, one block per Snapshot), ``markdown`` (one GitHub table per Snapshot) and ``json``
(the sweep's phase, cells, best, Pareto fronts and rows, keyed as in the sweep's status).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kyai._exitcodes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from kyai.api.evaluationsweep import EvaluationSweepStatus, SweepRow

#: The columns of the table and markdown outputs: (header, how a row shows it).
COLUMNS: tuple[str, ...] = (
    "RANK",
    "WORKLOAD",
    "ENGINE-ARGS",
    "RUN",
    "PHASE",
    "SCORE",
    "95%-INTERVAL",
    "DELTA",
    "DELTA-INTERVAL",
    "PAIRED",
    "P-VALUE",
    "NON-INFERIOR",
    "TTFT-P50-MS",
    "TOK/S",
    "PARETO",
    "NOTE",
)


class SweepBoardError(Exception):
    """The sweep cannot be shown; ``code`` is the exit status."""

    def __init__(self, message: str, *, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class SweepBoard:
    """A sweep's status and its full table."""

    namespace: str
    name: str
    status: EvaluationSweepStatus
    rows: tuple[SweepRow, ...]


def board_from(sweep: Mapping[str, Any], config_map: Mapping[str, Any] | None = None) -> SweepBoard:
    """The board of ``sweep`` (as the API returns it); ``config_map``: its table's ConfigMap."""
    from kyai.sweeps import TableError, read_table

    meta = sweep.get("metadata") or {}
    where = f"EvaluationSweep {meta.get('namespace')}/{meta.get('name')}"
    try:
        status = EvaluationSweepStatus.model_validate(sweep.get("status") or {})
    except ValueError as exc:
        raise SweepBoardError(f"{where}: unreadable status: {exc}") from exc
    rows: Sequence[SweepRow] = status.table or ()
    if status.table_config_map is not None:
        if config_map is None:
            raise SweepBoardError(
                f"{where}: its table's ConfigMap {status.table_config_map} does not exist"
            )
        try:
            rows = read_table(config_map)
        except TableError as exc:
            raise SweepBoardError(f"{where}: {exc}") from exc
    return SweepBoard(str(meta.get("namespace", "")), str(meta.get("name", "")), status,
                      tuple(rows))  # fmt: skip


#: What the P-VALUE and NON-INFERIOR columns show when no verdict can be drawn.
NOT_ESTIMABLE = "n/a"


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _p_value(row: SweepRow) -> str:
    return "-" if row.p_value is None else f"{row.p_value:.3g} {row.test or ''}".strip()


def _delta_interval(row: SweepRow) -> str:
    interval = row.delta_interval
    if interval is None:
        return NOT_ESTIMABLE if row.estimable is False else "-"
    return f"{interval.low:+.4f} to {interval.high:+.4f}"


def _note(row: SweepRow) -> str:
    """The row's note, and why it is not non-inferior (``nonInferiorReason``)."""
    reason = row.non_inferior_reason
    parts = [row.note, None if reason is None else f"not non-inferior: {reason}"]
    return "; ".join(part for part in parts if part) or "-"


def row_cells(row: SweepRow) -> list[str]:
    """A row as the table shows it, one cell per column of :data:`COLUMNS`."""
    interval = row.interval
    shown = "-" if interval is None else f"{interval.low:.4f}-{interval.high:.4f}"
    if interval is not None and interval.method:
        shown += f" {interval.method}"
    flags = {True: "yes", False: "no", None: "-"}
    # No verdict could be drawn (no interval): "n/a", the note says why; never "yes".
    verdict = NOT_ESTIMABLE if row.estimable is False else None
    return [
        "-" if row.rank is None else str(row.rank),
        row.workload,
        row.engine_args_set or "-",
        row.run or "-",
        row.phase,
        _number(row.avg_score, 4),
        shown,
        "-" if row.delta is None else f"{row.delta:+.4f}",
        _delta_interval(row),
        "-" if row.paired_questions is None else str(row.paired_questions),
        verdict or _p_value(row),
        (verdict or flags[row.non_inferior]) + (" (baseline)" if row.baseline else ""),
        _number(row.ttft_p50_ms, 1),
        _number(row.output_tokens_per_second, 1),
        {True: "*", False: "", None: "-"}[row.pareto] or "-",
        _note(row),
    ]


def snapshot_groups(rows: Sequence[SweepRow]) -> list[tuple[str, list[SweepRow]]]:
    """The rows by Snapshot, in table order."""
    groups: dict[str, list[SweepRow]] = {}
    for row in rows:
        groups.setdefault(row.snapshot, []).append(row)
    return list(groups.items())


def heading(board: SweepBoard) -> str:
    """The sweep's line above its tables: phase, cells succeeded, the best."""
    status = board.status
    cells = status.cells
    counted = "" if cells is None else f", {cells.succeeded}/{cells.total} cells succeeded"
    best = f"; best: {status.best_names}" if status.best_names else ""
    return f"SWEEP {board.namespace}/{board.name}: {status.phase or 'Pending'}{counted}{best}"


def footer() -> list[str]:
    """What RANK means, under each table."""
    from kyai.ranking import RANKING_METHOD

    return [
        f"RANK: within a Snapshot and comparison key, {RANKING_METHOD} (alpha 0.05); "
        "equal ranks: no test separates them.",
        "DELTA, DELTA-INTERVAL, PAIRED, P-VALUE, NON-INFERIOR: against the baseline cell of "
        "the same Snapshot, when the sweep names a baseline: DELTA = the mean of the paired "
        "differences (cell - baseline) on PAIRED questions, DELTA-INTERVAL its 95 % interval "
        "(Bonett-Price for 0/1 scores, else t), NON-INFERIOR yes when that interval's low end "
        "is above -margin (a no: NOTE says by how much, in points = score x 100); "
        f"{NOT_ESTIMABLE}: no interval can be estimated, so no verdict (NOTE says why).",
    ]


def render_table(board: SweepBoard) -> str:
    """kubectl-like columns, one block per Snapshot."""
    blocks = [heading(board)]
    for snapshot, rows in snapshot_groups(board.rows):
        cells = [list(COLUMNS), *(row_cells(row) for row in rows)]
        widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
        lines = [f"SNAPSHOT {snapshot}"]
        lines += [
            "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in cells
        ]
        blocks.append("\n".join(lines))
    blocks.append("\n".join(footer()))
    return "\n\n".join(blocks)


def render_markdown(board: SweepBoard) -> str:
    """One GitHub-flavoured table per Snapshot."""
    headers = [header.replace("-", " ").title() for header in COLUMNS]
    blocks = [f"## {heading(board)}"]
    for snapshot, rows in snapshot_groups(board.rows):
        lines = [f"### Snapshot `{snapshot}`", "", "| " + " | ".join(headers) + " |"]
        lines.append("|" + "|".join("---" for _ in headers) + "|")
        lines += [
            "| " + " | ".join(cell.replace("|", "\\|") for cell in row_cells(row)) + " |"
            for row in rows
        ]
        blocks.append("\n".join(lines))
    blocks.append("\n\n".join(footer()))
    return "\n\n".join(blocks)


def render_json(board: SweepBoard) -> str:
    """The sweep's phase, cells, best, Pareto fronts and every row, keyed as in its status."""
    from kyai.ranking import RANKING_METHOD

    status = board.status
    payload = {
        "namespace": board.namespace,
        "sweep": board.name,
        "phase": status.phase,
        "message": status.message,
        "cells": None if status.cells is None else status.cells.to_k8s(),
        "best": None if status.best is None else [choice.to_k8s() for choice in status.best],
        "pareto": [front.to_k8s() for front in status.pareto or ()],
        "ranking": {"method": RANKING_METHOD, "alpha": 0.05},
        "rows": [row.to_k8s() for row in board.rows],
    }
    return json.dumps(payload, indent=2)


def read_board(namespace: str | None, name: str) -> SweepBoard:
    """The sweep ``name`` of the kubeconfig's cluster (or the pod's), with its full table."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from kyai._kubeconfig import list_kube_config_contexts, load_kube_config
    from kyai.constants import GROUP, VERSION

    try:
        load_kube_config()
        if namespace is None:
            _, current = list_kube_config_contexts()
            namespace = (current or {}).get("context", {}).get("namespace") or "default"
    except config.ConfigException:
        try:
            config.load_incluster_config()
        except config.ConfigException as exc:
            raise SweepBoardError(f"no kubeconfig and not in a pod: {exc}") from exc
        if namespace is None:
            namespace = "default"
    try:
        sweep = client.CustomObjectsApi().get_namespaced_custom_object(
            GROUP, VERSION, namespace, "evaluationsweeps", name
        )
        table = EvaluationSweepStatus.model_validate(sweep.get("status") or {}).table_config_map
        config_map = None
        if table is not None:
            config_map = _config_map(client.CoreV1Api(), namespace, table)
    except ApiException as exc:
        if exc.status == 404:
            raise SweepBoardError(f"no EvaluationSweep {name} in namespace {namespace}") from exc
        raise SweepBoardError(
            f"the API server refused: HTTP {exc.status} {exc.reason}", code=EXIT_UNREACHABLE
        ) from exc
    except HTTPError as exc:
        raise SweepBoardError(
            f"the API server cannot be reached: {exc}", code=EXIT_UNREACHABLE
        ) from exc
    return board_from(sweep, config_map)


def _config_map(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        found: dict[str, Any] = api.api_client.sanitize_for_serialization(
            api.read_namespaced_config_map(name, namespace)
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def show(namespace: str | None, name: str, output: str) -> int:
    """Print the sweep's table in ``output`` form; the exit status."""
    try:
        board = read_board(namespace, name)
    except SweepBoardError as exc:
        print(f"kyai leaderboard: {exc}", file=sys.stderr)
        return exc.code
    if output == "json":
        print(render_json(board))
    elif output == "markdown":
        print(render_markdown(board))
    else:
        print(render_table(board))
    return EXIT_OK
