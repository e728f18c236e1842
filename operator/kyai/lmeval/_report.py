"""Writing an lm-eval run's metrics into its EvaluationRun's ``status.metrics``.

The worker patches only result fields (the operator owns phase and conditions, and gates the
metrics with ``spec.thresholds.metrics``). The patch must get through or the worker fails, so
that its Job retries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from kyai.api import EvaluationRunStatus, status_patch
from kyai.api.evaluationrun import MAX_METRICS
from kyai.constants import GROUP, KINDS, VERSION


def metrics_status(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The status patch of a ``kyai lm-eval`` summary (at most 64 metrics, gated ones first)."""
    metrics: dict[str, float] = dict(summary.get("metrics") or {})
    gated = [v["key"] for v in summary.get("thresholds") or [] if v["key"] in metrics]
    keys = list(dict.fromkeys([*gated, *sorted(metrics)]))[:MAX_METRICS]
    status = EvaluationRunStatus(metrics={key: metrics[key] for key in keys})
    return status_patch(status)


def report_metrics(namespace: str, name: str, summary: Mapping[str, Any]) -> None:
    """Patch the EvaluationRun's status (in-cluster config, or the kubeconfig); retry 5 times."""
    from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
    else:
        config.load_kube_config()
    api = client.CustomObjectsApi()
    body = {"status": metrics_status(summary)}
    plural = KINDS["EvaluationRun"][0]
    for attempt in range(5):
        try:
            api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name, body)
            return
        except Exception:
            if attempt == 4:
                raise
            time.sleep(min(2.0**attempt, 10.0))
