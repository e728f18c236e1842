"""Phase 2, judging: stored answers to an LLM judge, scores fail-closed, ``summary.json``.

The judge never sees reasoning: ``<think>`` blocks are stripped from the judge-facing copy
and reasoning fields are not sent. The candidate is never called: everything comes from the
generation directory (its ``run.json``, ``dataset.jsonl`` and ``generations.jsonl``), which
is only read, never modified.

Each judgement records the sha256 of the generation record it judged, so that judging again
after ``generate --retry-errors`` re-judges exactly the rows whose answers changed. When every
row is judged, ``judgements.jsonl`` is rewritten in row order.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai import __version__
from kyai.datasets import Row, read_rows_jsonl
from kyai.evaluation import _store as store
from kyai.evaluation._budget import output_budget, resolve_window
from kyai.evaluation._client import ChatClient, ChatError, RetryPolicy
from kyai.evaluation._earlystop import EarlyStop
from kyai.evaluation._generate import check_served, now_iso
from kyai.evaluation._keyfile import KeyFile
from kyai.evaluation._pool import run_pool
from kyai.evaluation._progress import Progress, ProgressListener
from kyai.evaluation._reasoning import strip_reasoning
from kyai.evaluation._scoring import (
    SCORING_METHOD,
    comparison_key,
    generation_identity,
    score_rows,
    sha256_text,
)
from kyai.evaluation._verdict import parse_verdict

if TYPE_CHECKING:
    import httpx

#: Prefix of judge-side error kinds in records and summaries.
JUDGE = "judge"

#: The judge samples greedily: the same answer gets the same verdict as far as the server allows.
JUDGE_TEMPERATURE = 0.0


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to ask the LLM judge."""

    endpoint: str
    model: str
    api_key: str | KeyFile | None = field(default=None, repr=False)
    """The key, or the file it is read from (again whenever it changed)."""
    prompt: str | None = None  # overrides the dataset's judge prompt
    concurrency: int = 16
    timeout_s: float = 600.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)


def judge_message(row: Row, response: str) -> str:
    """The judge's user message: instruction, ground truth and the cleaned response."""
    return (
        f"<instruction>\n{row.instruction}\n</instruction>\n"
        f"<ground_truth>\n{row.ground_truth_response}\n</ground_truth>\n"
        f"<candidate_response>\n{response}\n</candidate_response>"
    )


@dataclass(frozen=True)
class GenerationSet:
    """A generation directory, loaded: its manifest, rows and latest answer per row."""

    path: Path
    manifest: dict[str, Any]
    rows: tuple[Row, ...]
    generations: dict[int, dict[str, Any]]

    @classmethod
    def load(cls, path: Path) -> GenerationSet:
        """Load and check a generation directory; it must hold an answer for every row."""
        if not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a directory"
            raise store.RunDirectoryError(
                f"--generations {path} {what}; give a directory written by `kyai generate`."
            )
        manifest = store.read_json(path / store.RUN)
        rows_path = path / store.DATASET
        if not rows_path.exists():
            raise store.RunDirectoryError(f"{rows_path} does not exist.")
        rows = read_rows_jsonl(rows_path)
        subset = (manifest.get("generation") or {}).get("subset")
        if subset:  # `kyai generate --limit`: the first `limit` questions were asked
            rows = rows[: int(subset["limit"])]
        generations = {
            index: store.read_as_error(record)
            for index, record in store.latest_by_row(
                store.JsonlLog(path / store.GENERATIONS, repair=False).read()
            ).items()
        }
        missing = [row.row_id for row in rows if row.index not in generations]
        if missing:
            shown = ", ".join(missing[:5]) + (", …" if len(missing) > 5 else "")
            raise store.RunDirectoryError(
                f"{path} is incomplete: {len(missing)} of {len(rows)} rows have no stored "
                f"answer (row ids {shown}); run `kyai generate` on it again first."
            )
        return cls(path, manifest, rows, generations)

    @property
    def dataset(self) -> dict[str, Any]:
        """The dataset's manifest (name, version, sha256, prompts)."""
        value: dict[str, Any] = self.manifest["dataset"]
        return value

    @property
    def key_generation(self) -> dict[str, Any]:
        """What of the generation enters the comparison key (sampling, subset)."""
        return generation_identity(self.manifest.get("generation") or {})

    @property
    def generation_prompt(self) -> str:
        """The generation system prompt the candidate was given."""
        return str(self.manifest["dataset"]["prompts"]["generation"])

    def judge_prompt(self, override: str | None) -> str:
        """The judge prompt: the override, else the dataset's; custom datasets need one."""
        if override:
            return override
        stored = self.manifest["dataset"].get("prompts", {}).get("judge")
        if not stored:
            raise store.RunDirectoryError(
                f"The dataset of {self.path} has no judge prompt (custom datasets need one): "
                "pass --judge-prompt TEXT or --judge-prompt @FILE."
            )
        return str(stored)


@dataclass(frozen=True)
class _Identity:
    """What a judging is of: the judge, its comparison key, and the answers it judges."""

    judge: dict[str, Any]
    key: str
    generation: dict[str, Any]
    generation_sha: dict[int, str]


def _identity(source: GenerationSet, config: JudgeConfig, prompt: str) -> _Identity:
    judge_identity = {
        "type": "llm",
        "model": config.model,
        "prompt": prompt,
        "temperature": JUDGE_TEMPERATURE,
    }
    dataset = source.manifest["dataset"]
    key = comparison_key(
        dataset_sha256=dataset["sha256"],
        generation_prompt=source.generation_prompt,
        judge=judge_identity,
        generation=source.key_generation,
    )
    generation_sha = {
        row.index: sha256_text(store.dumps(source.generations[row.index])) for row in source.rows
    }
    generation = {
        "dataset_sha256": dataset["sha256"],
        "candidate_model": source.manifest["candidate"]["model"],
        "generations_sha256": sha256_text(
            store.dumps([source.generations[row.index] for row in source.rows])
        ),
    }
    return _Identity(judge_identity, key, generation, generation_sha)


def _resume(
    output: Path, identity: _Identity
) -> tuple[store.JsonlLog, dict[str, Any] | None, dict[int, dict[str, Any]]]:
    """The judgements log, the earlier manifest, and the judgements still valid.

    Refuses an output directory of another judge or of other answers; after ``generate
    --retry-errors`` changed some answers, exactly those rows are judged again.
    """
    judge_path = output / store.JUDGE
    log = store.JsonlLog(output / store.JUDGEMENTS)
    previous = store.read_json(judge_path) if judge_path.exists() else None
    old_generation = (previous or {}).get("generation") or {}
    generation = identity.generation
    if previous is not None and (
        previous.get("comparison_key") != identity.key
        or old_generation.get("dataset_sha256") != generation["dataset_sha256"]
        or old_generation.get("candidate_model") != generation["candidate_model"]
    ):
        raise store.RunDirectoryError(
            f"{output} already holds judgements of another judge or of other answers; "
            "use a new --output directory to judge again."
        )
    judged = store.latest_by_row(log.read()) if previous is not None else {}
    if old_generation != generation:
        # Some answers changed since (generate --retry-errors): re-judge exactly those rows.
        judged = {
            index: record
            for index, record in judged.items()
            if record.get("generation_sha256") == identity.generation_sha.get(index)
        }
    if previous is None and log.path.exists():
        log.path.unlink()  # judgements without their manifest cannot be trusted
    return log, previous, judged


async def judge(
    generations_dir: Path,
    output: Path,
    config: JudgeConfig,
    *,
    listener: ProgressListener | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    echo: bool = True,
) -> dict[str, Any]:
    """Judge every stored answer of ``generations_dir`` into ``output``; return the summary.

    ``echo``: print the progress and retry lines (``--quiet`` does not).
    """
    source = GenerationSet.load(generations_dir)
    prompt = source.judge_prompt(config.prompt)
    output.mkdir(parents=True, exist_ok=True)
    identity = _identity(source, config, prompt)
    log, previous, judged = _resume(output, identity)
    started_at = (previous or {}).get("started_at") or now_iso()
    started = time.monotonic()
    pending = [row for row in source.rows if row.index not in judged]
    progress = Progress(
        "judge",
        total=len(source.rows),
        done=len(source.rows) - len(pending),
        listener=listener,
        echo=echo,
        side=JUDGE,
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
        endpoint = client.base_url
        store.write_json(
            output / store.JUDGE,
            {
                "format": 1,
                "comparison_key": identity.key,
                "generation": identity.generation,
                "generations_dir": str(generations_dir),
                "judge": {**identity.judge, "endpoint": client.base_url},
                "started_at": started_at,
            },
        )
        run = _Run(client, config, prompt, source, identity, log, judged, progress)
        await run.judge_all(pending)
    log.rewrite(judged)
    summary = build_summary(
        source,
        key=identity.key,
        judge_type="llm",
        judge_model=config.model,
        judge_endpoint=endpoint,
        judge_prompt=prompt,
        judge_prompt_id=None
        if config.prompt
        else source.dataset.get("prompts", {}).get("judge_id"),
        judged=judged,
        started_at=started_at,
        wall=time.monotonic() - started,
    )
    store.write_json(output / store.SUMMARY, summary)
    return summary


@dataclass
class _Run:
    """The rows of one judging sent to the judge, each recorded as it finishes."""

    client: ChatClient
    config: JudgeConfig
    prompt: str
    source: GenerationSet
    identity: _Identity
    log: store.JsonlLog
    judged: dict[int, dict[str, Any]]
    progress: Progress

    async def judge_all(self, pending: list[Row]) -> None:
        """Judge ``pending`` (the judge is asked only when some answer is not an error)."""
        client, config, generations = self.client, self.config, self.source.generations
        needs_judge = any(not generations[row.index].get("error") for row in pending)
        cards = await client.list_models() if needs_judge else []
        check_served(cards, config.model, client.base_url, "judge")
        window = resolve_window(cards, config.model)
        asked = sum(1 for row in pending if not generations[row.index].get("error"))
        early = EarlyStop("judge", client.base_url, config.model, asked)

        async def judge_one(row: Row) -> None:
            record, failure, called = await _judge_row(
                client, config.model, self.prompt, row, generations[row.index], window.tokens
            )
            record["generation_sha256"] = self.identity.generation_sha[row.index]
            self.log.append(record)
            self.judged[row.index] = record
            self.progress.advance(error=record["error"] is not None)
            if called:
                early.observe(failure)

        finished = False
        try:
            await run_pool(pending, config.concurrency, judge_one)
            finished = True
        finally:
            # A finished log is rewritten (and synced) below; an unfinished one is synced now.
            self.log.close(sync=not finished)
            self.progress.close()


def build_summary(
    source: GenerationSet,
    *,
    key: str,
    judge_type: str,
    judge_model: str,
    judge_endpoint: str | None,
    judge_prompt: str | None,
    judge_prompt_id: str | None,
    judged: Mapping[int, Mapping[str, Any]],
    started_at: str,
    wall: float,
    metrics: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """``summary.json``: the KYAI figures of one judge over one generation directory."""
    finished_at = now_iso()
    figures = score_rows(len(source.rows), judged, source.generations)
    dataset = source.dataset
    candidate = source.manifest["candidate"]
    generation = source.manifest.get("generation", {})
    summary: dict[str, Any] = {
        "format": 1,
        "kyai_version": __version__,
        "comparison_key": key,
        "scoring_method": SCORING_METHOD,
        "dataset": dataset["name"],
        "dataset_version": dataset["version"],
        "dataset_sha256": dataset["sha256"],
        "dataset_source": dataset.get("source"),
        "candidate_model": candidate["model"],
        "candidate_endpoint": candidate.get("endpoint"),
        "context_window": candidate.get("context_window"),
        "context_window_source": candidate.get("context_window_source"),
        "judge_model": judge_model,
        "judge_type": judge_type,
        "judge_endpoint": judge_endpoint,
        "generation_prompt_id": dataset.get("prompts", {}).get("generation_id"),
        "generation_prompt_sha256": sha256_text(source.generation_prompt),
        "judge_prompt_id": judge_prompt_id,
        "judge_prompt_sha256": sha256_text(judge_prompt) if judge_prompt else None,
        **figures,
        "started_at": generation.get("started_at") or started_at,
        "finished_at": finished_at,
        "generation": {
            "started_at": generation.get("started_at"),
            "finished_at": generation.get("finished_at"),
            "wall_seconds": generation.get("wall_seconds"),
        },
        "judging": {
            "started_at": started_at,
            "finished_at": finished_at,
            "wall_seconds": round(wall, 3),
        },
    }
    # Said where a reader of the summary looks: the questions asked are a subset (their own
    # comparison key, never ranked with runs of every question), the sampling sent.
    summary.update(source.key_generation)
    if metrics:
        summary["metrics"] = dict(metrics)
    if generation.get("serving") is not None:  # the generation phase's (kyai generate)
        summary["serving"] = generation["serving"]
    return summary


async def _judge_row(
    client: ChatClient,
    model: str,
    prompt: str,
    row: Row,
    generation: Mapping[str, Any],
    window: int,
) -> tuple[dict[str, Any], ChatError | None, bool]:
    """Judge one row, fail-closed: the record to store, the judge's error, whether it was asked."""
    record: dict[str, Any] = {
        "row_index": row.index,
        "row_id": row.row_id,
        "judge_model": model,
        "started_at": now_iso(),
    }
    candidate_error = generation.get("error")
    if candidate_error:
        record.update(
            score=0.0,
            reasoning=None,
            reply=None,
            latency_ms=None,
            attempts=0,
            error={
                "kind": str(candidate_error.get("kind", "candidate_error")),
                "message": f"The candidate failed, so the row scores 0: "
                f"{candidate_error.get('message', '')}",
            },
        )
        record["finished_at"] = now_iso()
        return record, None, False
    response = strip_reasoning(generation.get("content"))
    messages = [
        {"role": "system", "content": prompt},
        {"role": "user", "content": judge_message(row, response)},
    ]
    failure: ChatError | None = None
    try:
        result = await client.chat(
            model,
            messages,
            max_tokens=output_budget(window, messages),
            extra={"temperature": JUDGE_TEMPERATURE},
        )
    except ChatError as exc:
        failure = exc
        record.update(
            score=0.0,
            reasoning=None,
            reply=None,
            latency_ms=None,
            attempts=exc.attempts,
            error={"kind": f"{JUDGE}_{exc.kind}", "message": exc.message, "status": exc.status},
        )
    else:
        verdict = parse_verdict(result.content)
        record.update(
            score=verdict.score,
            reasoning=verdict.reasoning,
            reply=result.content,
            latency_ms=round(result.latency_ms, 3),
            attempts=result.attempts,
            error=(
                None
                if verdict.ok
                else {"kind": verdict.error_kind, "message": verdict.error_message}
            ),
        )
    record["finished_at"] = now_iso()
    return record, failure, True
