"""What ``kyai view`` / ``kyai report`` show, read from run directories or from a cluster.

A run is read as the other commands read it: its leaderboard :class:`~kyai.ranking.Entry`
(:func:`kyai.leaderboard.entry_from_summary` for a directory,
:func:`kyai.ranking.entry_from_run` for an EvaluationRun), its per-question results as
``kyai compare`` loads them (:func:`kyai.results.load`), and the files that hold its
questions, answers and judgements.

What cannot be read is said, never left out silently: a :class:`Notice` names the run and
why (a directory that does not exist, a run not judged yet, a run without per-question
scores, files not beside its summary, a cluster run whose files are not reachable, a run
that did not succeed). Input that is not what it claims to be is a :class:`ViewError` naming
the path (exit 2): a directory that is not a run, a summary.json that cannot be read, runs of
one comparison key that answered different rows.

From a cluster, the runs' status is read as ``kyai leaderboard -n`` reads it
(:func:`kyai.leaderboard.cluster_runs`) and a sweep as ``kyai leaderboard --sweep`` does
(:func:`kyai.sweep_board.read_board`). A run's files live on its results claim (a PVC), which
a workstation does not see: with ``--results-root DIR`` (a copy of the claims, or where they
are mounted: ``kubectl cp`` of ``/results``, or a devcluster's ``WORKDIR/volumes``) the
first of ``DIR/<namespace>/<claim>/<run path>``, ``DIR/<claim>/<run path>`` and
``DIR/<run path>`` that holds ``summary.json`` is read; without it, or when none does, the
page shows the run from its status and says that its questions cannot be shown.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kyai._exitcodes import EXIT_UNREACHABLE, EXIT_USAGE

if TYPE_CHECKING:
    from kyai.api.serving import ServingStatus
    from kyai.ranking import Entry
    from kyai.results import RunResults
    from kyai.sweep_board import SweepBoard

__all__ = [
    "Notice",
    "RunFiles",
    "Sources",
    "ViewError",
    "ViewRun",
    "cluster_sources",
    "directory_sources",
    "flat_serving",
    "run_files",
]

#: Where a run's directory lives inside its results claim (the workers' mount).
RESULTS_MOUNT = "/results"

GENERATIONS_FILE = "generations.jsonl"
DATASET_FILE = "dataset.jsonl"

#: The serving distributions of a summary's ``serving`` block, flattened as the status has them.
_DISTRIBUTIONS = ("ttft", "tpot", "itl", "e2e")
_STATISTICS = ("mean", "p50", "p90", "p99")
_SERVING_SCALARS = (
    "streamed",
    "requests",
    "failed",
    "concurrency",
    "wall_seconds",
    "output_tokens",
    "output_tokens_per_second",
    "requests_per_second",
)


class ViewError(Exception):
    """Input that cannot be shown; the message names it, ``code`` is the exit status."""

    def __init__(self, message: str, *, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Notice:
    """Something the page cannot show, and why: ``run`` names the run (None: the whole page)."""

    run: str | None
    message: str

    def as_dict(self) -> dict[str, str | None]:
        """``{run, message}`` as the page's data holds it."""
        return {"run": self.run, "message": self.message}


@dataclass(frozen=True)
class RunFiles:
    """A run's files: its summary, and those of its questions that exist (None: missing)."""

    summary: Path
    dataset: Path | None
    generations: Path | None
    judgements: Path | None


@dataclass
class ViewRun:
    """One run as the page shows it."""

    #: Its name on the page (unique among the page's runs).
    label: str
    #: Where it comes from: its directory, or ``EvaluationRun NS/NAME``.
    source: str
    #: The leaderboard's entry (score, ranks' inputs, serving figures).
    entry: Entry
    #: Its per-question results as ``kyai compare`` loads them; None without scores.
    results: RunResults | None
    #: Errors by kind.
    errors: dict[str, int] = field(default_factory=dict)
    #: The serving figures, flat (``ttft_p50_ms``, ``output_tokens_per_second`` ...).
    serving: dict[str, Any] = field(default_factory=dict)
    #: Its files, where reachable; None when they are not (a notice says why).
    files: RunFiles | None = None
    #: The directory shown for it (a run directory's path, a cluster run's reached path).
    directory: str | None = None


@dataclass
class Sources:
    """Everything a page shows: its runs, what could not be read, and a sweep's table."""

    title: str
    runs: list[ViewRun] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    sweep: SweepBoard | None = None


# -- files of a run -----------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def run_files(
    summary_path: Path, summary: Mapping[str, Any], label: str
) -> tuple[RunFiles, list[Notice]]:
    """The files beside ``summary_path`` that hold the run's questions, and notices for the rest.

    The answers (``generations.jsonl``) and the rows (``dataset.jsonl``) are beside the
    summary, or in the generation directory that ``judge.json`` names (``kyai judge`` into
    another directory); the judgements are those whose scores the summary holds
    (:func:`kyai.results.judgements_path`).
    """
    from kyai.results import judgements_path

    folder = summary_path.parent
    generations_dir = folder
    if not (folder / GENERATIONS_FILE).is_file():
        judge = _read_json(folder / "judge.json")
        named = (judge or {}).get("generations_dir")
        if isinstance(named, str) and (Path(named) / GENERATIONS_FILE).is_file():
            generations_dir = Path(named)
    found = {
        "dataset": generations_dir / DATASET_FILE,
        "generations": generations_dir / GENERATIONS_FILE,
    }
    present = {name: path if path.is_file() else None for name, path in found.items()}
    judgements = judgements_path(summary_path, summary)
    notices = []
    what = {
        "generations": "its answers",
        "dataset": "its questions and ground truths",
        "judgements": "its judgements",
    }
    for name, path in [*present.items(), ("judgements", judgements)]:
        if path is None:
            wanted = "judgements.jsonl" if name == "judgements" else found[name].name
            notices.append(
                Notice(label, f"no {wanted} beside {summary_path}: {what[name]} cannot be shown")
            )
    return RunFiles(summary_path, present["dataset"], present["generations"], judgements), notices


def _distributions(block: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for name in _DISTRIBUTIONS:
        numbers = block.get(f"{name}_ms")
        if isinstance(numbers, Mapping):
            for statistic in _STATISTICS:
                value = numbers.get(statistic)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    flat[f"{prefix}{name}_{statistic}_ms"] = float(value)
    return flat


def flat_serving(block: Any) -> dict[str, Any]:
    """A summary's ``serving`` block as flat figures (``ttft_p50_ms`` ...) as in the status.

    The engine's own figures (``server``, when its metrics were read) follow as
    ``server_ttft_p50_ms`` ...
    """
    if not isinstance(block, Mapping):
        return {}
    flat: dict[str, Any] = _distributions(block)
    for name in _SERVING_SCALARS:
        value = block.get(name)
        if isinstance(value, bool | int | float):
            flat[name] = value
    server = block.get("server")
    if isinstance(server, Mapping):
        flat.update(_distributions(server, "server_"))
    return flat


def status_serving(serving: ServingStatus | None) -> dict[str, Any]:
    """``status.serving`` flat, as :func:`flat_serving` has a summary's block.

    The engine's figures (``serving.server``) follow as ``server_ttft_p50_ms`` ...
    """
    if serving is None:
        return {}
    flat = serving.model_dump(exclude_none=True, by_alias=False, exclude={"server"})
    if serving.server is not None:
        server = serving.server.model_dump(exclude_none=True, by_alias=False)
        flat.update({f"server_{name}": value for name, value in server.items()})
    return flat


# -- run directories ----------------------------------------------------------------------------


def directory_sources(paths: Sequence[Path]) -> Sources:
    """The runs of the directories (or summary.json files) named, in the order named."""
    sources = Sources(title=", ".join(str(path) for path in paths))
    seen: set[Path] = set()
    for path in paths:
        summary_path = _summary_of(path, sources.notices)
        if summary_path is None:
            continue
        if summary_path.resolve() in seen:
            sources.notices.append(Notice(str(path), "named more than once: shown once"))
            continue
        seen.add(summary_path.resolve())
        sources.runs.append(_directory_run(path, summary_path, sources.notices))
    _unique_labels(sources.runs)
    if not sources.runs:
        raise ViewError(
            "no run to show: "
            + "; ".join(f"{notice.run}: {notice.message}" for notice in sources.notices)
        )
    return sources


def _summary_of(path: Path, notices: list[Notice]) -> Path | None:
    """The summary.json of ``path``; None (and a notice) for a run not there or not judged.

    Raises :class:`ViewError` for a path that is not a run at all.
    """
    if not path.exists():
        notices.append(Notice(str(path), "no such file or directory: not shown"))
        return None
    if path.is_file():
        if path.name != "summary.json":
            raise ViewError(f"{path}: not a run directory (nor a run's summary.json)")
        return path
    if (path / "summary.json").is_file():
        return path / "summary.json"
    if (path / "run.json").is_file() or (path / "generations.jsonl").is_file():
        notices.append(
            Notice(str(path), "a run not judged yet (no summary.json): no score to show")
        )
        return None
    raise ViewError(
        f"{path}: not a run directory (no summary.json, run.json or generations.jsonl: "
        "give the directories `kyai run` / `kyai judge` wrote)"
    )


def _directory_run(path: Path, summary_path: Path, notices: list[Notice]) -> ViewRun:
    from kyai.leaderboard import entry_from_summary
    from kyai.results import ResultsError, load, read_summary

    try:
        summary = read_summary(summary_path)
        entry = entry_from_summary(summary_path)
        results = load(summary_path) if entry.scores is not None else None
    except ResultsError as exc:
        raise ViewError(str(exc)) from exc
    label = summary_path.parent.name
    if results is None:
        notices.append(_no_scores(label))
    files, missing = run_files(summary_path, summary, label)
    notices += missing
    errors = summary.get("errors")
    return ViewRun(
        label=label,
        source=str(path),
        entry=entry,
        results=results,
        errors=dict(errors) if isinstance(errors, Mapping) else {},
        serving=flat_serving(summary.get("serving")),
        files=files,
        directory=str(summary_path.parent),
    )


def _no_scores(label: str) -> Notice:
    return Notice(
        label,
        "no per-question scores (summary.json 'scores', status.scores or "
        "status.scoresPacked): no rank, no paired comparison and no question scores",
    )


def _unique_labels(runs: list[ViewRun]) -> None:
    """Runs whose names repeat (``a/run``, ``b/run``) are shown by their source instead."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.label] = counts.get(run.label, 0) + 1
    for run in runs:
        if counts[run.label] > 1:  # two paths are never equal: the same one is shown once
            run.label = run.source
        if run.results is not None:
            run.results = dataclasses.replace(run.results, name=run.label)


# -- a cluster ----------------------------------------------------------------------------------


def cluster_sources(namespace: str | None, sweep: str | None, results_root: Path | None) -> Sources:
    """The EvaluationRuns of ``namespace`` (or those of the sweep ``sweep``) and their files."""
    from kyai.leaderboard import ClusterUnreachable, asking_cluster, cluster_runs
    from kyai.results import ResultsError
    from kyai.sweep_board import SweepBoardError, read_board

    board = None
    if sweep is not None:
        try:
            board = read_board(namespace, sweep)
        except SweepBoardError as exc:
            raise ViewError(str(exc), code=exc.code) from exc
        namespace = board.namespace
    try:
        items, engine_args_sets = asking_cluster(
            lambda: cluster_runs(namespace, all_namespaces=False)
        )
    except ClusterUnreachable as exc:
        raise ViewError(str(exc), code=EXIT_UNREACHABLE) from exc
    except ResultsError as exc:
        raise ViewError(str(exc)) from exc
    shown = namespace or next(
        (str(item["metadata"].get("namespace")) for item in items), "(the context's namespace)"
    )
    title = f"EvaluationSweep {shown}/{sweep}" if sweep else f"namespace {shown}"
    sources = Sources(title=title, sweep=board)
    wanted = None if board is None else [row.run for row in board.rows if row.run]
    by_name = {str(item["metadata"]["name"]): item for item in items}
    if wanted is not None:
        for name in wanted:
            if name not in by_name:
                sources.notices.append(
                    Notice(name, "named by the sweep's table, but no such EvaluationRun")
                )
        items = [by_name[name] for name in dict.fromkeys(wanted) if name in by_name]
    for item in items:
        run = _cluster_run(item, engine_args_sets, results_root, sources.notices)
        if run is not None:
            sources.runs.append(run)
    if not items:
        sources.notices.append(Notice(None, f"no EvaluationRun in {title}"))
    return sources


def _cluster_run(
    item: Mapping[str, Any],
    engine_args_sets: Mapping[tuple[str, str], str],
    results_root: Path | None,
    notices: list[Notice],
) -> ViewRun | None:
    from kyai.api import EvaluationRunStatus
    from kyai.ranking import entry_from_run

    meta = item.get("metadata") or {}
    label = str(meta.get("name", ""))
    entry = entry_from_run(item, engine_args_sets)
    if entry is None:
        phase = (item.get("status") or {}).get("phase") or "Pending"
        notices.append(Notice(label, f"phase {phase}: no score to show (not a succeeded run)"))
        return None
    status = EvaluationRunStatus.model_validate(item.get("status") or {})
    run = ViewRun(
        label=label,
        source=entry.source,
        entry=entry,
        results=None,
        errors=dict(status.errors or {}),
        serving=status_serving(status.serving),
    )
    directory = _reachable(status.results_claim, status.results_path, entry.namespace, results_root)
    if directory is None:
        notices.append(Notice(label, _unreachable(status, results_root)))
    else:
        _attach_files(run, directory, notices)
    if run.results is None and entry.scores is not None:
        run.results = _status_results(run)
    if entry.scores is None:
        notices.append(_no_scores(label))
    return run


def _reachable(
    claim: str | None, path: str | None, namespace: str, root: Path | None
) -> Path | None:
    """The first directory under ``root`` that holds the run's summary.json, if any."""
    if root is None or not claim or not path:
        return None
    inside = PurePosixPath(path)
    if inside.is_relative_to(RESULTS_MOUNT):
        inside = inside.relative_to(RESULTS_MOUNT)
    relative = Path(*inside.parts[1:] if inside.is_absolute() else inside.parts)
    candidates = (root / namespace / claim / relative, root / claim / relative, root / relative)
    for candidate in candidates:
        if (candidate / "summary.json").is_file():
            return candidate
    return None


def _unreachable(status: Any, root: Path | None) -> str:
    where = f"on the results claim {status.results_claim or '?'} at {status.results_path or '?'}"
    if root is None:
        return (
            f"its files are {where} in the cluster, not reachable from here (--results-root DIR "
            "reads them from a copy or a mount): shown from its status; its questions cannot "
            "be shown"
        )
    return (
        f"its files ({where}) are not under --results-root {root} (no summary.json there): "
        "shown from its status; its questions cannot be shown"
    )


def _attach_files(run: ViewRun, directory: Path, notices: list[Notice]) -> None:
    """The run's files from ``directory``; its per-question results from them when they agree."""
    from kyai.results import ResultsError, load, read_summary

    summary_path = directory / "summary.json"
    try:
        summary = read_summary(summary_path)
        results = load(summary_path) if run.entry.scores is not None else None
    except ResultsError as exc:
        notices.append(Notice(run.label, f"its files cannot be read: {exc}"))
        return
    if results is not None and results.scores != run.entry.scores:
        notices.append(
            Notice(
                run.label,
                f"{summary_path} holds other scores than the run's status: its files are not "
                "shown (another run's, or an older one's)",
            )
        )
        return
    run.files, missing = run_files(summary_path, summary, run.label)
    notices += missing
    run.directory = str(directory)
    if results is not None:
        run.results = dataclasses.replace(results, name=run.label)


def _status_results(run: ViewRun) -> RunResults:
    """The run's per-question results from its status (no files: no row ids)."""
    from kyai.results import RunResults

    entry = run.entry
    assert entry.scores is not None
    return RunResults(
        path=Path(entry.namespace) / entry.run / "summary.json",
        name=run.label,
        model=entry.model,
        dataset=entry.dataset,
        comparison_key=entry.comparison_key,
        dataset_sha256=entry.dataset_sha256,
        avg_score=sum(entry.scores) / len(entry.scores) if entry.scores else 0.0,
        scores=entry.scores,
    )
