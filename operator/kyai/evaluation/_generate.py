"""Phase 1, generation: every row to the candidate, every answer stored verbatim.

Rows are dispatched in row order to a fixed pool of workers (``concurrency`` requests in
flight at most). Each answer, or the error that ended its row, is appended to
``generations.jsonl`` the moment it finishes, so running again on the same directory asks only
for the rows not stored yet. When every row is done the log is rewritten in row order.

``run.json`` keeps the provenance of every invocation on the directory in ``history`` (the
top-level ``candidate`` and ``generation`` fields describe the latest one).

Requests stream by default and every record carries its timings
(:mod:`kyai.evaluation._serving`). An invocation that sent requests measures its phase and
stores the figures as ``serving`` in its ``history`` entry and in ``generation`` (where
``kyai judge`` finds them for ``summary.json``); one that had nothing left to ask leaves the
last measured figures in place.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai import __version__
from kyai.datasets import Dataset, Row, dataset_to_dict, write_rows_jsonl
from kyai.evaluation import _store as store
from kyai.evaluation._budget import ContextWindow, find_card, output_budget, resolve_window
from kyai.evaluation._client import ChatClient, ChatError, EndpointConfigError, RetryPolicy
from kyai.evaluation._earlystop import EarlyStop
from kyai.evaluation._pool import run_pool
from kyai.evaluation._progress import Progress, ProgressListener
from kyai.evaluation._servermetrics import Snapshot, scrape, server_block
from kyai.evaluation._serving import NO_TIMING, ServingRecorder, timing_fields

if TYPE_CHECKING:
    import httpx

#: Prefix of candidate-side error kinds in records and summaries.
CANDIDATE = "candidate"


@dataclass(frozen=True)
class CandidateConfig:
    """Where and how to ask the candidate."""

    endpoint: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    concurrency: int = 16
    timeout_s: float = 600.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    model_config_path: Path | None = None
    context_window: int | None = None
    retry_errors: bool = False
    #: Stream the answers (server-sent events) and time them (TTFT, TPOT, ITL).
    stream: bool = True
    #: The engine's Prometheus ``/metrics`` URL, scraped before and after the phase.
    server_metrics: str | None = None
    #: GPUs serving the candidate: ``serving.gpu_seconds`` = GPUs x phase wall time.
    gpus: int | None = None
    #: Sampling parameters sent with every request (``temperature``, ``top_p``, ``seed``);
    #: none: the server's and the model's generation defaults decide. They enter the
    #: comparison key.
    sampling: Mapping[str, float | int] | None = None
    #: Ask only the first ``limit`` questions (a smoke test): the result is a subset, with a
    #: comparison key of its own, never ranked with runs of every question.
    limit: int | None = None

    def asked_rows(self, dataset: Dataset) -> tuple[Row, ...]:
        """The rows this configuration asks: every row, or the first ``limit``."""
        rows = tuple(dataset.rows)
        return rows[: self.limit] if self.limit is not None else rows


def pending_rows(
    rows: Sequence[Row], stored: Mapping[int, Mapping[str, Any]], *, retry_errors: bool
) -> list[Row]:
    """The rows of ``rows`` a generation asks (again): not stored, or stored unsoundly.

    Stored without an answer or an error (a cut stream taken for an empty answer by an
    earlier kyai) is asked again; a stored error too with ``retry_errors``.
    """
    return [
        row
        for row in rows
        if row.index not in stored
        or (retry_errors and stored[row.index].get("error"))
        or store.answer_problem(stored[row.index]) is not None
    ]


def subset_of(dataset: Dataset, limit: int | None) -> dict[str, int] | None:
    """``run.json``'s ``generation.subset`` for ``--limit``; None when every row is asked."""
    total = len(dataset.rows)
    if limit is None or limit >= total:
        return None
    return {"limit": limit, "of": total}


@dataclass(frozen=True)
class GenerationOutcome:
    """What one ``generate`` call did."""

    rows: int
    sent: int
    errors: int
    window: ContextWindow
    wall_seconds: float
    #: The serving figures of the phase (``run.json``'s ``generation.serving``), if any.
    serving: Mapping[str, Any] | None = None


_last_second: tuple[int, str] = (-1, "")
_last_stamp: tuple[int, str] = (-1, "")


def now_iso() -> str:
    """The current UTC time to the millisecond, ISO 8601 with a ``Z``.

    Two stamps per row: the date and time of day are formatted once per second, the whole
    text once per millisecond (rows that finish in the same millisecond share it).
    """
    global _last_second, _last_stamp
    millis = time.time_ns() // 1_000_000
    if millis != _last_stamp[0]:
        seconds, rest = divmod(millis, 1000)
        if seconds != _last_second[0]:
            _last_second = (seconds, f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%dT%H:%M:%S}")
        _last_stamp = (millis, f"{_last_second[1]}.{rest:03d}Z")
    return _last_stamp[1]


def messages_for(dataset: Dataset, row: Row) -> list[dict[str, str]]:
    """The candidate's chat: the generation system prompt, then the instruction."""
    return [
        {"role": "system", "content": dataset.prompts.generation},
        {"role": "user", "content": row.instruction},
    ]


def _check_same_run(
    existing: Mapping[str, Any], dataset: Dataset, config: CandidateConfig, out: Path
) -> None:
    """Refuse to mix two different runs' answers in one directory.

    A different ``--limit`` is the same run asked more (or fewer) of its questions; different
    sampling parameters are another run.
    """
    model = config.model
    old_dataset = existing.get("dataset", {})
    old_candidate = existing.get("candidate", {})
    differences = []
    old_sampling = dict((existing.get("generation") or {}).get("sampling") or {})
    if old_sampling != dict(config.sampling or {}):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(old_sampling.items())) or "none"
        differences.append(f"sampling parameters ({shown} before)")
    if old_dataset.get("sha256") != dataset.sha256:
        differences.append("dataset content (sha256)")
    old_prompts = old_dataset.get("prompts", {})
    if old_prompts.get("generation") != dataset.prompts.generation:
        differences.append("generation prompt")
    if old_candidate.get("model") != model:
        differences.append(f"candidate model ({old_candidate.get('model')!r} before)")
    if differences:
        raise store.RunDirectoryError(
            f"{out} already holds generations of another run (different "
            f"{', '.join(differences)}); use a new --output directory."
        )


def check_served(cards: list[dict[str, Any]], model: str, endpoint: str, side: str) -> None:
    """Raise :class:`EndpointConfigError` when ``/v1/models`` lists models but not ``model``."""
    if cards and find_card(cards, model) is None:
        served = ", ".join(repr(str(card.get("id"))) for card in cards[:20])
        raise EndpointConfigError(
            f"the {side} model {model!r} is not served by {endpoint} (its /v1/models lists "
            f"{served}); pass one of those names."
        )


def _history(previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The invocations recorded in a previous ``run.json`` (older files: their last one)."""
    if previous is None:
        return []
    history = previous.get("history")
    if isinstance(history, list):
        return [entry for entry in history if isinstance(entry, dict)]
    candidate = previous.get("candidate", {})
    generation = previous.get("generation", {})
    return [
        {
            "kyai_version": previous.get("kyai_version"),
            "endpoint": candidate.get("endpoint"),
            "context_window": candidate.get("context_window"),
            "context_window_source": candidate.get("context_window_source"),
            "started_at": generation.get("started_at"),
            "finished_at": generation.get("finished_at"),
            "concurrency": generation.get("concurrency"),
            "rows_sent": generation.get("rows_sent"),
        }
    ]


def _manifest(
    dataset: Dataset,
    config: CandidateConfig,
    endpoint: str,
    window: ContextWindow,
    cards: list[dict[str, Any]],
    previous: Mapping[str, Any] | None,
    started_at: str,
) -> dict[str, Any]:
    """``run.json`` for this invocation; its ``history`` ends with this invocation's entry."""
    earlier = (previous or {}).get("generation", {})
    generation: dict[str, Any] = {
        "started_at": earlier.get("started_at", started_at),
        "finished_at": None,
        "concurrency": config.concurrency,
    }
    if "serving" in earlier:  # the last measured phase's, until this one measures its own
        generation["serving"] = earlier["serving"]
    if config.sampling:
        generation["sampling"] = dict(config.sampling)
    subset = subset_of(dataset, config.limit)
    if subset is not None:
        generation["subset"] = subset
    invocation: dict[str, Any] = {
        "kyai_version": __version__,
        "endpoint": endpoint,
        "context_window": window.tokens,
        "context_window_source": window.source,
        "started_at": started_at,
        "finished_at": None,
        "concurrency": config.concurrency,
        "retry_errors": config.retry_errors,
        "stream": config.stream,
        "limit": config.limit,
    }
    return {
        "format": 1,
        "kyai_version": __version__,
        "dataset": dataset_to_dict(dataset),
        "candidate": {
            "endpoint": endpoint,
            "model": config.model,
            "context_window": window.tokens,
            "context_window_source": window.source,
            "served_models": [card.get("id") for card in cards],
        },
        "generation": generation,
        "history": [*_history(previous), invocation],
    }


@dataclass
class _Tally:
    """What one invocation's requests came to: rows sent and failed, and their timings."""

    sent: int = 0
    errors: int = 0
    serving: ServingRecorder = field(default_factory=ServingRecorder)


@dataclass
class _Invocation:
    """One ``generate`` call on a run directory: its manifest, its log and what it stored."""

    dataset: Dataset
    config: CandidateConfig
    run_path: Path
    manifest: dict[str, Any]
    log: store.JsonlLog
    stored: dict[int, dict[str, Any]]
    tally: _Tally = field(default_factory=_Tally)

    @property
    def entry(self) -> dict[str, Any]:
        """The entry of this invocation in the manifest's ``history``."""
        entry: dict[str, Any] = self.manifest["history"][-1]
        return entry


async def _scrape(config: CandidateConfig) -> Snapshot | None:
    return await scrape(config.server_metrics, config.model) if config.server_metrics else None


async def generate(
    dataset: Dataset,
    output: Path,
    config: CandidateConfig,
    *,
    listener: ProgressListener | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    echo: bool = True,
) -> GenerationOutcome:
    """Run the generation phase into ``output`` (resuming what is already there).

    ``echo``: print the progress and retry lines (``--quiet`` does not); ``listener`` hears
    them either way.
    """
    output.mkdir(parents=True, exist_ok=True)
    run_path = output / store.RUN
    previous = store.read_json(run_path) if run_path.exists() else None
    if previous is not None:
        _check_same_run(previous, dataset, config, output)
    started_at = now_iso()
    started = time.monotonic()
    log = store.JsonlLog(output / store.GENERATIONS)
    stored = store.latest_by_row(log.read())
    asked = config.asked_rows(dataset)
    pending = pending_rows(asked, stored, retry_errors=config.retry_errors)
    rows = len(asked)
    progress = Progress(
        "generate",
        total=rows,
        done=rows - len(pending),
        listener=listener,
        echo=echo,
        side=CANDIDATE,
    )
    async with ChatClient(
        config.endpoint,
        api_key=config.api_key,
        timeout_s=config.timeout_s,
        retry=config.retry,
        max_connections=config.concurrency,
        transport=transport,
    ) as client:
        client.on_retry = progress.retrying
        cards = await client.list_models()
        check_served(cards, config.model, client.base_url, "candidate")
        window = resolve_window(
            cards,
            config.model,
            config_path=config.model_config_path,
            hint=config.context_window,
        )
        manifest = _manifest(dataset, config, client.base_url, window, cards, previous, started_at)
        run = _Invocation(dataset, config, run_path, manifest, log, stored)
        run.entry["rows_planned"] = len(pending)
        if not (output / store.DATASET).exists():
            write_rows_jsonl(output / store.DATASET, dataset.rows)
        store.write_json(run_path, manifest)
        await _ask(run, client, window, pending, progress)
    log.rewrite(stored)
    wall = time.monotonic() - started
    generation = manifest["generation"]
    generation.update(finished_at=now_iso(), wall_seconds=round(wall, 3), rows_sent=len(pending))
    run.entry.update(
        finished_at=generation["finished_at"],
        wall_seconds=round(wall, 3),
        rows_sent=len(pending),
        errors=run.tally.errors,
        completed=True,
    )
    store.write_json(run_path, manifest)
    return GenerationOutcome(
        len(asked), len(pending), run.tally.errors, window, wall, generation.get("serving")
    )


async def _ask(
    run: _Invocation,
    client: ChatClient,
    window: ContextWindow,
    pending: list[Row],
    progress: Progress,
) -> None:
    """Ask the candidate every pending row, storing each answer; then the serving figures."""
    config, tally = run.config, run.tally
    early = EarlyStop("candidate", client.base_url, config.model, len(pending))

    async def answer(row: Row) -> None:
        record, failure = await _answer(client, run.dataset, row, config, window, tally.serving)
        store.check_generation(record)
        run.log.append(record)
        run.stored[row.index] = record
        tally.sent += 1
        tally.errors += record["error"] is not None
        progress.advance(error=record["error"] is not None)
        early.observe(failure)

    finished = False
    try:
        before = await _scrape(config) if pending else None
        phase_started = time.perf_counter()
        await run_pool(pending, config.concurrency, answer)
        wall = time.perf_counter() - phase_started
        finished = True
    except BaseException:
        run.entry.update(finished_at=now_iso(), rows_sent=tally.sent, completed=False)
        store.write_json(run.run_path, run.manifest)
        raise
    finally:
        # A finished log is rewritten (and synced) later; an unfinished one is synced now.
        run.log.close(sync=not finished)
        progress.close()
    if not pending:
        return  # nothing measured: the last measured phase's figures stay
    serving = tally.serving.block(wall_s=wall, concurrency=config.concurrency, gpus=config.gpus)
    if config.server_metrics and before is not None:  # unreadable before: warned once
        server = server_block(config.server_metrics, before, await _scrape(config), wall)
        if server is not None:
            serving["server"] = server
    run.manifest["generation"]["serving"] = run.entry["serving"] = serving


async def _answer(
    client: ChatClient,
    dataset: Dataset,
    row: Row,
    config: CandidateConfig,
    window: ContextWindow,
    serving: ServingRecorder,
) -> tuple[dict[str, Any], ChatError | None]:
    """Ask the candidate one row; the record to store (answer or error) and the error."""
    messages = messages_for(dataset, row)
    budget = output_budget(window.tokens, messages)
    started_at = now_iso()
    failure: ChatError | None = None
    record: dict[str, Any]
    try:
        result = await client.chat(
            config.model, messages, max_tokens=budget, extra=config.sampling, stream=config.stream
        )
    except ChatError as exc:
        failure = exc
        serving.fail()
        record = {
            "row_index": row.index,
            "row_id": row.row_id,
            "started_at": started_at,
            "content": None,
            "reasoning_content": None,
            "reasoning": None,
            "finish_reason": None,
            "usage": None,
            "latency_ms": None,
            "attempts": exc.attempts,
            "max_tokens": exc.max_tokens,
            "error": {
                "kind": f"{CANDIDATE}_{exc.kind}",
                "message": exc.message,
                "status": exc.status,
            },
            **NO_TIMING,
        }
    else:
        timing = timing_fields(result)
        serving.observe(result, timing)
        record = {
            "row_index": row.index,
            "row_id": row.row_id,
            "started_at": started_at,
            "content": result.content,
            "reasoning_content": result.reasoning_content,
            "reasoning": result.reasoning,
            "finish_reason": result.finish_reason,
            "usage": dict(result.usage) if result.usage is not None else None,
            "latency_ms": round(result.latency_ms, 3),
            "elapsed_ms": round(result.elapsed_ms, 3),
            "attempts": result.attempts,
            "max_tokens": result.max_tokens,
            "response_id": result.response_id,
            "served_model": result.model,
            "error": None,
            **timing,
        }
    record["finished_at"] = now_iso()
    return record, failure
