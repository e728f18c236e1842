"""``kyai leaderboard``: succeeded runs ranked as KYAI ranks them, one ranking per comparison key.

KYAI ranks by average score (descending), then by mean latency (ascending), and never ranks
across comparison keys: two results are comparable only when dataset version, prompts, judge
and scoring settings are equal, which is what the key hashes. The runs come from the cluster
(EvaluationRuns of the kubeconfig's cluster) or from ``summary.json`` files (``--from``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kyai._exitcodes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE

FORMATS = ("table", "json", "markdown")

#: The columns of the table and markdown outputs: (header, Entry attribute or computed key).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("RANK", "rank"),
    ("NAMESPACE", "namespace"),
    ("RUN", "run"),
    ("WORKLOAD", "workload"),
    ("MODEL", "model"),
    ("FRAMEWORK", "framework"),
    ("ENGINE-ARGS", "engine_args_set"),
    ("SCORE", "avg_score"),
    ("LATENCY-MS", "avg_latency_ms"),
    ("ERRORS", "errors"),
    ("AGE", "age"),
)


@dataclass(frozen=True)
class Entry:
    """One succeeded run (or one summary.json) as the leaderboard shows it."""

    namespace: str
    run: str
    workload: str
    model: str
    framework: str
    engine_args_set: str
    dataset: str
    comparison_key: str
    avg_score: float
    avg_latency_ms: float | None
    error_count: int
    questions: int | None
    completed_at: str | None


@dataclass(frozen=True)
class Board:
    """The ranking of one comparison key."""

    comparison_key: str
    dataset: str
    entries: tuple[Entry, ...]


def rank_key(entry: Entry) -> tuple[float, float, str, str]:
    """Score descending, then latency ascending (a run without latency last), then name."""
    latency = entry.avg_latency_ms if entry.avg_latency_ms is not None else math.inf
    return (-entry.avg_score, latency, entry.namespace, entry.run)


def rank(entries: Iterable[Entry]) -> list[Board]:
    """One board per comparison key, each ranked; boards ordered by dataset then key."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.comparison_key, []).append(entry)
    boards = [
        Board(key, members[0].dataset, tuple(sorted(members, key=rank_key)))
        for key, members in groups.items()
    ]
    return sorted(boards, key=lambda board: (board.dataset, board.comparison_key))


# -- sources ------------------------------------------------------------------------------------


def entry_from_run(
    run: Mapping[str, Any], engine_args_sets: Mapping[tuple[str, str], str] | None = None
) -> Entry | None:
    """A succeeded EvaluationRun as an entry; None for a run that has no score (yet)."""
    from pydantic import ValidationError

    from kyai.api import EvaluationRunStatus

    meta = run.get("metadata") or {}
    try:
        status = EvaluationRunStatus.model_validate(run.get("status") or {})
    except ValidationError:
        return None
    if status.phase != "Succeeded" or status.avg_score is None or not status.comparison_key:
        return None
    namespace = str(meta.get("namespace", ""))
    workload = str(((run.get("spec") or {}).get("workloadRef") or {}).get("name", ""))
    return Entry(
        namespace=namespace,
        run=str(meta.get("name", "")),
        workload=workload,
        model=status.model or "",
        framework=status.framework or "",
        engine_args_set=(engine_args_sets or {}).get((namespace, workload), ""),
        dataset=status.dataset or "",
        comparison_key=status.comparison_key,
        avg_score=float(status.avg_score),
        avg_latency_ms=status.avg_latency_ms,
        error_count=status.error_count or 0,
        questions=status.questions,
        completed_at=status.completed_at,
    )


class SummaryError(ValueError):
    """A summary.json that cannot be read; the message names the file and the field."""


def entry_from_summary(path: Path) -> Entry:
    """A ``summary.json`` (``kyai run``/``kyai judge``) as an entry named after its folder."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SummaryError(f"{path}: not a readable JSON file: {exc}") from exc
    if not isinstance(summary, dict):
        raise SummaryError(f"{path}: expected a JSON object")

    def field(name: str, kinds: type | tuple[type, ...], *, required: bool = True) -> Any:
        value = summary.get(name)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise SummaryError(f"{path}: field {name!r} is missing or not a {kinds}")
        return value

    return Entry(
        namespace="",
        run=path.parent.name,
        workload="",
        model=str(summary.get("candidate_model") or ""),
        framework="",
        engine_args_set="",
        dataset=str(summary.get("dataset") or ""),
        comparison_key=field("comparison_key", str),
        avg_score=float(field("avg_score", (int, float))),
        avg_latency_ms=field("avg_latency_ms", (int, float), required=False),
        error_count=int(field("error_count", int, required=False) or 0),
        questions=field("count", int, required=False),
        completed_at=summary.get("finished_at"),
    )


def summaries(paths: Sequence[Path]) -> list[Path]:
    """Every summary.json named, or found below a named directory."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.rglob("summary.json"))
        elif path.is_file():
            found.append(path)
        else:
            raise SummaryError(f"{path}: no such file or directory")
    return found


def cluster_entries(namespace: str | None, *, all_namespaces: bool) -> list[Entry]:
    """The succeeded EvaluationRuns of the kubeconfig's cluster (or the pod's)."""
    from kubernetes import client, config

    from kyai.constants import GROUP, VERSION

    try:
        config.load_kube_config()
        if namespace is None and not all_namespaces:
            _, current = config.list_kube_config_contexts()
            namespace = (current or {}).get("context", {}).get("namespace") or "default"
    except config.ConfigException:
        config.load_incluster_config()
        if namespace is None and not all_namespaces:
            namespace = (
                Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
            )
    api = client.CustomObjectsApi()
    if all_namespaces:
        runs = api.list_cluster_custom_object(GROUP, VERSION, "evaluationruns")["items"]
        workloads = api.list_cluster_custom_object(GROUP, VERSION, "workloads")["items"]
    else:
        assert namespace is not None
        runs = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "evaluationruns")[
            "items"
        ]
        workloads = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")[
            "items"
        ]
    engine_args_sets = {
        (w["metadata"]["namespace"], w["metadata"]["name"]): str(
            ((w.get("spec") or {}).get("engineArgsSetRef") or {}).get("name", "")
        )
        for w in workloads
    }
    entries = (entry_from_run(run, engine_args_sets) for run in runs)
    return [entry for entry in entries if entry is not None]


# -- output -------------------------------------------------------------------------------------


def age(completed_at: str | None, now: datetime) -> str:
    """Age in the style of kubectl: 45s, 12m, 5h, 3d."""
    if not completed_at:
        return "-"
    try:
        then = datetime.fromisoformat(completed_at.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cells(board: Board, now: datetime) -> list[list[str]]:
    rows = []
    for position, entry in enumerate(board.entries, start=1):
        values = {
            **{key: str(value) for key, value in asdict(entry).items()},
            "rank": str(position),
            "avg_score": f"{entry.avg_score:.4f}",
            "avg_latency_ms": "-"
            if entry.avg_latency_ms is None
            else f"{entry.avg_latency_ms:.1f}",
            "errors": str(entry.error_count)
            + ("" if entry.questions is None else f"/{entry.questions}"),
            "age": age(entry.completed_at, now),
        }
        rows.append([values[key] or "-" for _, key in COLUMNS])
    return rows


def render_json(boards: Sequence[Board]) -> str:
    """``{"boards": [{comparison_key, dataset, entries: [{rank, ...}]}]}``."""
    return json.dumps(
        {
            "boards": [
                {
                    "comparison_key": board.comparison_key,
                    "dataset": board.dataset,
                    "entries": [
                        {"rank": position, **asdict(entry)}
                        for position, entry in enumerate(board.entries, start=1)
                    ],
                }
                for board in boards
            ]
        },
        indent=2,
    )


def render_table(boards: Sequence[Board], now: datetime) -> str:
    """kubectl-like columns, one block per comparison key."""
    blocks = []
    headers = [header for header, _ in COLUMNS]
    for board in boards:
        rows = _cells(board, now)
        widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
        lines = [f"COMPARISON KEY {board.comparison_key} (dataset {board.dataset or '-'})"]
        for row in [headers, *rows]:
            lines.append(
                "   ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_markdown(boards: Sequence[Board], now: datetime) -> str:
    """One GitHub-flavoured table per comparison key."""
    blocks = []
    headers = [header.replace("-", " ").title() for header, _ in COLUMNS]
    for board in boards:
        lines = [
            f"### Comparison key `{board.comparison_key}` (dataset {board.dataset or '-'})",
            "",
            "| " + " | ".join(headers) + " |",
            "|"
            + "|".join("---:" if h in ("Rank", "Score", "Latency Ms") else "---" for h in headers)
            + "|",
        ]
        for row in _cells(board, now):
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# -- command line -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``leaderboard`` sub-command."""
    parser = subparsers.add_parser(
        "leaderboard",
        help="rank succeeded runs by score, then latency, per comparison key",
        description="Rank the succeeded EvaluationRuns of the cluster (kubeconfig as kubectl "
        "reads it) or the summary.json files of --from: by avg score descending, then mean "
        "latency ascending, one ranking per comparison key (results with different keys are "
        "never ranked against each other).",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        metavar="NS",
        help="the runs of this namespace (default: the kubeconfig context's)",
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="the runs of every namespace"
    )
    scope.add_argument(
        "--from",
        dest="sources",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="summary.json files, or directories searched for them, instead of the cluster",
    )
    parser.add_argument("--dataset", metavar="D", help="only runs on this dataset")
    parser.add_argument(
        "--key", metavar="K", help="only this comparison key (or a unique prefix of it)"
    )
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="table", help="output format (default: table)"
    )
    parser.set_defaults(handler=_handle)


def _select(entries: list[Entry], dataset: str | None, key: str | None) -> list[Entry]:
    if dataset is not None:
        entries = [entry for entry in entries if entry.dataset == dataset]
    if key is not None:
        keys = {entry.comparison_key for entry in entries if entry.comparison_key.startswith(key)}
        if len(keys) > 1 and key not in keys:
            raise SummaryError(f"--key {key!r} matches several comparison keys: {sorted(keys)}")
        wanted = key if key in keys else next(iter(keys), None)
        entries = [entry for entry in entries if entry.comparison_key == wanted]
    return entries


def _handle(args: argparse.Namespace) -> int:
    try:
        if args.sources is not None:
            entries = [entry_from_summary(path) for path in summaries(args.sources)]
        else:
            entries = _from_cluster(args)
        entries = _select(entries, args.dataset, args.key)
    except SummaryError as exc:
        print(f"kyai leaderboard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _Unreachable as exc:
        print(f"kyai leaderboard: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    boards = rank(entries)
    now = datetime.now(UTC)
    if args.output == "json":
        print(render_json(boards))
    elif not boards:
        print("no succeeded runs", file=sys.stderr)
    elif args.output == "markdown":
        print(render_markdown(boards, now))
    else:
        print(render_table(boards, now))
    return EXIT_OK


class _Unreachable(Exception):
    """The cluster could not be asked."""


def _from_cluster(args: argparse.Namespace) -> list[Entry]:
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        return cluster_entries(args.namespace, all_namespaces=args.all_namespaces)
    except ConfigException as exc:
        raise SummaryError(f"no kubeconfig and not in a pod: {exc}") from exc
    except ApiException as exc:
        raise _Unreachable(f"the API server refused: HTTP {exc.status} {exc.reason}") from exc
    except HTTPError as exc:
        raise _Unreachable(f"the API server cannot be reached: {exc}") from exc
