"""A served engine's pods that cannot serve: what the Workload says, in the kubelet's words.

``engine_pod_trouble`` reads pods as the API server returns them (restartPolicy Always: a
crash restarts the container); the Workload controller turns the trouble into its Ready
condition (``EngineCrashing`` with the exit code, the termination message and the last log
lines, secrets redacted; ``ImagePullBackOff``; ``Unschedulable``), Failed (Stalled) at
``spec.restartLimit``, Ready again once the engine serves; a run waiting on a Stalled
Workload fails naming it. Against the in-memory API of test_worker_pods.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus, WorkloadStatus
from kyai.controllers import _conditions as c
from kyai.controllers import workload as controller
from kyai.controllers._kube import KubeError
from kyai.controllers._pods import engine_pod_trouble, engine_trouble

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import NS, MemoryKube, obj, run_object, stamp, step, world

USAGE = (
    "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
    "vllm: error: unrecognized arguments: --tensor-paralel-size 1\n"
)


def engine_pod(
    name: str = "cand-engine-abc12",
    *,
    state: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    restarts: int = 0,
    ready: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    workload: str = "cand",
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "engine",
        "ready": ready,
        "restartCount": restarts,
        "state": state or {"running": {"startedAt": stamp()}},
    }
    if last is not None:
        container["lastState"] = {"terminated": last}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": stamp(60),
            "labels": {
                "app.kubernetes.io/instance": workload,
                "app.kubernetes.io/component": "engine",
                "kyai.io/workload": workload,
            },
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [container],
            "conditions": conditions or [],
        },
    }


CRASHED = {"exitCode": 2, "reason": "Error", "finishedAt": stamp(5), "message": "exit 2"}


@pytest.mark.parametrize(
    ("pod", "kind", "reason", "code"),
    [
        (
            engine_pod(
                state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                last=CRASHED,
                restarts=2,
            ),
            "crash",
            "Error",
            2,
        ),
        (
            engine_pod(state={"terminated": {**CRASHED, "reason": "OOMKilled", "exitCode": 137}}),
            "crash",
            "OOMKilled",
            137,
        ),
        # Running again after a crash, not ready yet: still the crash it was.
        (engine_pod(last=CRASHED, restarts=1), "crash", "Error", 2),
        (
            engine_pod(state={"waiting": {"reason": "ImagePullBackOff", "message": "no such"}}),
            "image",
            "ImagePullBackOff",
            None,
        ),
        (
            engine_pod(
                state={"waiting": {"reason": "ContainerCreating"}},
                conditions=[
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "lastTransitionTime": stamp(9),
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    }
                ],
            ),
            "unschedulable",
            "Unschedulable",
            None,
        ),
    ],
)
def test_what_an_engine_pod_that_cannot_serve_says(
    pod: dict[str, Any], kind: str, reason: str, code: int | None
) -> None:
    trouble = engine_pod_trouble(pod)
    assert trouble is not None
    assert (trouble.kind, trouble.reason, trouble.exit_code) == (kind, reason, code)


@pytest.mark.parametrize(
    "pod",
    [
        engine_pod(),  # starting: loading the model
        engine_pod(ready=True),
        engine_pod(ready=True, last=CRASHED, restarts=1),  # recovered
        engine_pod(state={"waiting": {"reason": "ContainerCreating"}}),
        engine_pod(last={**CRASHED, "exitCode": 0}, restarts=1),  # ended well, restarting
    ],
)
def test_a_pod_on_its_way_or_serving_is_no_trouble(pod: dict[str, Any]) -> None:
    assert engine_pod_trouble(pod) is None


def test_the_describe_line_names_the_pod_code_reason_and_restarts() -> None:
    pod = engine_pod(
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        last={**CRASHED, "reason": "OOMKilled", "exitCode": 137},
        restarts=3,
    )
    trouble = engine_trouble([engine_pod(name="ok", ready=True), pod])
    assert trouble is not None
    assert trouble.describe() == (
        "the engine container of pod cand-engine-abc12 exited with code 137 (OOMKilled) and "
        "restarted 3 times: exit 2"
    )


class Logs(MemoryKube):
    """The pod log API: the previous instance's log of each pod (or a refusal)."""

    logs: dict[tuple[str, bool], str]
    asked: list[tuple[str, str, int, bool]]

    async def pod_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        tail_lines: int,
        previous: bool = False,
        limit_bytes: int = 0,
    ) -> str:
        self.asked.append((pod, container, tail_lines, previous))
        if (pod, previous) not in self.logs:
            raise KubeError(f"previous terminated container {container!r} not found", status=400)
        return "\n".join(self.logs[(pod, previous)].splitlines()[-tail_lines:])


def served(kube: MemoryKube, **spec: Any) -> None:
    kube.put(obj("Workload", "cand", {"framework": "vllm", "model": "org/m", **spec}, {}))


async def reconcile(svc: Any, kube: MemoryKube) -> WorkloadStatus:
    body = copy.deepcopy(kube.objects[("Workload", NS, "cand")])
    await controller.WorkloadReconciler(svc, body).reconcile()
    return WorkloadStatus.model_validate(kube.objects[("Workload", NS, "cand")]["status"])


def ready_of(status: WorkloadStatus) -> tuple[str, str, str]:
    found = status.condition("Ready")
    assert found is not None
    return found.status, found.reason, found.message


def logs_world(**spec: Any) -> tuple[Any, Logs]:
    svc, kube = world()
    kube.__class__ = Logs
    assert isinstance(kube, Logs)
    kube.logs, kube.asked = {}, []
    served(kube, **spec)
    return svc, kube


async def test_a_crash_is_reported_with_its_code_message_and_last_log_lines() -> None:
    svc, kube = logs_world(hfTokenSecretRef={"name": "hf", "key": "token"})
    token = "aGZfc2VjcmV0dmFsdWUxMjM0NTY="  # base64 of hf_secretvalue123456
    kube.put(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hf", "namespace": NS},
            "data": {"token": token},
        }
    )
    noise = "".join(f"loading shard {i}\n" for i in range(30))
    leak = "token=hf_secretvalue123456 Authorization: Bearer abc.def.ghi api_key: sk-live-xyz123\n"
    kube.logs[("cand-engine-abc12", True)] = noise + leak + USAGE
    pod = engine_pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=CRASHED, restarts=1)
    kube.put(pod)
    status = await reconcile(svc, kube)
    state, reason, message = ready_of(status)
    assert (status.phase, state, reason) == ("Deploying", "False", "EngineCrashing")
    assert message.startswith(
        "the engine cannot serve: the engine container of pod cand-engine-abc12 exited with "
        "code 2 and restarted once: exit 2; its last log lines:\n"
    )
    assert message.endswith("vllm: error: unrecognized arguments: --tensor-paralel-size 1")
    assert kube.asked == [("cand-engine-abc12", "engine", 20, True)]
    lines = message.split("its last log lines:\n", 1)[1].splitlines()
    assert len(lines) == 20 and lines[0] == "loading shard 13"
    for secret in ("hf_secretvalue123456", "abc.def.ghi", "sk-live-xyz123"):
        assert secret not in message
    assert "[REDACTED]" in message
    stalled = status.condition("Stalled")
    assert stalled is not None and stalled.status == "False"


async def test_at_the_restart_limit_the_workload_is_failed_then_ready_when_it_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def probe(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
        return [{"id": "org/m", "max_model_len": 4096}]

    monkeypatch.setattr(controller, "probe_models", probe)
    svc, kube = logs_world(restartLimit=2)
    kube.put(
        engine_pod(state={"waiting": {"reason": "CrashLoopBackOff"}}, last=CRASHED, restarts=2)
    )
    status = await reconcile(svc, kube)
    _, reason, message = ready_of(status)
    assert (status.phase, reason) == ("Failed", "EngineCrashing")
    assert "it restarted 2 times, spec.restartLimit is 2" in message
    stalled = status.condition("Stalled")
    assert stalled is not None and stalled.status == "True"
    # The log API refused (no previous instance): reported without log lines, not an error.
    assert "its last log lines" not in message
    # The engine recovers (the fix rolled it, or it came back): Ready, not Stalled.
    kube.put(engine_pod(ready=True, last=CRASHED, restarts=2))
    deployment = kube.objects[("Deployment", NS, "cand-engine")]
    deployment["status"] = {"availableReplicas": 1}
    status = await reconcile(svc, kube)
    assert status.phase == "Ready" and ready_of(status)[1] == "Serving"
    stalled = status.condition("Stalled")
    assert stalled is not None and stalled.status == "False"


async def test_an_image_that_cannot_be_pulled_and_a_pod_no_node_takes() -> None:
    svc, kube = logs_world()
    waiting = {"waiting": {"reason": "ErrImagePull", "message": 'pull "vllm/x:v9" failed'}}
    kube.put(engine_pod(state=waiting))
    status = await reconcile(svc, kube)
    assert ready_of(status)[1:] == (
        "ImagePullBackOff",
        'the engine cannot start: pod cand-engine-abc12: ErrImagePull: pull "vllm/x:v9" failed',
    )
    unschedulable = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": stamp(),
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        }
    ]
    kube.put(
        engine_pod(state={"waiting": {"reason": "ContainerCreating"}}, conditions=unschedulable)
    )
    status = await reconcile(svc, kube)
    assert ready_of(status)[1] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in ready_of(status)[2]
    assert status.phase == "Deploying"


async def test_a_run_waiting_on_a_stalled_workload_fails_naming_it() -> None:
    crashing = {
        "phase": "Failed",
        "conditions": [
            {
                "type": c.READY,
                "status": "False",
                "reason": c.ENGINE_CRASHING,
                "message": "the engine cannot serve: exited with code 2",
                "lastTransitionTime": stamp(),
            },
            {
                "type": c.STALLED,
                "status": "True",
                "reason": c.ENGINE_CRASHING,
                "message": "x",
                "lastTransitionTime": stamp(),
            },
        ],
    }
    workload = obj("Workload", "cand", {"framework": "vllm", "model": "m"}, crashing)
    svc, kube = world(workload, run_object())
    status: EvaluationRunStatus = await step(svc, kube)
    assert status.phase == "Failed"
    found = status.condition(c.READY)
    assert found is not None and found.reason == c.WORKLOAD_FAILED
    assert found.message == (
        "the Workload cand cannot serve: EngineCrashing: the engine cannot serve: exited with "
        "code 2"
    )
    # A Workload that is only on its way keeps the run waiting.
    deploying = {"phase": "Deploying", "conditions": [crashing["conditions"][0]]}
    svc, kube = world(
        obj("Workload", "cand", {"framework": "vllm", "model": "m"}, deploying), run_object()
    )
    status = await step(svc, kube)
    assert status.phase == "Pending"
    found = status.condition(c.READY)
    assert found is not None and found.reason == c.WORKLOAD_NOT_READY
