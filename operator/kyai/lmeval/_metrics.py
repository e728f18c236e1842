"""lm-eval results: flat metric dicts (``resolve_metric``) and threshold verdicts.

lm-eval keys a task's metrics ``"<metric>,<filter>"`` (``exact_match,flexible-extract``)
under ``results[task]``; a group task (``bbh_cot_fewshot``, ``mmlu_pro``) keeps its aggregate
there beside per-subtask entries. A requested key that is missing reads ``-1`` with an error
logged, so a renamed metric shows as an obviously bad value instead of crashing the run; a
gate on such a key fails.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("kyai.lmeval")

#: What a missing metric reads.
MISSING = -1.0


def load_results(path: str | Path) -> dict[str, Any]:
    """A results JSON file as a dict (ValueError naming the file when it is not one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable lm-eval results file: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise ValueError(f"{path}: no 'results' object (not an lm-eval results file)")
    return data


def resolve_metric(
    results: Mapping[str, Any], task: str, metric_keys: Sequence[str]
) -> dict[str, float]:
    """``{key: value}`` for each of ``metric_keys`` in ``results["results"][task]``.

    ``results`` is the whole results JSON (or its ``results`` object). A missing key (or a
    value that is not a finite number, as lm-eval writes ``"N/A"``) gives ``-1`` and an
    error in the log.
    """
    table = results.get("results", results)
    entry = table.get(task) if isinstance(table, Mapping) else None
    if not isinstance(entry, Mapping):
        log.error("lm-eval results have no task %r (tasks: %s)", task, sorted(table or {}))
        entry = {}
    flat: dict[str, float] = {}
    for key in metric_keys:
        value = entry.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            flat[key] = float(value)
        else:
            log.error(
                "lm-eval task %r has no metric %r (has: %s); reporting %s",
                task,
                key,
                sorted(k for k in entry if "," in k),
                MISSING,
            )
            flat[key] = MISSING
    return flat


def task_metrics(results: Mapping[str, Any], task: str) -> dict[str, float]:
    """Every ``"<metric>,<filter>"`` value of ``task`` (standard errors left out)."""
    table = results.get("results", results)
    entry = table.get(task, {}) if isinstance(table, Mapping) else {}
    return {
        key: float(value)
        for key, value in entry.items()
        if "," in key
        and not key.split(",", 1)[0].endswith("_stderr")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def split_key(key: str) -> tuple[str, str, str]:
    """``"task/metric,filter"`` → (task, metric, filter); filter ``none`` when absent."""
    task, sep, rest = key.partition("/")
    if not sep or not task or not rest:
        raise ValueError(f"{key!r}: a metric gate is '<task>/<metric>,<filter>'")
    metric, _, filt = rest.partition(",")
    if not metric:
        raise ValueError(f"{key!r}: the metric name is empty")
    return task, metric, filt or "none"


@dataclass(frozen=True)
class Verdict:
    """One threshold's outcome: the metric must be at least ``threshold``."""

    key: str
    threshold: float
    value: float | None
    passed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form (summary.json)."""
        return {
            "key": self.key,
            "threshold": self.threshold,
            "value": self.value,
            "passed": self.passed,
            "reason": self.reason,
        }


def gate(metrics: Mapping[str, float], thresholds: Mapping[str, float]) -> list[Verdict]:
    """Each threshold judged against ``metrics`` (higher is better; missing fails)."""
    verdicts = []
    for key, threshold in thresholds.items():
        value = metrics.get(key)
        if value is None or value == MISSING:
            verdicts.append(
                Verdict(key, threshold, value, False, f"{key} is missing from the results")
            )
        elif value >= threshold:
            verdicts.append(Verdict(key, threshold, value, True, f"{value:.4f} >= {threshold}"))
        else:
            verdicts.append(Verdict(key, threshold, value, False, f"{value:.4f} < {threshold}"))
    return verdicts
