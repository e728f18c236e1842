"""The run engine's worker Jobs: made with what they need, adopted, and read.

A Job's name is deterministic, so a restarted operator finds (adopts) the one it made
instead of making a second. What a Job needs (worker RBAC, the results PVC, ...) is made
right before it, once per Job. A failed Job is explained by its pods (the worker's own last
error); a running one whose pod cannot start is found by its pods too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kyai.api import EvaluationRunSpec
from kyai.builders import evaluation as build
from kyai.builders import label_value
from kyai.builders.queue import queue_labels
from kyai.constants import LABEL_COMPONENT, LABEL_RUN
from kyai.controllers import _kueue as kueue
from kyai.controllers._pods import PodTrouble, failure_message, first_trouble
from kyai.controllers._services import Services
from kyai.controllers.runkind import JobStep


async def make_job(
    svc: Services, run: Mapping[str, Any], step: JobStep, spec: EvaluationRunSpec
) -> dict[str, Any]:
    """Make what the step's Job needs, then the Job (an existing one is adopted).

    A run with a Kueue queue (its labels, or the operator's ``default_queue_name``) gets a
    Job carrying the queue's labels, created suspended for Kueue to start, where Kueue is
    installed.
    """
    # Independent of each other: created side by side (one round trip, not six).
    await asyncio.gather(*(svc.kube.ensure(obj) for obj in step.children))
    settings = svc.settings
    queue = queue_labels(run, settings.default_queue_name)
    suspend = bool(queue) and await kueue.installed(svc)
    manifest = build.worker_job(
        run, step.job,
        image=step.image,
        image_pull_policy=settings.worker_image_pull_policy,
        results_claim=step.results_claim,
        backoff_limit=spec.jobs.backoff_limit,
        active_deadline_seconds=spec.jobs.active_deadline_seconds,
        queue=queue,
        suspend=suspend,
    )  # fmt: skip
    job, _ = await svc.kube.create(manifest)
    return job


async def job_pods(svc: Services, namespace: str, run: str, step: JobStep) -> list[dict[str, Any]]:
    """The pods of a step's Job (selected by the template's labels, owned by the Job)."""
    job = step.job
    selector = f"{LABEL_RUN}={label_value(run)},{LABEL_COMPONENT}={job.component}"
    pods = await svc.kube.list("Pod", namespace, label_selector=selector)
    return [
        pod
        for pod in pods
        if any(
            ref.get("kind") == "Job" and ref.get("name") == job.name
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
        )
    ]


async def failure_cause(
    svc: Services, namespace: str, run: str, step: JobStep, job_message: str
) -> str:
    """Why the step's Job failed: its last failed pod's words, then the Job's own."""
    said = failure_message(await job_pods(svc, namespace, run, step))
    detail = f"{said} (Job: {job_message})" if said else job_message
    name = step.job.name
    return f"the {step.what} Job {name} failed: {detail}; see `kubectl logs job/{name}`"


async def start_trouble(
    svc: Services, namespace: str, run: str, step: JobStep
) -> PodTrouble | None:
    """The longest-standing reason a pod of the step's Job cannot start, if any."""
    return first_trouble(await job_pods(svc, namespace, run, step))
