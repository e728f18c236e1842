"""Kueue's labels on what the operator makes: the queue an object's pods wait in.

Pure functions. A Workload, EvaluationRun or EvaluationSweep labelled
``kueue.x-k8s.io/queue-name`` (and optionally ``kueue.x-k8s.io/priority-class``), as Kueue's
own integrations (JobSet, RayJob, TrainJob) read them from a custom resource, passes both
labels to every Job and engine pod template made for it; the operator's
``default_queue_name`` labels an object that names no queue. An object without a queue label
(and no default) gets none: nothing changes for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The LocalQueue a Job or pod is submitted to (Kueue's ``constants.QueueLabel``).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
#: The WorkloadPriorityClass of a Job or pod (Kueue's ``constants.WorkloadPriorityClassLabel``).
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
#: The labels carried from an object to what is made for it, in this order.
QUEUE_LABELS = (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL)


def queue_labels(owner: Mapping[str, Any], default_queue: str | None = None) -> dict[str, str]:
    """The Kueue labels of ``owner`` (a Workload, run, sweep or Snapshot as read).

    The queue name falls back to ``default_queue`` (the operator's ``defaultQueueName``)
    when ``owner`` names none; an empty label value counts as none. The priority class is
    carried only with a queue (Kueue reads it only for a queued object).
    """
    labels = (owner.get("metadata") or {}).get("labels") or {}
    found = {key: str(labels[key]) for key in QUEUE_LABELS if labels.get(key)}
    if QUEUE_NAME_LABEL not in found:
        if not default_queue:
            return {}
        found = {QUEUE_NAME_LABEL: default_queue, **found}
    return found


def queue_name(labels: Mapping[str, str]) -> str | None:
    """The LocalQueue ``labels`` name (None: not queued)."""
    return labels.get(QUEUE_NAME_LABEL) or None
