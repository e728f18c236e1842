"""What a worker Job's pods say: why one cannot start, and why one ended Failed.

Pure functions over pod objects as the API server returns them (``status.containerStatuses``
with ``state.waiting`` / ``state.terminated``, ``status.conditions`` with ``PodScheduled``),
so the run's status can carry the pod's own reason and message instead of "see kubectl logs".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kyai._clock import parse_time

#: Waiting reasons of a container that will not start by itself soon (the kubelet's names:
#: pkg/kubelet/images and kuberuntime). CrashLoopBackOff is not here: a worker pod runs
#: with restartPolicy Never, its failures end the pod and count against the backoff limit.
STUCK_REASONS = frozenset(
    {
        "CreateContainerConfigError",
        "CreateContainerError",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "RegistryUnavailable",
    }
)

#: The longest pod message quoted in a condition (the kubelet caps the termination message
#: at 4096 bytes; a condition message should stay readable).
MESSAGE_MAX = 1024


@dataclass(frozen=True)
class PodTrouble:
    """A pod that cannot start: its name, the kubelet's or scheduler's reason, since when."""

    pod: str
    reason: str
    message: str
    since: datetime

    def describe(self) -> str:
        """``pod <name>: <Reason>: <message>``."""
        text = f"pod {self.pod}: {self.reason}"
        return f"{text}: {_clip(self.message)}" if self.message else text


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "…"


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def pod_trouble(pod: Mapping[str, Any]) -> PodTrouble | None:
    """Why ``pod`` cannot start, or None when it runs, ended, or is only on its way."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    created = parse_time(meta.get("creationTimestamp")) or datetime.now(UTC)
    for container in _statuses(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in STUCK_REASONS:
            return PodTrouble(_name(pod), reason, str(waiting.get("message") or ""), created)
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            since = parse_time(condition.get("lastTransitionTime")) or created
            return PodTrouble(
                _name(pod), "Unschedulable", str(condition.get("message") or ""), since
            )
    return None


def first_trouble(pods: Iterable[Mapping[str, Any]]) -> PodTrouble | None:
    """The longest-standing trouble among ``pods``."""
    troubles = [t for t in map(pod_trouble, pods) if t is not None]
    return min(troubles, key=lambda t: t.since) if troubles else None


def _finished_at(pod: Mapping[str, Any]) -> datetime:
    """When the pod's last container ended (its creation time if none says)."""
    finished = [
        parse_time(((container.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for container in _statuses(pod)
    ]
    known = [time for time in finished if time is not None]
    if known:
        return max(known)
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    return created or datetime.min.replace(tzinfo=UTC)


def failure_message(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """What the last failed pod said: its container's termination message, else its reason.

    The termination message is the worker's own last error (written to
    ``terminationMessagePath``, or the tail of its log under ``FallbackToLogsOnError``).
    """
    failed = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Failed"]
    for pod in sorted(failed, key=_finished_at, reverse=True):
        for container in _statuses(pod):
            terminated = (container.get("state") or {}).get("terminated") or {}
            if not terminated:
                continue
            text = str(terminated.get("message") or "").strip()
            code = terminated.get("exitCode")
            if text:
                return f"pod {_name(pod)} exited with code {code}: {_clip(text)}"
            reason = terminated.get("reason")
            if reason and reason not in ("Error", "Completed"):
                return f"pod {_name(pod)} exited with code {code} ({reason})"
        status = pod.get("status") or {}
        if status.get("message"):
            reason = status.get("reason") or "Failed"
            return f"pod {_name(pod)}: {reason}: {_clip(str(status['message']))}"
    return None


def job_finished(job: Mapping[str, Any]) -> bool:
    """Whether a Job has ended, succeeded or failed."""
    return job_state(job)[0] in ("succeeded", "failed")


def age_seconds(obj: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since the object's creation (None when it does not say)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return None
    return ((now or datetime.now(UTC)) - created).total_seconds()


def job_suspended(job: Mapping[str, Any] | None) -> bool:
    """Whether a Job is suspended (``spec.suspend``: Kueue has not admitted it, or evicted it)."""
    return bool(job is not None and (job.get("spec") or {}).get("suspend"))


def started_seconds(job: Mapping[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since the Job last started: ``status.startTime``, else its creation.

    Kubernetes sets ``startTime`` when a Job starts or is resumed, and Kueue clears it when
    it suspends one: time a Job spent waiting in Kueue's queue never counts.
    """
    started = parse_time((job.get("status") or {}).get("startTime"))
    if started is None:
        return age_seconds(job, now)
    return ((now or datetime.now(UTC)) - started).total_seconds()


def may_be_stuck(
    job: Mapping[str, Any] | None, *, grace: float, now: datetime | None = None
) -> bool:
    """A running Job without a ready pod, started more than ``grace`` seconds before ``now``.

    Its pods are worth a look then (they normally start within the grace; a reconcile of
    1,000 runs should not list pods every few seconds each). A suspended Job (waiting for
    Kueue) is not stuck: it has no pod to look at.
    """
    if job is None or (job.get("status") or {}).get("ready") or job_finished(job):
        return False
    if job_suspended(job):
        return False
    age = started_seconds(job, now)
    return age is None or age > grace


def job_state(job: Mapping[str, Any] | None) -> tuple[str, str]:
    """("missing" | "running" | "succeeded" | "failed", message) of a Job."""
    if job is None:
        return "missing", ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            return "failed", condition.get("message") or condition.get("reason") or "the Job failed"
    if (status.get("succeeded") or 0) >= 1:
        return "succeeded", ""
    return "running", ""


# -- a served engine's pods (restartPolicy Always) ---------------------------------------------

#: Waiting reasons of an image that cannot be pulled.
IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
     "RegistryUnavailable"}
)  # fmt: skip


@dataclass(frozen=True)
class EngineTrouble:
    """An engine pod that cannot serve: what the kubelet or the scheduler says of it.

    ``kind`` is ``crash`` (the container exited and restarts: CrashLoopBackOff, Error,
    OOMKilled), ``image`` (its image cannot be pulled), ``unschedulable`` (the scheduler's
    words) or ``config`` (the container cannot be created: a missing Secret key, ...).
    """

    pod: str
    container: str
    kind: str
    reason: str
    message: str
    restarts: int
    since: datetime
    exit_code: int | None = None
    signal: int | None = None

    def describe(self) -> str:
        """One sentence: the pod, what happened, the kubelet's or scheduler's words."""
        if self.kind == "crash":
            code = "" if self.exit_code is None else f" with code {self.exit_code}"
            why = f" ({self.reason})" if self.reason not in ("", "Error") else ""
            times = "once" if self.restarts == 1 else f"{self.restarts} times"
            text = f"the engine container of pod {self.pod} exited{code}{why} and restarted {times}"
            if self.restarts == 0:
                text = f"the engine container of pod {self.pod} exited{code}{why}"
            return f"{text}: {_clip(self.message)}" if self.message else text
        text = f"pod {self.pod}: {self.reason}"
        return f"{text}: {_clip(self.message)}" if self.message else text


def _crash(pod: Mapping[str, Any], container: Mapping[str, Any], since: datetime) -> EngineTrouble:
    state = container.get("state") or {}
    ended = state.get("terminated") or (container.get("lastState") or {}).get("terminated") or {}
    code = ended.get("exitCode")
    return EngineTrouble(
        pod=_name(pod),
        container=str(container.get("name") or ""),
        kind="crash",
        reason=str(ended.get("reason") or "Error"),
        message=str(ended.get("message") or "").strip(),
        restarts=int(container.get("restartCount") or 0),
        since=parse_time(ended.get("finishedAt")) or since,
        exit_code=int(code) if isinstance(code, int) else None,
        signal=ended.get("signal") if isinstance(ended.get("signal"), int) else None,
    )


def engine_pod_trouble(pod: Mapping[str, Any]) -> EngineTrouble | None:
    """Why a served engine's pod cannot serve, or None (it serves, or is on its way).

    A container that exited and restarts (waiting in CrashLoopBackOff, terminated with a
    code other than 0, or running again, not ready, after a crash: its last termination
    state says how it ended) is a crash, until it is ready again; an image that cannot be
    pulled, a container that cannot be created and a pod the scheduler cannot place are
    reported with the kubelet's or the scheduler's words.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") == "Succeeded":
        return None
    created = parse_time(meta.get("creationTimestamp")) or datetime.now(UTC)
    for container in _statuses(pod):
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        name = str(container.get("name") or "")
        restarts = int(container.get("restartCount") or 0)
        if reason in IMAGE_PULL_REASONS or reason in STUCK_REASONS:
            kind = "image" if reason in IMAGE_PULL_REASONS else "config"
            message = str(waiting.get("message") or "")
            return EngineTrouble(_name(pod), name, kind, reason, message, restarts, created)
        if reason == "CrashLoopBackOff":
            return _crash(pod, container, created)
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (0, None):
            return _crash(pod, container, created)
        last = (container.get("lastState") or {}).get("terminated") or {}
        if (
            state.get("running")
            and not container.get("ready")
            and last
            and last.get("exitCode") not in (0, None)
        ):
            return _crash(pod, container, created)
    trouble = pod_trouble(pod)  # the scheduler's Unschedulable
    if trouble is not None and trouble.reason == "Unschedulable":
        return EngineTrouble(
            trouble.pod, "", "unschedulable", trouble.reason, trouble.message, 0, trouble.since
        )
    return None


def engine_trouble(pods: Iterable[Mapping[str, Any]]) -> EngineTrouble | None:
    """The trouble of the engine pods that has lasted longest (any pod of a group counts)."""
    troubles = [t for t in map(engine_pod_trouble, pods) if t is not None]
    return min(troubles, key=lambda t: t.since) if troubles else None
