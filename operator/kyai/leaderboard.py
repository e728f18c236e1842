"""``kyai leaderboard``: succeeded runs ranked per comparison key, with ranks that mean something.

Results are never ranked across comparison keys: two results are comparable only when dataset
version, prompts, judge and scoring settings are equal, which is what the key hashes. Within a
key, the rank is tie-aware (:func:`kyai.stats.ranks`): every pair of runs is compared on its
per-question scores (exact McNemar for 0/1 scores, else the paired t-test), Holm–Bonferroni
over all pairs at α = 0.05, and ``rank = 1 +`` the number of runs significantly better; runs
that no test separates share a rank (1, 1, 3 …) and are listed by average score (descending),
then mean latency (ascending), as KYAI orders them. Each entry shows the 95 % interval of its
score (Wilson for 0/1 scores, else t).

A rank needs the run's per-question scores: ``summary.json``'s ``scores`` (``--from``) or the
EvaluationRun's ``status.scores`` (up to 1,000 questions) or ``status.scoresPacked`` (above;
:mod:`kyai.api.scores`, the one reader). A run without them gets no rank (``n/a`` in the table,
``"rank": null`` and ``rank_unavailable`` saying why in JSON), takes no part in the others'
comparisons, shows the interval its summary or status holds if any, and is listed after the
ranked runs. The same scores give the same ranks from the cluster and from the files. Runs of
one key whose rows differ (counts, dataset sha256, or row ids in their ``judgements.jsonl``)
are refused with exit status 2, never ranked.

The runs come from the cluster (EvaluationRuns of the kubeconfig's cluster) or from
``summary.json`` files (``--from``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kyai._clock import parse_time
from kyai._exitcodes import EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE
from kyai.ranking import (
    RANKING_METHOD,
    Board,
    Entry,
    Place,
    SummaryError,
    entry_from_run,
    rank,
)
from kyai.results import ResultsError

if TYPE_CHECKING:
    from kyai.stats import Interval

FORMATS = ("table", "json", "markdown")

_T = TypeVar("_T")

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
    ("95%-INTERVAL", "interval"),
    ("LATENCY-MS", "avg_latency_ms"),
    ("TTFT-P50-MS", "ttft_p50_ms"),
    ("TOK/S", "output_tokens_per_second"),
    ("PARETO", "pareto"),
    ("ERRORS", "errors"),
    ("AGE", "age"),
)


#: Entry fields kept out of the outputs.
_INTERNAL = frozenset(
    {"scores", "row_ids", "stored_interval", "source", "dataset_sha256", "scores_unavailable"}
)

# -- sources ------------------------------------------------------------------------------------


def entry_from_summary(path: Path) -> Entry:
    """A ``summary.json`` (``kyai run``/``kyai judge``) as an entry named after its folder.

    Its ``scores`` and the row ids of the ``judgements.jsonl`` beside it (when there is one)
    are what the entry's rank is computed from.
    """
    from kyai.results import judgements_path, read_row_ids, read_summary, scores_of

    summary = read_summary(path)

    def value_of(name: str, kinds: type | tuple[type, ...], *, required: bool = True) -> Any:
        value = summary.get(name)
        if value is None and not required:
            return None
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise SummaryError(f"{path}: field {name!r} is missing or not a {kinds}")
        return value

    key = value_of("comparison_key", str)
    avg_score = float(value_of("avg_score", (int, float)))
    scores = scores_of(summary, path)
    rows = judgements_path(path, summary) if scores is not None else None
    serving = _summary_serving(summary, path)
    return Entry(
        namespace="",
        run=path.parent.name,
        workload="",
        model=str(summary.get("candidate_model") or ""),
        framework="",
        engine_args_set="",
        dataset=str(summary.get("dataset") or ""),
        comparison_key=key,
        avg_score=avg_score,
        avg_latency_ms=value_of("avg_latency_ms", (int, float), required=False),
        error_count=int(value_of("error_count", int, required=False) or 0),
        questions=value_of("count", int, required=False),
        completed_at=summary.get("finished_at"),
        ttft_p50_ms=serving[0],
        output_tokens_per_second=serving[1],
        scores=scores,
        row_ids=None if rows is None or scores is None else read_row_ids(rows, len(scores)),
        stored_interval=_summary_interval(summary, path),
        source=str(path),
        dataset_sha256=sha if isinstance(sha := summary.get("dataset_sha256"), str) else None,
    )


def _summary_serving(summary: Mapping[str, Any], path: Path) -> tuple[float | None, float | None]:
    """TTFT p50 and output tokens/s of a summary's ``serving`` block (None when absent)."""
    serving = summary.get("serving")
    if serving is None:
        return None, None
    if not isinstance(serving, Mapping):
        raise SummaryError(f"{path}: field 'serving' is not a JSON object")
    ttft = serving.get("ttft_ms")
    values = {
        "ttft_p50_ms": ttft.get("p50") if isinstance(ttft, Mapping) else None,
        "output_tokens_per_second": serving.get("output_tokens_per_second"),
    }
    for name, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise SummaryError(f"{path}: serving's {name} is not a number")
    ttft_p50, rate = (None if value is None else float(value) for value in values.values())
    return ttft_p50, rate


def _summary_interval(summary: Mapping[str, Any], path: Path) -> Interval | None:
    """The ``avg_score_interval`` a summary.json holds (None in summaries written before it)."""
    from kyai.stats import Interval, StatsError

    stored = summary.get("avg_score_interval")
    if stored is None:
        return None
    if not isinstance(stored, Mapping):
        raise SummaryError(f"{path}: field 'avg_score_interval' is not a JSON object")
    try:
        return Interval.from_mapping(stored, where=f"{path}: avg_score_interval")
    except StatsError as exc:
        raise SummaryError(str(exc)) from exc


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


def cluster_runs(
    namespace: str | None, *, all_namespaces: bool
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], str]]:
    """The EvaluationRuns of the kubeconfig's cluster (or the pod's), as the API returns them.

    With them, the EngineArgsSet each Workload names, by (namespace, Workload).
    """
    from kubernetes import client, config

    from kyai._kubeconfig import list_kube_config_contexts, load_kube_config
    from kyai.constants import GROUP, VERSION

    try:
        load_kube_config()
        if namespace is None and not all_namespaces:
            _, current = list_kube_config_contexts()
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
    return list(runs), engine_args_sets


def cluster_entries(namespace: str | None, *, all_namespaces: bool) -> list[Entry]:
    """The succeeded EvaluationRuns of the kubeconfig's cluster (or the pod's)."""
    runs, engine_args_sets = cluster_runs(namespace, all_namespaces=all_namespaces)
    entries = (entry_from_run(run, engine_args_sets) for run in runs)
    return [entry for entry in entries if entry is not None]


class ClusterUnreachable(Exception):
    """The cluster could not be asked."""


def asking_cluster(read: Callable[[], _T]) -> _T:
    """``read()``, its errors said as the commands say them.

    No kubeconfig (and not in a pod): :class:`SummaryError` (bad input, exit 2); the API
    server refused or cannot be reached: :class:`ClusterUnreachable` (exit 3).
    """
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        return read()
    except ConfigException as exc:
        raise SummaryError(f"no kubeconfig and not in a pod: {exc}") from exc
    except ApiException as exc:
        raise ClusterUnreachable(f"the API server refused: HTTP {exc.status} {exc.reason}") from exc
    except HTTPError as exc:
        raise ClusterUnreachable(f"the API server cannot be reached: {exc}") from exc


# -- output -------------------------------------------------------------------------------------


def age(completed_at: str | None, now: datetime) -> str:
    """Age in the style of kubectl: 45s, 12m, 5h, 3d."""
    then = parse_time(completed_at)
    if then is None:
        return "-"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def public_fields(entry: Entry) -> dict[str, Any]:
    """The entry's fields as the outputs show them (not its scores and row ids)."""
    return {f.name: getattr(entry, f.name) for f in fields(entry) if f.name not in _INTERNAL}


def _interval_cell(interval: Interval | None) -> str:
    if interval is None:
        return "-"
    return f"{interval.low:.4f}-{interval.high:.4f} {interval.method}"


def board_cells(board: Board, now: datetime) -> list[list[str]]:
    """The board's rows as the table shows them, one cell per column of :data:`COLUMNS`."""
    rows = []
    for place in board.places:
        entry = place.entry
        values = {
            **{key: str(value) for key, value in public_fields(entry).items()},
            "rank": "n/a" if place.rank is None else str(place.rank),
            "interval": _interval_cell(place.interval),
            "avg_score": f"{entry.avg_score:.4f}",
            "avg_latency_ms": "-"
            if entry.avg_latency_ms is None
            else f"{entry.avg_latency_ms:.1f}",
            "ttft_p50_ms": "-" if entry.ttft_p50_ms is None else f"{entry.ttft_p50_ms:.1f}",
            "output_tokens_per_second": "-"
            if entry.output_tokens_per_second is None
            else f"{entry.output_tokens_per_second:.1f}",
            "pareto": {True: "*", False: "", None: "-"}[place.pareto],
            "errors": str(entry.error_count)
            + ("" if entry.questions is None else f"/{entry.questions}"),
            "age": age(entry.completed_at, now),
        }
        rows.append([values[key] or "-" for _, key in COLUMNS])
    return rows


def _place_json(place: Place) -> dict[str, Any]:
    return {
        "rank": place.rank,
        "rank_unavailable": place.rank_unavailable,
        **public_fields(place.entry),
        "pareto": place.pareto,
        "avg_score_interval": None if place.interval is None else place.interval.as_dict(),
    }


def render_json(boards: Sequence[Board]) -> str:
    """``{"boards": [{comparison_key, dataset, ranking, entries: [{rank, ...}]}]}``."""
    return json.dumps(
        {
            "boards": [
                {
                    "comparison_key": board.comparison_key,
                    "dataset": board.dataset,
                    "ranking": {"method": RANKING_METHOD, "alpha": board.alpha},
                    "entries": [_place_json(place) for place in board.places],
                }
                for board in boards
            ]
        },
        indent=2,
    )


def footer(board: Board) -> list[str]:
    """What RANK and the interval mean, under each table."""
    lines = [
        f"RANK: {RANKING_METHOD} (alpha {board.alpha:g}); equal ranks: no test separates them.",
        "95%-INTERVAL: the score's 95 % interval (Wilson for 0/1 scores, else t).",
        "PARETO: * on the score / TTFT-P50 front of this key (no other run has a higher-or-equal "
        "score and a lower-or-equal TTFT p50, one of them strict); - TTFT unknown.",
    ]
    reasons = {p.rank_unavailable for p in board.places if p.rank is None and p.rank_unavailable}
    lines += [f"n/a: {reason}." for reason in sorted(filter(None, reasons))]
    return lines


def render_table(boards: Sequence[Board], now: datetime) -> str:
    """kubectl-like columns, one block per comparison key."""
    blocks = []
    headers = [header for header, _ in COLUMNS]
    for board in boards:
        rows = board_cells(board, now)
        widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
        lines = [f"COMPARISON KEY {board.comparison_key} (dataset {board.dataset or '-'})"]
        for row in [headers, *rows]:
            lines.append(
                "   ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
        lines += footer(board)
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
        for row in board_cells(board, now):
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        for line in footer(board):
            lines += ["", line]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# -- command line -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``leaderboard`` sub-command."""
    parser = subparsers.add_parser(
        "leaderboard",
        help="rank succeeded runs per comparison key (ties where no test separates them)",
        description="Rank the succeeded EvaluationRuns of the cluster (kubeconfig as kubectl "
        "reads it) or the summary.json files of --from, one ranking per comparison key "
        "(results with different keys are never ranked against each other). A run's rank is "
        "1 + the number of runs significantly better on the same questions (paired tests, "
        "Holm-Bonferroni over all pairs at alpha 0.05): runs no test separates share a rank "
        "and are listed by avg score descending, then mean latency ascending. Each score "
        "shows its 95 % interval (Wilson for 0/1 scores, else t). A run without per-question "
        "scores gets no rank (n/a) and is listed last.",
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
    parser.add_argument(
        "--sweep",
        metavar="NAME",
        help="print this EvaluationSweep's ranked table instead (with -n; not with -A or --from)",
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
    if args.sweep is not None:
        return _sweep(args)
    try:
        if args.sources is not None:
            entries = [entry_from_summary(path) for path in summaries(args.sources)]
        else:
            entries = _from_cluster(args)
        entries = _select(entries, args.dataset, args.key)
        boards = rank(entries)
    except ResultsError as exc:
        print(f"kyai leaderboard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClusterUnreachable as exc:
        print(f"kyai leaderboard: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
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


def _sweep(args: argparse.Namespace) -> int:
    """``--sweep NAME``: the sweep's own table (:mod:`kyai.sweep_board`)."""
    clash = [
        flag
        for flag, given in (
            ("-A/--all-namespaces", args.all_namespaces),
            ("--from", args.sources is not None),
            ("--dataset", args.dataset is not None),
            ("--key", args.key is not None),
        )
        if given
    ]
    if clash:
        print(f"kyai leaderboard: --sweep does not go with {', '.join(clash)}", file=sys.stderr)
        return EXIT_USAGE
    from kyai.sweep_board import show

    return show(args.namespace, args.sweep, args.output)


def _from_cluster(args: argparse.Namespace) -> list[Entry]:
    return asking_cluster(
        lambda: cluster_entries(args.namespace, all_namespaces=args.all_namespaces)
    )
