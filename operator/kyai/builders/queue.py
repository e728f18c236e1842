"""Kueue's labels on what the operator makes: the queue an object's pods wait in.

Pure functions. A Workload, EvaluationRun or EvaluationSweep labelled
``kueue.x-k8s.io/queue-name`` (and optionally ``kueue.x-k8s.io/priority-class``), as Kueue's
own integrations (JobSet, RayJob, TrainJob) read them from a custom resource, passes both
labels to every Job and engine pod template made for it; the operator's
``default_queue_name`` labels an object that names no queue. An object without a queue label
(and no default) gets none: nothing changes for it.

A queue-name label Kueue can never take (:func:`queue_label_problem`; Kueue's rule is
:data:`kyai.settings.KUEUE_QUEUE_NAME_RULE`) is no queue to wait in: the object says so,
Stalled, and nothing is made for it; the operator's own default is checked at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyai.settings import queue_name_problem

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


#: What is not done for an object of each kind while its queue-name label is unusable.
_HELD = {
    "EvaluationRun": "the run does not start",
    "Workload": "no engine is deployed for it",
    "Snapshot": "its rows are not resolved",
    "EvaluationSweep": "no run or Workload is made for it (they would carry the label)",
}


def queue_label_problem(owner: Mapping[str, Any]) -> str | None:
    """Why ``owner``'s ``kueue.x-k8s.io/queue-name`` label can never name a LocalQueue.

    None when it can, or when ``owner`` has none (an empty value counts as none). The
    message names the label, its value, Kueue's rule and what is held until it is fixed:
    a Job or pod carrying it would wait forever (a real Kueue's webhook refuses it).
    """
    meta = owner.get("metadata") or {}
    value = (meta.get("labels") or {}).get(QUEUE_NAME_LABEL)
    if not value:
        return None
    problem = queue_name_problem(str(value))
    if problem is None:
        return None
    held = _HELD.get(str(owner.get("kind") or ""), "nothing is made for it")
    return (
        f"the label {QUEUE_NAME_LABEL} is {str(value)!r}, which no Kueue LocalQueue can be "
        f"named: {problem}; {held} until the label names a LocalQueue (or is removed)"
    )
