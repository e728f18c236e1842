"""Writing an lm-eval run's metrics into its EvaluationRun's ``status.metrics``.

The worker writes only result fields (:class:`~kyai.api.WorkerStatus`; the operator owns
phase and conditions, and gates the metrics with ``spec.thresholds.metrics``), through the
one worker-side reporter (:mod:`kyai.worker_status`). The patch must get through or the
worker fails, so that its Job retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kyai.api import WorkerStatus, status_patch
from kyai.api.evaluationrun import MAX_METRICS
from kyai.worker_status import run_status_patcher, send_final


def metrics_model(summary: Mapping[str, Any]) -> WorkerStatus:
    """The status fields of a ``kyai lm-eval`` summary (at most 64 metrics, gated ones first)."""
    metrics: dict[str, float] = dict(summary.get("metrics") or {})
    gated = [v["key"] for v in summary.get("thresholds") or [] if v["key"] in metrics]
    keys = list(dict.fromkeys([*gated, *sorted(metrics)]))[:MAX_METRICS]
    return WorkerStatus(metrics={key: metrics[key] for key in keys})


def metrics_status(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The status patch of a ``kyai lm-eval`` summary."""
    return status_patch(metrics_model(summary))


def report_metrics(namespace: str, name: str, summary: Mapping[str, Any]) -> None:
    """Patch the EvaluationRun's status (in-cluster config, or the kubeconfig); 5 tries.

    Raises :class:`~kyai.worker_status.ReportError` when none got through.
    """
    asyncio.run(send_final(run_status_patcher(namespace, name), metrics_model(summary)))
