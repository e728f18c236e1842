"""Judging with graders (deterministic built-ins, Python graders) and with several judges.

A grader scores the judge-facing copy of every stored answer, fail-closed like the LLM
judge: a row whose candidate failed scores 0 with the candidate's error kind whatever the
grader says, and a grader's failure on a row scores 0 with its reason. Several judges on one
generation each get their own judgements, summary and comparison key, plus agreement figures.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kyai.evaluation import _store as store
from kyai.evaluation._client import ChatClient, RetryPolicy
from kyai.evaluation._generate import now_iso
from kyai.evaluation._judge import GenerationSet, JudgeConfig, build_summary, judge
from kyai.evaluation._progress import ProgressListener
from kyai.evaluation._reasoning import strip_reasoning
from kyai.evaluation._scoring import comparison_key
from kyai.graders import Grade, GradeInput, Grader, GradingContext, GradingOutcome, ModelBridge


@dataclass(frozen=True)
class GraderJudge:
    """A grader acting as the judge, and where its model calls go (if it makes any)."""

    grader: Grader
    kind: str  # "builtin" or "python"
    bridge_endpoint: JudgeConfig | None = None
    embedding_model: str | None = None
    concurrency: int = 2


@dataclass(frozen=True)
class NamedJudge:
    """One of several judges: a name and an LLM or grader judge."""

    name: str
    llm: JudgeConfig | None = None
    grader: GraderJudge | None = field(default=None)


def _record(index: int, row_id: str, grade: Grade) -> dict[str, Any]:
    return {
        "row_index": index,
        "row_id": row_id,
        "score": grade.score if grade.ok else 0.0,
        "scores": dict(grade.scores),
        "extracted": grade.extracted,
        "details": dict(grade.details),
        "error": None
        if grade.ok
        else {"kind": grade.error_kind, "message": grade.message or grade.error_kind},
    }


def _grade_inputs(source: GenerationSet) -> list[GradeInput]:
    """The judge-facing copy of every stored answer (empty for a failed candidate)."""
    inputs = []
    for row in source.rows:
        record = source.generations[row.index]
        failed = bool(record.get("error"))
        inputs.append(
            GradeInput(
                row=row,
                response="" if failed else strip_reasoning(record.get("content")),
                raw_response=record.get("content"),
                candidate_failed=failed,
            )
        )
    return inputs


async def _grade(
    source: GenerationSet, output: Path, judge_spec: GraderJudge, inputs: list[GradeInput]
) -> GradingOutcome:
    """Run the grader over ``inputs``, its model calls (if any) through the bridge."""
    grader = judge_spec.grader
    client: ChatClient | None = None
    bridge: ModelBridge | None = None
    bridge_config = judge_spec.bridge_endpoint
    if bridge_config is not None:
        from kyai.evaluation._bridge import model_bridge

        client = ChatClient(
            bridge_config.endpoint,
            api_key=bridge_config.api_key,
            timeout_s=bridge_config.timeout_s,
            retry=bridge_config.retry or RetryPolicy(),
            max_connections=bridge_config.concurrency,
        )
        bridge = model_bridge(
            client, judge_model=bridge_config.model, embedding_model=judge_spec.embedding_model
        )
    try:
        outcome = await grader.grade(
            inputs,
            GradingContext(
                dataset=str(source.dataset["name"]),
                candidate_model=str(source.manifest["candidate"]["model"]),
                run_id=output.name,
                concurrency=judge_spec.concurrency,
                bridge=bridge,
            ),
        )
    finally:
        if client is not None:
            await client.aclose()
    if len(outcome.grades) != len(inputs):
        raise RuntimeError(
            f"the grader {grader.name} returned {len(outcome.grades)} grades for {len(inputs)} rows"
        )
    return outcome


def _record_grades(
    source: GenerationSet, output: Path, inputs: list[GradeInput], grades: Sequence[Grade]
) -> dict[int, dict[str, Any]]:
    """Write every row's judgement (a failed candidate's row scores 0 with its error kind)."""
    judged: dict[int, dict[str, Any]] = {}
    log_path = output / store.JUDGEMENTS
    log_path.unlink(missing_ok=True)  # graders are re-run whole: no mixing with old records
    log = store.JsonlLog(log_path)
    try:
        for item, grade in zip(inputs, grades, strict=True):
            if item.candidate_failed:
                error = source.generations[item.row.index]["error"]
                grade = Grade(
                    0.0,
                    error_kind=str(error.get("kind", "candidate_error")),
                    message="The candidate failed, so the row scores 0: "
                    f"{error.get('message', '')}",
                )
            record = _record(item.row.index, item.row.row_id, grade)
            judged[item.row.index] = record
            log.append(record)
    finally:
        log.close()
    return judged


async def judge_with_grader(
    generations_dir: Path, output: Path, judge_spec: GraderJudge
) -> dict[str, Any]:
    """Grade every stored answer of ``generations_dir`` into ``output``; return the summary."""
    source = GenerationSet.load(generations_dir)
    output.mkdir(parents=True, exist_ok=True)
    grader = judge_spec.grader
    identity = {"type": judge_spec.kind, **dict(grader.identity)}
    key = comparison_key(
        dataset_sha256=source.dataset["sha256"],
        generation_prompt=source.generation_prompt,
        judge=identity,
        scoring_method=f"kyai-mean-fail-closed/v1+{grader.name}",
        generation=source.key_generation,
    )
    started_at = now_iso()
    started = time.monotonic()
    inputs = _grade_inputs(source)
    outcome = await _grade(source, output, judge_spec, inputs)
    judged = _record_grades(source, output, inputs, outcome.grades)
    store.write_json(
        output / store.JUDGE,
        {
            "format": 1,
            "comparison_key": key,
            "generations_dir": str(generations_dir),
            "judge": identity,
            "started_at": started_at,
        },
    )
    bridge_config = judge_spec.bridge_endpoint
    summary = build_summary(
        source,
        key=key,
        judge_type=judge_spec.kind,
        judge_model=grader.name,
        judge_endpoint=bridge_config.endpoint if bridge_config else None,
        judge_prompt=None,
        judge_prompt_id=None,
        judged=judged,
        started_at=started_at,
        wall=time.monotonic() - started,
        metrics=outcome.metrics,
    )
    store.write_json(output / store.SUMMARY, summary)
    return summary


def cohen_kappa(first: Sequence[bool], second: Sequence[bool]) -> float | None:
    """Cohen's kappa of two pass/fail series; None when it is undefined (no variation)."""
    total = len(first)
    if total == 0:
        return None
    observed = sum(a == b for a, b in zip(first, second, strict=True)) / total
    p_first = sum(first) / total
    p_second = sum(second) / total
    expected = p_first * p_second + (1 - p_first) * (1 - p_second)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1 - expected)


def agreement(
    scores: Mapping[str, Sequence[float]], *, pass_mark: float = 0.5
) -> list[dict[str, Any]]:
    """Pairwise agreement between judges' per-row scores (same rows, same order).

    - ``exact_agreement``: share of rows where the two scores are equal;
    - ``mean_absolute_difference``: mean of ``|a - b|``;
    - ``cohen_kappa``: Cohen's kappa on pass/fail, a row passing when its score is at least
      ``pass_mark`` (None when a judge gives every row the same verdict).
    """
    pairs = []
    for (name_a, a), (name_b, b) in itertools.combinations(scores.items(), 2):
        count = len(a)
        kappa = cohen_kappa([x >= pass_mark for x in a], [y >= pass_mark for y in b])
        pairs.append(
            {
                "judges": [name_a, name_b],
                "rows": count,
                "exact_agreement": round(sum(x == y for x, y in zip(a, b, strict=True)) / count, 6)
                if count
                else None,
                "mean_absolute_difference": round(
                    sum(abs(x - y) for x, y in zip(a, b, strict=True)) / count, 6
                )
                if count
                else None,
                "cohen_kappa": None if kappa is None else round(kappa, 6),
                "pass_mark": pass_mark,
            }
        )
    return pairs


async def judge_many(
    generations_dir: Path,
    output: Path,
    judges: Sequence[NamedJudge],
    *,
    listener: ProgressListener | None = None,
    echo: bool = True,
) -> dict[str, Any]:
    """Run every judge on the same answers; one summary per judge plus agreement.

    ``echo``: the LLM judges print their progress and retry lines (``--quiet`` does not).

    With one judge, its files go straight into ``output``. With several, each judge writes
    into ``output/judges/<name>/`` and ``output/summary.json`` holds the first judge's figures
    (the run's headline), every judge's result and the agreement between them.
    """
    if not judges:
        raise ValueError("judge_many needs at least one judge")
    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise ValueError(f"judge names must be unique: {names}")
    summaries: dict[str, dict[str, Any]] = {}
    for spec in judges:
        target = output if len(judges) == 1 else output / "judges" / spec.name
        if spec.llm is not None:
            summaries[spec.name] = await judge(
                generations_dir, target, spec.llm, listener=listener, echo=echo
            )
        elif spec.grader is not None:
            summaries[spec.name] = await judge_with_grader(generations_dir, target, spec.grader)
        else:
            raise ValueError(f"judge {spec.name} has neither an LLM nor a grader")
    if len(judges) == 1:
        # The name keys the judge's run metrics in status.metrics ("<judge>/<metric>").
        return {**summaries[names[0]], "judge_name": names[0]}
    headline = dict(summaries[names[0]])
    headline["judges"] = [
        {
            "name": name,
            "judge_type": summary["judge_type"],
            "judge_model": summary["judge_model"],
            "avg_score": summary["avg_score"],
            "comparison_key": summary["comparison_key"],
            "error_count": summary["error_count"],
            "errors": summary["errors"],
            **({"metrics": summary["metrics"]} if "metrics" in summary else {}),
        }
        for name, summary in summaries.items()
    ]
    headline["agreement"] = agreement({name: s["scores"] for name, s in summaries.items()})
    store.write_json(output / store.SUMMARY, headline)
    return headline
