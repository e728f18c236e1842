"""Scoring: the KYAI average, error counts, the comparison key and ``summary.json``.

``avg_score`` is the mean over every row of the dataset: a row whose candidate or judge
failed scores 0 and stays in the denominator; ``avg_score_interval`` is its 95 % interval
(Wilson when every score is 0 or 1, else t; :mod:`kyai.stats`). ``avg_latency_ms`` is the
mean latency of the candidate's successful answers (a failed request has no answer latency
to rank on). Results are comparable exactly when their ``comparison_key`` is equal.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kyai.evaluation._store import dumps
from kyai.stats import StatsError, score_interval

#: The scoring method of the LLM judge path: mean of per-row judge scores, fail-closed.
SCORING_METHOD = "kyai-mean-fail-closed/v1"


def sha256_text(text: str) -> str:
    """The hex sha256 of a text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def comparison_key(
    *,
    dataset_sha256: str,
    generation_prompt: str,
    judge: Mapping[str, Any],
    scoring_method: str = SCORING_METHOD,
    generation: Mapping[str, Any] | None = None,
) -> str:
    """The seed's comparison key: equal exactly when two results answer the same question.

    It covers the snapshot's content, the judge configuration (type, model, sampling
    settings) with its system prompt, the generation system prompt and the scoring method;
    nothing about the candidate, the endpoints' addresses or the time of the run. It is the
    first 16 hex digits of a sha256 (short enough for a Kubernetes label value).

    ``generation`` (:func:`generation_identity`): the sampling parameters the candidate was
    sent and the subset of questions asked (``--limit``), when there are any; a run with
    neither has the key it always had.
    """
    material = {
        "dataset_sha256": dataset_sha256,
        "generation_prompt": generation_prompt,
        "judge": dict(judge),
        "scoring_method": scoring_method,
    }
    if generation:
        material["generation"] = dict(generation)
    return hashlib.sha256(dumps(material).encode("utf-8")).hexdigest()[:16]


#: The sampling parameters a run may send the candidate (the OpenAI request's own names).
SAMPLING_PARAMETERS = ("temperature", "top_p", "seed")


def generation_identity(generation: Mapping[str, Any]) -> dict[str, Any]:
    """What of ``run.json``'s ``generation`` block enters the comparison key.

    ``sampling`` (the parameters sent with every request, when any were: otherwise the
    server's and the model's own defaults decide) and ``subset`` (the first ``limit`` of
    ``of`` questions, for ``--limit``). Empty for a run of every question with the server's
    defaults.
    """
    identity: dict[str, Any] = {}
    sampling = generation.get("sampling")
    if sampling:
        identity["sampling"] = {key: sampling[key] for key in sorted(sampling)}
    subset = generation.get("subset")
    if subset:
        identity["subset"] = {"limit": subset["limit"], "of": subset["of"]}
    return identity


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def score_rows(
    total_rows: int,
    judgements: Mapping[int, Mapping[str, Any]],
    generations: Mapping[int, Mapping[str, Any]],
) -> dict[str, Any]:
    """Aggregate per-row judgements into the summary's figures.

    ``total_rows`` is the dataset's size: a row with no judgement counts 0 and is reported as
    ``missing_judgement`` (it never happens in a completed run, but it is never dropped).
    """
    scores: list[float] = []
    errors: Counter[str] = Counter()
    for index in range(total_rows):
        judgement = judgements.get(index)
        if judgement is None:
            scores.append(0.0)
            errors["missing_judgement"] += 1
            continue
        error = judgement.get("error")
        if error:
            errors[str(error.get("kind", "unknown_error"))] += 1
            scores.append(0.0)
        else:
            scores.append(float(judgement["score"]))
    latencies = sorted(
        float(record["latency_ms"])
        for record in generations.values()
        if not record.get("error") and isinstance(record.get("latency_ms"), int | float)
    )
    prompt_tokens = completion_tokens = 0
    for record in generations.values():
        usage = record.get("usage") or {}
        prompt_tokens += int(usage.get("prompt_tokens") or 0)
        completion_tokens += int(usage.get("completion_tokens") or 0)
    return {
        "count": total_rows,
        "avg_score": round(sum(scores) / total_rows, 6) if total_rows else 0.0,
        "avg_score_interval": avg_score_interval(scores),
        "avg_latency_ms": round(statistics.fmean(latencies), 3) if latencies else None,
        "latency_ms_p50": _round(_percentile(latencies, 50)),
        "latency_ms_p95": _round(_percentile(latencies, 95)),
        "error_count": sum(errors.values()),
        "errors": dict(sorted(errors.items())),
        "scores": scores,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def avg_score_interval(scores: Sequence[float]) -> dict[str, Any] | None:
    """The 95 % interval of ``avg_score`` as summary.json holds it; None under 2 questions.

    ``{low, high, standard_error, confidence, method}`` (:func:`kyai.stats.score_interval`).
    """
    try:
        return score_interval(scores).as_dict()
    except StatsError:
        return None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
