"""lm-evaluation-harness runs (seed 003): thin runners around the ``lm_eval`` CLI.

lm-eval is an optional extra (``pip install 'kyai-operator[lm-eval]'``); nothing here imports
it: ``lm_eval`` runs as a subprocess against an OpenAI-compatible server. ::

    from kyai.lmeval import run_accuracy_gsm8k_cot

    scores, results_file = run_accuracy_gsm8k_cot(base_url, model, "./eval_out", limit=200)
    assert scores["exact_match,flexible-extract"] >= 0.435

``kyai lm-eval`` (:mod:`kyai.lmeval.cli`) is the command line, and the operator's lm-eval Job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from kyai.lmeval._metrics import (
        MISSING,
        Verdict,
        gate,
        load_results,
        resolve_metric,
        split_key,
        task_metrics,
    )
    from kyai.lmeval._run import api_url, build_argv, build_model_args, newest_results, run_lm_eval
    from kyai.lmeval._runners import (
        RUNNERS,
        Runner,
        run_accuracy_bbh,
        run_accuracy_gsm8k,
        run_accuracy_gsm8k_cot,
        run_accuracy_gsm8k_cot_llama,
        run_accuracy_ifeval,
        run_accuracy_mmlu_pro,
        run_task,
    )
    from kyai.lmeval._tasks import LocalTask, TaskError, derive_local_task

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._metrics": (
            "MISSING",
            "Verdict",
            "gate",
            "load_results",
            "resolve_metric",
            "split_key",
            "task_metrics",
        ),
        "._run": ("api_url", "build_argv", "build_model_args", "newest_results", "run_lm_eval"),
        "._runners": (
            "RUNNERS",
            "Runner",
            "run_accuracy_bbh",
            "run_accuracy_gsm8k",
            "run_accuracy_gsm8k_cot",
            "run_accuracy_gsm8k_cot_llama",
            "run_accuracy_ifeval",
            "run_accuracy_mmlu_pro",
            "run_task",
        ),
        "._tasks": ("LocalTask", "TaskError", "derive_local_task"),
    },
)

__all__ = [
    "MISSING",
    "RUNNERS",
    "LocalTask",
    "Runner",
    "TaskError",
    "Verdict",
    "api_url",
    "build_argv",
    "build_model_args",
    "derive_local_task",
    "gate",
    "load_results",
    "newest_results",
    "resolve_metric",
    "run_accuracy_bbh",
    "run_accuracy_gsm8k",
    "run_accuracy_gsm8k_cot",
    "run_accuracy_gsm8k_cot_llama",
    "run_accuracy_ifeval",
    "run_accuracy_mmlu_pro",
    "run_lm_eval",
    "run_task",
    "split_key",
    "task_metrics",
]
