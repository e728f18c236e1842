"""A run reports worker pods that cannot start and workers' own last errors (no API server).

The run's reconciler works on an in-memory API (get, list by labels, create, patch, delete);
pods are written as the kubelet writes them (``state.waiting`` / ``state.terminated``).
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch

from kyai.api import EvaluationRunStatus
from kyai.builders import evaluation as build
from kyai.controllers import _conditions as c
from kyai.controllers._endpoints import EndpointChecks
from kyai.controllers._kube import KubeError
from kyai.controllers._pods import failure_message, first_trouble, pod_trouble
from kyai.controllers._services import Services
from kyai.controllers.evaluationrun import RunEngine
from kyai.evaluation._preflight import Problem
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings
from kyai_devcluster._selectors import parse_label_selector

NS = "team-a"
RUN_NAME = "r" * 200


def stamp(ago: float = 0.0) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryKube:
    """Enough of the API for a run's reconcile, keyed by (kind, namespace, name)."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []  # what the operator's event recorder posted
        for obj in objects:
            self.put(obj)

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert (method, path.rsplit("/", 1)[-1]) == ("POST", "events"), (method, path)
        self.events.append(copy.deepcopy(body))
        return body

    async def pod_log(
        self, namespace: str, pod: str, container: str, *, tail_lines: int,
        previous: bool = False, limit_bytes: int = 0,
    ) -> str:  # fmt: skip
        """No container here has a log (the log API's 400 for a container that never ran)."""
        raise KubeError(f'container "{container}" in pod "{pod}" is waiting to start', status=400)

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", stamp())
        meta.setdefault("resourceVersion", "1")
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def list(
        self, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        # The devcluster's parser: the API server's selector syntax ("=", "in (...)", ...).
        selector = parse_label_selector(label_selector)
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in self.objects.items()
            if k == kind and namespace in (None, ns)
            and selector.matches(obj["metadata"].get("labels") or {})
        ]  # fmt: skip

    async def pages(
        self, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """:meth:`list` in pages of two (as the API server's ``limit``)."""
        items = await self.list(kind, namespace, label_selector=label_selector)
        for start in range(0, len(items), 2):
            yield items[start : start + 2]

    async def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        meta = obj["metadata"]
        existing = await self.get(obj["kind"], meta["namespace"], meta["name"])
        if existing is not None:
            return existing, False
        self.put(copy.deepcopy(obj))
        return copy.deepcopy(obj), True

    async def ensure(self, obj: dict[str, Any]) -> None:
        await self.create(obj)

    async def patch(
        self, kind: str, namespace: str, name: str, body: Any, *, subresource: str = "",
        content_type: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        obj = self.objects[(kind, namespace, name)]
        if isinstance(body, list):  # a JSON patch
            patched = jsonpatch.apply_patch(obj, body)
            patched["metadata"]["resourceVersion"] = str(
                int(obj["metadata"]["resourceVersion"]) + 1
            )
            self.objects[(kind, namespace, name)] = patched
            return copy.deepcopy(patched)
        for key, value in body.items():
            if isinstance(value, dict):
                merged = dict(obj.get(key) or {})
                for k, v in value.items():
                    if v is None:
                        merged.pop(k, None)
                    else:
                        merged[k] = v
                obj[key] = merged
            else:
                obj[key] = value
        return copy.deepcopy(obj)

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.deleted.append((kind, name))
        self.objects.pop((kind, namespace, name), None)


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1" if kind not in ("Secret", "Pod") else "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
        "status": status,
    }


WORKLOAD = obj(
    "Workload", "cand", {"framework": "vllm", "model": "m", "endpoint": {"url": "http://c/v1"}},
    {"phase": "Ready", "endpoint": "http://c/v1", "servedModelName": "m"},
)  # fmt: skip
SNAPSHOT = obj(
    "Snapshot", "snap", {"builtin": "mmlu-pro"},
    {"phase": "Ready", "dataset": "mmlu-pro", "version": "v1", "sha256": "ab" * 32, "rows": 3,
     "configMap": "snap-rows"},
)  # fmt: skip
JUDGE_KEY = {
    "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "judge-key", "namespace": NS},
    "data": {"api-key": "a2V5"},
}  # fmt: skip


def run_object(**judge: Any) -> dict[str, Any]:
    llm = {"endpoint": "http://j/v1", "model": "judge", **judge}
    return obj(
        "EvaluationRun", RUN_NAME,
        {"workloadRef": {"name": "cand"}, "snapshotRef": {"name": "snap"},
         "judge": {"type": "llm", "llm": llm}},
        {},
    )  # fmt: skip


class Endpoints:
    """The endpoint checks a unit test's runs ask for: each recorded, each answered."""

    def __init__(self, **problems: list[Problem]) -> None:
        #: Problems by URL (none: the endpoint answers).
        self.problems = problems
        self.asked: list[tuple[str, str, str, tuple[tuple[str, str], ...], str | None]] = []

    async def __call__(
        self,
        side: str,
        where: str,
        url: str,
        models: Sequence[tuple[str, str]],
        *,
        key: str | None,
        key_source: str,
        say: Any = None,
    ) -> list[Problem]:
        self.asked.append((side, where, url, tuple(models), key))
        return self.problems.get(url, [])


def world(
    *extra: dict[str, Any], endpoints: Endpoints | None = None, **settings: Any
) -> tuple[Services, MemoryKube]:
    """The operator's services on an in-memory API; every endpoint a run checks answers."""
    kube = MemoryKube(copy.deepcopy(WORKLOAD), copy.deepcopy(SNAPSHOT), *extra)
    svc = Services(kube, OperatorSettings(**settings), RunMetrics())  # type: ignore[arg-type]
    svc.endpoints = EndpointChecks(endpoints or Endpoints())
    return svc, kube


async def step(svc: Services, kube: MemoryKube) -> EvaluationRunStatus:
    run = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert run is not None
    await RunEngine(svc, run).reconcile()
    fresh = await kube.get("EvaluationRun", NS, RUN_NAME)
    assert fresh is not None
    return EvaluationRunStatus.model_validate(fresh["status"])


def condition(status: EvaluationRunStatus, type_: str) -> tuple[str, str, str]:
    (found,) = [cond for cond in status.conditions or [] if cond.type == type_]
    return found.status, found.reason, found.message


def pod(job: str, component: str, status: dict[str, Any], *, age: float = 0.0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job[:50]}-x7k2p",
            "namespace": NS,
            "creationTimestamp": stamp(age),
            "labels": build.run_labels(RUN_NAME, component),
            "ownerReferences": [{"kind": "Job", "name": job, "uid": "j"}],
        },
        "status": status,
    }


def waiting(reason: str, message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "generate", "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }


def terminated(message: str, code: int = 3, finished: str | None = None) -> dict[str, Any]:
    state = {"exitCode": code, "reason": "Error", "message": message,
             "finishedAt": finished or stamp()}  # fmt: skip
    return {
        "phase": "Failed",
        "containerStatuses": [{"name": "judge", "state": {"terminated": state}}],
    }


# -- pure functions -------------------------------------------------------------------------


def test_pod_trouble_reads_the_kubelets_and_schedulers_reasons() -> None:
    stuck = pod(
        "j", "generate", waiting("CreateContainerConfigError", 'configmap "snap-rows" not found')
    )
    trouble = pod_trouble(stuck)
    assert trouble is not None
    assert trouble.describe() == (
        'pod j-x7k2p: CreateContainerConfigError: configmap "snap-rows" not found'
    )
    pulling = pod("j", "generate", waiting("ImagePullBackOff", 'Back-off pulling image "x:1"'))
    assert pod_trouble(pulling) is not None and pod_trouble(pulling).reason == "ImagePullBackOff"  # type: ignore[union-attr]
    unschedulable = pod("j", "generate", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient memory.",
         "lastTransitionTime": stamp(30)}]})  # fmt: skip
    found = pod_trouble(unschedulable)
    assert found is not None and found.reason == "Unschedulable"
    assert "Insufficient memory" in found.message
    # On their way, running or finished: no trouble.
    assert pod_trouble(pod("j", "generate", waiting("ContainerCreating", ""))) is None
    assert pod_trouble(pod("j", "generate", {"phase": "Running"})) is None
    assert pod_trouble(pod("j", "judge", terminated("boom"))) is None
    older = pod("j", "generate", waiting("ErrImagePull", "old"), age=100)
    assert first_trouble([stuck, older]) is not None
    assert first_trouble([stuck, older]).message == "old"  # type: ignore[union-attr]


def test_failure_message_prefers_the_last_pods_termination_message() -> None:
    first = pod("j", "judge", terminated("kyai judge: error: first", finished=stamp(60)))
    last = pod("j", "judge", terminated("kyai judge: error: Cannot reach http://j/v1/models"))
    first["metadata"]["name"] = "j-aaaaa"
    assert failure_message([first, last]) == (
        "pod j-x7k2p exited with code 3: kyai judge: error: Cannot reach http://j/v1/models"
    )
    oom = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    killed = pod("j", "judge", {"phase": "Failed", "containerStatuses": [{"state": oom}]})
    assert failure_message([killed]) == "pod j-x7k2p exited with code 137 (OOMKilled)"
    assert failure_message([pod("j", "judge", {"phase": "Running"})]) is None


# -- the run's reconciler ---------------------------------------------------------------------


async def test_a_pod_that_cannot_start_is_on_the_run_then_fails_it_after_the_deadline() -> None:
    svc, kube = world(worker_start_timeout_seconds=120)
    kube.put(run_object())
    status = await step(svc, kube)
    assert status.phase == "Generating"
    job = build.generation_job_name(RUN_NAME)
    assert len(job) <= 63 and await kube.get("Job", NS, job) is not None
    kube.put(pod(job, "generate", waiting("CreateContainerConfigError",
                                          'configmap "snap-rows" not found'), age=5))  # fmt: skip
    # Within the first seconds of the Job, pods are not looked at.
    assert condition(await step(svc, kube), c.PROGRESSING)[1] == c.GENERATING
    kube.objects[("Job", NS, job)]["metadata"]["creationTimestamp"] = stamp(20)
    status = await step(svc, kube)
    assert status.phase == "Generating"
    _, reason, message = condition(status, c.PROGRESSING)
    assert reason == c.WORKER_NOT_STARTING
    assert 'CreateContainerConfigError: configmap "snap-rows" not found' in message
    assert "120 s" in message and status.message == message
    # The cause fixed: the pod runs, the run reads as generating again.
    kube.put(pod(job, "generate", {"phase": "Running"}))
    status = await step(svc, kube)
    assert condition(status, c.PROGRESSING)[1] == c.GENERATING
    assert status.message == "generating answers of m on mmlu-pro"
    # Stuck past the deadline: the run fails with the pod's reason, the Job is removed.
    kube.put(pod(job, "generate", waiting("ImagePullBackOff", 'Back-off pulling image "k:1"'),
                 age=121))  # fmt: skip
    status = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, c.READY)
    assert reason == c.WORKER_NOT_STARTING
    assert 'ImagePullBackOff: Back-off pulling image "k:1"' in message and "120 s" in message
    assert ("Job", job) in kube.deleted
    # Each report is an Event too, posted by the operator's recorder (no kopf handler here).
    await svc.events.aclose()
    warned = [(e["reason"], e["message"]) for e in kube.events if e["type"] == "Warning"]
    assert [reason for reason, _ in warned] == [c.WORKER_NOT_STARTING, c.WORKER_NOT_STARTING]
    assert "CreateContainerConfigError" in warned[0][1] and "ImagePullBackOff" in warned[1][1]


async def test_a_failed_job_quotes_the_workers_termination_message() -> None:
    svc, kube = world(JUDGE_KEY)
    kube.put(run_object(apiKeySecretRef={"name": "judge-key"}))
    await step(svc, kube)
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    status = await step(svc, kube)
    assert status.phase == "Judging"
    judge = build.judge_job_name(RUN_NAME)
    manifest = kube.objects[("Job", NS, judge)]
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    kube.objects[("Job", NS, judge)]["status"] = {"conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit"}]}  # fmt: skip
    said = "kyai judge: error: the judge http://j/v1 refused the credentials (HTTP 401)"
    kube.put(pod(judge, "judge", terminated(said)))
    status = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, c.READY)
    assert reason == c.JUDGING_FAILED
    assert said in message and "exited with code 3" in message
    assert "backoff limit" in message


async def test_a_missing_judge_secret_keeps_the_run_pending_before_it_starts() -> None:
    svc, kube = world()
    kube.put(run_object(apiKeySecretRef={"name": "judge-key"}))
    status = await step(svc, kube)
    assert status.phase == "Pending"
    _, reason, message = condition(status, c.READY)
    assert reason == c.SECRET_NOT_FOUND
    assert "judge-key" in message and "judge's API key" in message
    assert await kube.get("Job", NS, build.generation_job_name(RUN_NAME)) is None
    kube.put(copy.deepcopy(JUDGE_KEY))
    assert (await step(svc, kube)).phase == "Generating"


async def test_a_judge_secret_deleted_during_generation_is_waited_for_then_fails() -> None:
    svc, kube = world(JUDGE_KEY, worker_start_timeout_seconds=60)
    kube.put(run_object(apiKeySecretRef={"name": "judge-key"}))
    await step(svc, kube)
    await kube.delete("Secret", NS, "judge-key")
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    status = await step(svc, kube)
    assert status.phase == "Judging"
    assert condition(status, c.PROGRESSING)[1:] == (c.SECRET_NOT_FOUND, status.message)
    assert "judge-key" in (status.message or "")
    assert await kube.get("Job", NS, build.judge_job_name(RUN_NAME)) is None
    # Restored in time: the judge Job is created.
    kube.put(copy.deepcopy(JUDGE_KEY))
    status = await step(svc, kube)
    assert condition(status, c.PROGRESSING)[1] == c.JUDGING
    assert await kube.get("Job", NS, build.judge_job_name(RUN_NAME)) is not None


async def test_a_judge_secret_missing_past_the_deadline_fails_the_run() -> None:
    svc, kube = world(JUDGE_KEY, worker_start_timeout_seconds=60)
    kube.put(run_object(apiKeySecretRef={"name": "judge-key"}))
    await step(svc, kube)
    await kube.delete("Secret", NS, "judge-key")
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {
        "conditions": [{"type": "Complete", "status": "True"}]
    }
    await step(svc, kube)
    run = kube.objects[("EvaluationRun", NS, RUN_NAME)]
    for cond in run["status"]["conditions"]:
        if cond["type"] == c.PROGRESSING:
            cond["lastTransitionTime"] = stamp(61)
    status = await step(svc, kube)
    assert status.phase == "Failed"
    _, reason, message = condition(status, c.READY)
    assert reason == c.SECRET_NOT_FOUND and "judge-key" in message and "60 s" in message


# -- in-use protection ------------------------------------------------------------------------


async def test_a_started_run_protects_its_snapshot_and_workload_until_it_ends() -> None:
    from kyai.constants import IN_USE_FINALIZER
    from kyai.controllers._inuse import release_if_unused

    svc, kube = world(worker_start_timeout_seconds=60)
    kube.put(run_object())
    assert (await step(svc, kube)).phase == "Generating"
    snapshot = kube.objects[("Snapshot", NS, "snap")]
    workload = kube.objects[("Workload", NS, "cand")]
    assert IN_USE_FINALIZER in snapshot["metadata"]["finalizers"]
    assert IN_USE_FINALIZER in workload["metadata"]["finalizers"]
    # Not being deleted: nothing to release, whatever the runs do.
    assert not await release_if_unused(svc, "Snapshot", NS, "snap")
    # Deleted while the run generates: the finalizer holds (the rows ConfigMap stays).
    snapshot["metadata"]["deletionTimestamp"] = stamp()
    assert not await release_if_unused(svc, "Snapshot", NS, "snap")
    assert IN_USE_FINALIZER in kube.objects[("Snapshot", NS, "snap")]["metadata"]["finalizers"]
    # A second run naming it waits, and says why.
    second = run_object()
    second["metadata"]["name"] = "second"
    kube.put(second)
    await RunEngine(svc, copy.deepcopy(second)).reconcile()
    waiting = EvaluationRunStatus.model_validate(
        kube.objects[("EvaluationRun", NS, "second")]["status"]
    )
    assert waiting.phase == "Pending" and waiting.message == "the Snapshot snap is being deleted"
    # The run ends: the Snapshot's deletion goes on, the Workload (not deleted) keeps it.
    gen = build.generation_job_name(RUN_NAME)
    kube.objects[("Job", NS, gen)]["status"] = {"conditions": [
        {"type": "Failed", "status": "True", "message": "deadline"}]}  # fmt: skip
    assert (await step(svc, kube)).phase == "Failed"
    assert IN_USE_FINALIZER not in kube.objects[("Snapshot", NS, "snap")]["metadata"]["finalizers"]
    assert IN_USE_FINALIZER in kube.objects[("Workload", NS, "cand")]["metadata"]["finalizers"]


async def test_the_resync_never_queues_behind_other_reconciles() -> None:
    import asyncio

    svc, _ = world(max_concurrent_reconciles=1)
    async with svc.locked_if_idle("EvaluationRun", NS, "a") as idle:
        assert idle
        # The one slot is taken: another object's resync is skipped, not queued.
        async with svc.locked_if_idle("EvaluationRun", NS, "b") as other:
            assert not other
    started = asyncio.Event()

    async def busy() -> None:
        async with svc.locked("EvaluationRun", NS, "a"):
            started.set()
            await asyncio.sleep(0.05)

    task = asyncio.create_task(busy())
    await started.wait()
    async with svc.locked_if_idle("EvaluationRun", NS, "a") as same:
        assert not same
    await task
    async with svc.locked_if_idle("EvaluationRun", NS, "a") as free:
        assert free
