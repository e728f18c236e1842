"""Seed 003's per-dataset runners: one lm-eval task and its documented metric keys each.

Every runner takes ``(base_url, model, results_dir, limit=None, max_length=16384,
gen_kwargs="", **kwargs)`` (``kwargs`` go to :func:`run_lm_eval`: ``max_concurrent``,
``num_fewshot``, ``use_chat``, ``include_path``, ``extra_args``, ...) and returns
``(flat_metrics, results_file)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kyai.lmeval._metrics import load_results, resolve_metric
from kyai.lmeval._run import run_lm_eval


@dataclass(frozen=True)
class Runner:
    """A task, the metric keys that matter for it, and its lm-eval options."""

    task: str
    metric_keys: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)


_GSM8K_KEYS = ("exact_match,flexible-extract", "exact_match,strict-match")
_IFEVAL_KEYS = (
    "prompt_level_strict_acc,none",
    "inst_level_strict_acc,none",
    "prompt_level_loose_acc,none",
    "inst_level_loose_acc,none",
)

#: The seed's runners by task name.
RUNNERS: Mapping[str, Runner] = {
    "gsm8k": Runner("gsm8k", _GSM8K_KEYS),
    "gsm8k_cot": Runner("gsm8k_cot", _GSM8K_KEYS),
    # Llama's recipe: 8-shot chain of thought as a multi-turn chat.
    "gsm8k_cot_llama": Runner("gsm8k_cot_llama", _GSM8K_KEYS, {"fewshot_as_multiturn": True}),
    "bbh_cot_fewshot": Runner("bbh_cot_fewshot", ("exact_match,get-answer",)),
    "leaderboard_ifeval": Runner("leaderboard_ifeval", _IFEVAL_KEYS),
    "mmlu_pro": Runner("mmlu_pro", ("exact_match,custom-extract",)),
}


def run_task(
    runner: Runner,
    base_url: str,
    model: str,
    results_dir: str | Path,
    limit: int | None = None,
    max_length: int = 16384,
    gen_kwargs: str = "",
    **kwargs: Any,
) -> tuple[dict[str, float], Path]:
    """Run ``runner``'s task and resolve its metric keys from the newest results file."""
    options = {**runner.options, **kwargs}
    path = run_lm_eval(
        base_url,
        model,
        runner.task,
        results_dir,
        limit=limit,
        max_length=max_length,
        gen_kwargs=gen_kwargs,
        **options,
    )
    return resolve_metric(load_results(path), runner.task, runner.metric_keys), path


def run_accuracy_gsm8k(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """GSM8K (``gsm8k``): flexible-extract and strict-match exact match."""
    return run_task(RUNNERS["gsm8k"], base_url, model, results_dir, **kwargs)


def run_accuracy_gsm8k_cot(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """GSM8K chain of thought (``gsm8k_cot``)."""
    return run_task(RUNNERS["gsm8k_cot"], base_url, model, results_dir, **kwargs)


def run_accuracy_gsm8k_cot_llama(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """GSM8K with Llama's chain-of-thought prompt (``gsm8k_cot_llama``, few-shot multi-turn)."""
    return run_task(RUNNERS["gsm8k_cot_llama"], base_url, model, results_dir, **kwargs)


def run_accuracy_bbh(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """BIG-Bench Hard, chain of thought, few-shot (``bbh_cot_fewshot``, a group)."""
    return run_task(RUNNERS["bbh_cot_fewshot"], base_url, model, results_dir, **kwargs)


def run_accuracy_ifeval(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """IFEval (``leaderboard_ifeval``): strict and loose, prompt- and instruction-level."""
    return run_task(RUNNERS["leaderboard_ifeval"], base_url, model, results_dir, **kwargs)


def run_accuracy_mmlu_pro(
    base_url: str, model: str, results_dir: str | Path, **kwargs: Any
) -> tuple[dict[str, float], Path]:
    """MMLU-Pro (``mmlu_pro``, a group): custom-extract exact match."""
    return run_task(RUNNERS["mmlu_pro"], base_url, model, results_dir, **kwargs)
