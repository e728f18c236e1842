"""Shared GPU clusters: the operator's Jobs wait in Kueue's queue and resume after preemption.

The devcluster emulates Kueue v0.14.8 (``pytest.mark.devcluster(kueue=True)``): a ClusterQueue
whose quota admits one worker Job at a time (each asks 100m of cpu), a LocalQueue ``team``,
WorkloadPriorityClasses ``low`` and ``high`` (preemption within the ClusterQueue). Runs
labelled for ``team`` get Jobs that carry the queue's labels and start suspended; a run whose
Job waits says ``WaitingForQuota`` with Kueue's message; a low-priority run whose generation
Job is preempted says ``Preempted``, then resumes from the answers it stored and ends with
the per-question scores of an undisturbed run. Not for ``--with-e2e`` (the emulation only).

Served Workloads (engine stand-ins; the operator resolves Service names as a pod does) in a
ClusterQueue of 2 (or 1) GPUs: a sweep of one × 4 EngineArgsSets with parallelism 4 never
has more than 2 engine pods admitted at once (every pod event watched), its waiting derived
Workloads, runs and table cells say ``WaitingForQuota``, and all 4 cells Succeed; a run
generating against a served Workload whose engine a higher-priority one preempts waits (its
generation Job stopped), then goes on and Succeeds with no error row.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import (
    Kubectl,
    Operator,
    condition,
    phase_is,
    pod_network_operator,
    progress,
    reason_is,
)
from system.test_operator import run, snapshot, workload
from system.test_sweeps import Watch

pytestmark = [pytest.mark.timeout(240), pytest.mark.devcluster(kueue=True)]

KUEUE = "kueue.x-k8s.io/v1beta1"
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
#: Slow rows (0.5 s each, :func:`double`): half answered right ("done"), half wrong.
ROWS = [
    {
        "instruction": f"slow question {i}",
        "groundTruthResponse": "done" if i % 2 == 0 else "nope",
        "externalRowId": f"q{i}",
    }
    for i in range(16)
]
EXPECTED_SCORES = [1.0 if i % 2 == 0 else 0.0 for i in range(16)]


@pytest.fixture(scope="module")
def double() -> Iterator[LLMDouble]:
    """The candidate answers "done" after 0.5 s; the judge checks the ground truth."""
    server = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="slow", model="cand", content="done", delay_s=0.5),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    cluster: DevClusterThread,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """The operator, with a quick resync (Kueue's (un)suspends are read by the resync).

    It resolves Service names as a pod does, so served Workloads' engine stand-ins answer it.
    """
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), double.base_url,
        KYAI_RUN_RESYNC_SECONDS="1", KYAI_JOB_START_GRACE_SECONDS="2",
    )  # fmt: skip
    running.start()
    yield running
    running.stop()


def queues(
    kubectl: Kubectl, namespace: str, *, cpu: str, preemption: str = "Never", gpus: int = 2
) -> None:
    """A ClusterQueue named after the namespace (cpu, memory and GPU quota), its LocalQueue."""
    resources = {"cpu": cpu, "memory": "4Gi", "nvidia.com/gpu": gpus}
    kubectl.apply(
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
        *(
            {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass",
             "metadata": {"name": name}, "value": value}
            for name, value in (("low", 10), ("high", 1000))
        ),
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": preemption},
                "resourceGroups": [
                    {
                        "coveredResources": list(resources),
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": name, "nominalQuota": quota}
                                    for name, quota in resources.items()
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": namespace},
            "spec": {"clusterQueue": namespace},
        },
    )  # fmt: skip


def labelled(body: dict[str, Any], **labels: str) -> dict[str, Any]:
    body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), **labels}
    return body


def test_queued_runs_wait_for_quota_and_their_jobs_carry_the_queue(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    queues(kubectl, namespace, cpu="100m")  # one worker Job at a time
    kubectl.apply(
        snapshot("capitals", namespace, ROWS[:6]),
        workload("cand", namespace, double),
        labelled(run("first", namespace, double, generation={"concurrency": 1}), **{QUEUE: "team"}),
    )
    kubectl.wait_for("evaluationrun", "first", namespace, phase_is("Generating"))
    kubectl.apply(labelled(run("second", namespace, double), **{QUEUE: "team"}))
    waiting = kubectl.wait_for(
        "evaluationrun", "second", namespace, reason_is("WaitingForQuota"), timeout=30
    )
    said = condition(waiting)
    assert said["status"] == "False", said
    assert "insufficient unused quota for cpu in flavor default-flavor" in said["message"], said
    assert "in LocalQueue team" in said["message"] and "second-generate" in said["message"]
    # Waiting for quota is progress held, not a failure: Reconciling, not Stalled.
    kinds = {c["type"]: c["status"] for c in waiting["status"]["conditions"]}
    assert kinds.get("Stalled") == "False" and waiting["status"]["phase"] == "Generating"
    for name in ("first", "second"):
        done = kubectl.wait_for(
            "evaluationrun", name, namespace, phase_is("Succeeded", "Failed"), timeout=120
        )
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
        assert done["status"]["scores"] == EXPECTED_SCORES[:6]
    jobs = kubectl.items("jobs", namespace)
    assert {job["metadata"]["name"] for job in jobs} == {
        f"{name}-{step}" for name in ("first", "second") for step in ("generate", "judge")
    }
    for job in jobs:
        assert job["metadata"]["labels"][QUEUE] == "team", job["metadata"]
    # Kueue admitted every Job (each has its Kueue Workload, Finished).
    admitted = kubectl.items("workloads.kueue.x-k8s.io", namespace)
    assert len(admitted) == 4
    assert all(
        any(c["type"] == "Finished" and c["status"] == "True" for c in wl["status"]["conditions"])
        for wl in admitted
    )


def test_a_preempted_run_resumes_from_its_answers_with_the_same_scores(
    kubectl: Kubectl,
    operator: Operator,
    double: LLMDouble,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queues(kubectl, namespace, cpu="100m", preemption="LowerPriority")
    double.reset()
    one_at_a_time = {"concurrency": 1}
    # The low run's generation slow enough (16 rows, 2 s each) that Kueue preempts it mid-way
    # however long the high run's Job takes to be made on a loaded machine; 0.5 s once it has.
    slow = double.rules[0]
    monkeypatch.setattr(slow, "delay_s", 2.0)  # put back after the test, whatever happens
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        workload("cand", namespace, double),
        labelled(
            run("low", namespace, double, generation=one_at_a_time),
            **{QUEUE: "team", PRIORITY: "low"},
        ),
    )
    kubectl.wait_for("evaluationrun", "low", namespace, lambda obj: progress(obj) >= 2)
    kubectl.apply(
        labelled(
            run("high", namespace, double, generation=one_at_a_time),
            **{QUEUE: "team", PRIORITY: "high"},
        )
    )
    preempted = kubectl.wait_for(
        "evaluationrun", "low", namespace, reason_is("Preempted"), timeout=30
    )
    slow.delay_s = 0.5
    said = condition(preempted)
    assert "Preempted to accommodate a workload" in said["message"], said
    assert "low-generate" in said["message"] and preempted["status"]["phase"] == "Generating"
    results = {}
    for name in ("high", "low"):
        done = kubectl.wait_for(
            "evaluationrun", name, namespace, phase_is("Succeeded", "Failed"), timeout=150
        )
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
        results[name] = done["status"]
    # Scores identical to an undisturbed run's (the high run's, and the rules' own).
    assert results["low"]["scores"] == results["high"]["scores"] == EXPECTED_SCORES
    assert results["low"]["errorCount"] == 0
    # Every row asked once per run, plus at most the one in flight (concurrency 1) at each
    # eviction of the low run's generation (the high run's generation Job evicts it; its
    # judge Job may evict it once more), as Kueue counts them on the Job's Workload.
    evictions = sum(
        item.get("count", 0)
        for found in kubectl.items("workloads.kueue.x-k8s.io", namespace)
        if any(
            owner.get("name") == "low-generate"
            for owner in found["metadata"].get("ownerReferences") or []
        )
        for item in ((found.get("status") or {}).get("schedulingStats") or {}).get("evictions")
        or []
    )
    assert 1 <= evictions <= 2, evictions
    asked = Counter(record.messages[-1]["content"] for record in double.requests_for("cand"))
    rows = {row["instruction"] for row in ROWS}
    counts = {
        row: sum(n for text, n in asked.items() if re.search(rf"{row}\b", text)) for row in rows
    }
    assert all(count >= 2 for count in counts.values()), counts
    assert sum(count - 2 for count in counts.values()) <= evictions, (counts, evictions)


# -- a sweep of a served Workload in a queue of 2 GPUs ------------------------------------------

#: Two rows for the served stand-ins, whose answer is "Paris": one right, one wrong.
CAPITALS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris", "externalRowId": "fr"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima", "externalRowId": "pe"},
]
SETS = [f"set-{i}" for i in range(4)]
ENGINE = "app.kubernetes.io/component=engine"


def engine_args_set(
    name: str, namespace: str, args: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """A vLLM EngineArgsSet whose stand-in engine runs with ``env``."""
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EngineArgsSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "framework": "vllm",
            "args": args,
            "env": [{"name": key, "value": value} for key, value in env.items()],
        },
    }


def queued_workload(name: str, namespace: str, engine_args: str, **labels: str) -> dict[str, Any]:
    """A served vLLM Workload (1 GPU) with the queue labels ``labels``."""
    return labelled(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-8B",
                "resources": {"gpus": 1},
                "engineArgsSetRef": {"name": engine_args},
            },
        },
        **labels,
    )


def served_for_team(namespace: str) -> list[dict[str, Any]]:
    """Four vLLM EngineArgsSets and a served vLLM Workload (1 GPU) in the queue ``team``."""
    env = {"KYAI_STANDIN_ANSWER": "Paris", "KYAI_STANDIN_LOAD_SECONDS": "0"}
    return [
        *(
            engine_args_set(
                name, namespace, {"max-model-len": 4096, "max-num-seqs": 8 * (index + 1)}, env
            )
            for index, name in enumerate(SETS)
        ),
        queued_workload("served", namespace, SETS[0], **{QUEUE: "team"}),
    ]


def gated(pod: dict[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == "kueue.x-k8s.io/admission" for gate in gates)


def holding_gpus(pods: dict[str, dict[str, Any]]) -> int:
    """Engine pods admitted by Kueue and not ended (starting, running or terminating)."""
    return sum(
        not gated(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        for pod in pods.values()
    )


def said_waiting(events: list[tuple[str, dict[str, Any]]]) -> set[str]:
    """The objects whose Ready condition said ``WaitingForQuota`` in some event."""
    return {str(obj["metadata"]["name"]) for _, obj in events if reason_is("WaitingForQuota")(obj)}


def test_a_sweep_of_a_served_workload_keeps_to_the_gpu_quota(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    queues(kubectl, namespace, cpu="10", gpus=2)
    watches = [
        Watch(kubectl, kind, namespace, *selector)
        for kind, selector in (
            ("pods", ("-l", ENGINE)),
            ("workloads.kyai.io", ()),
            ("evaluationruns", ()),
            ("evaluationsweeps", ()),
        )
    ]
    pods, workloads, runs, sweeps = watches
    try:
        time.sleep(1.0)  # the watches are established before anything is made
        kubectl.apply(
            labelled(snapshot("capitals", namespace, CAPITALS), **{QUEUE: "team"}),
            *served_for_team(namespace),
        )
        kubectl.wait_for("workloads.kyai.io", "served", namespace, phase_is("Ready"), timeout=60)
        kubectl.apply(
            labelled(
                {
                    "apiVersion": "kyai.io/v1alpha1",
                    "kind": "EvaluationSweep",
                    "metadata": {"name": "flags", "namespace": namespace},
                    "spec": {
                        "workloads": [{"name": "served"}],
                        "engineArgsSets": [{"name": name} for name in SETS],
                        "snapshots": [{"name": "capitals"}],
                        "parallelism": 4,
                        "run": {
                            "judge": {
                                "type": "llm",
                                "llm": {"endpoint": double.base_url, "model": "judge"},
                            },
                            "generation": {"concurrency": 2},
                        },
                    },
                },
                **{QUEUE: "team"},
            )
        )
        done = kubectl.wait_for(
            "esw", "flags", namespace, phase_is("Succeeded", "Failed"), timeout=180
        )
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
        assert (done["status"]["cells"]["total"], done["status"]["cells"]["succeeded"]) == (4, 4)
        assert all(row["avgScore"] == 0.5 for row in done["status"]["table"]), done["status"]
        # Never more than the quota's 2 GPUs held by engine pods; both used at some point.
        assert max(holding_gpus(state) for state in pods.states()) == 2
        engine_pods = {str(obj["metadata"]["name"]): obj for _, obj in pods.snapshot()}
        assert len(engine_pods) >= 5  # the base's and one per derived Workload
        for pod in engine_pods.values():
            assert pod["metadata"]["labels"][QUEUE] == "team", pod["metadata"]
        # Derived Workloads beyond the free GPU waited, and said so; so did their cells.
        waiting = said_waiting(workloads.snapshot())
        assert any(name.startswith("served-") for name in waiting), waiting
        assert said_waiting(runs.snapshot()), [obj.get("status") for _, obj in runs.snapshot()]
        notes = {
            str(row.get("note"))
            for _, obj in sweeps.snapshot()
            for row in (obj.get("status") or {}).get("table") or []
        }
        assert any(note.startswith("WaitingForQuota: ") for note in notes), notes
    finally:
        for found in watches:
            found.close()
    # Every Job in the queue (Kueue reads a Job's own labels), and every engine pod template.
    jobs = kubectl.items("jobs", namespace)
    assert len(jobs) >= 8, [job["metadata"]["name"] for job in jobs]  # 4 × generate + judge
    for job in jobs:
        assert job["metadata"]["labels"][QUEUE] == "team", job["metadata"]
    for deployment in kubectl.items("deployments", namespace):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels[QUEUE] == "team", deployment["metadata"]


# -- a served Workload whose engine Kueue preempts ----------------------------------------------


def served_engine(name: str, namespace: str, priority: str, ttft_ms: int) -> list[dict[str, Any]]:
    """A served vLLM Workload (1 GPU) in ``team`` at ``priority``, answering "Paris" slowly."""
    env = {"KYAI_STANDIN_ANSWER": "Paris", "KYAI_STANDIN_LOAD_SECONDS": "0",
           "KYAI_STANDIN_TTFT_MS": str(ttft_ms)}  # fmt: skip
    return [
        engine_args_set(name, namespace, {"max-model-len": 4096}, env),
        queued_workload(name, namespace, name, **{QUEUE: "team", PRIORITY: priority}),
    ]


def test_a_run_waits_while_kueue_preempts_its_served_engine_then_succeeds(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    queues(kubectl, namespace, cpu="10", gpus=1, preemption="LowerPriority")
    rows = [CAPITALS[i % 2] | {"externalRowId": f"r{i}"} for i in range(8)]
    kubectl.apply(
        snapshot("capitals", namespace, rows),
        *served_engine("low", namespace, "low", ttft_ms=1000),
    )
    kubectl.wait_for("workloads.kyai.io", "low", namespace, phase_is("Ready"), timeout=60)
    body = run("r", namespace, double, generation={"concurrency": 1})
    body["spec"]["workloadRef"] = {"name": "low"}
    kubectl.apply(labelled(body, **{QUEUE: "team"}))
    kubectl.wait_for("evaluationrun", "r", namespace, lambda obj: progress(obj) >= 2, timeout=60)
    # A high-priority served Workload takes the only GPU: Kueue evicts low's engine pod.
    kubectl.apply(*served_engine("high", namespace, "high", ttft_ms=0))
    held = kubectl.wait_for("workloads.kyai.io", "low", namespace, reason_is("Preempted"))
    assert held["status"]["phase"] == "Deploying", held["status"]
    assert condition(held)["message"].startswith("the engine"), held["status"]
    assert "was preempted by Kueue in LocalQueue team" in condition(held)["message"]
    waiting = kubectl.wait_for("evaluationrun", "r", namespace, reason_is("Preempted"))
    said = condition(waiting)
    assert waiting["status"]["phase"] == "Generating" and said["status"] == "False", said
    assert "the Workload low is not Ready" in said["message"], said
    kinds = {c["type"]: c["status"] for c in waiting["status"]["conditions"]}
    assert kinds.get("Stalled") == "False", kinds
    # Its generation Job is stopped while the engine is gone (made again after).
    kubectl.wait_items(
        "jobs", namespace,
        lambda jobs: all(job["metadata"]["name"] != "r-generate" for job in jobs),
        timeout=30, what="the generation Job was not stopped",
    )  # fmt: skip
    stopped_at = progress(kubectl.get("evaluationrun", "r", namespace))
    assert stopped_at < len(rows)
    # The GPU comes back: low's engine is admitted again, and the run goes on and Succeeds.
    kubectl.run("delete", "workloads.kyai.io", "high", "-n", namespace)
    done = kubectl.wait_for(
        "evaluationrun", "r", namespace, phase_is("Succeeded", "Failed"), timeout=120
    )
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
    assert done["status"]["errorCount"] == 0, done["status"]
    assert done["status"]["scores"] == [1.0 if i % 2 == 0 else 0.0 for i in range(8)]
    assert kubectl.get("workloads.kyai.io", "low", namespace)["status"]["phase"] == "Ready"


def test_a_queue_name_kueue_cannot_take_is_stalled_at_once_and_makes_nothing(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    """``Team_Q`` is a valid label value but no LocalQueue's name (Kueue's ValidateQueueName:
    a lowercase RFC 1123 subdomain): nothing labelled with it could ever be admitted."""
    queues(kubectl, namespace, cpu="100m")
    started = time.monotonic()
    kubectl.apply(
        snapshot("capitals", namespace, ROWS[:2]),
        workload("cand", namespace, double),
        labelled(run("mislabelled", namespace, double), **{QUEUE: "Team_Q"}),
        engine_args_set("plain", namespace, {"max-model-len": 4096}, {}),
        queued_workload("served", namespace, "plain", **{QUEUE: "GPU_Queue"}),
    )
    for kind, name, value, held in (
        ("evaluationrun", "mislabelled", "Team_Q", "the run does not start"),
        ("workloads.kyai.io", "served", "GPU_Queue", "no engine is deployed for it"),
    ):
        stalled = kubectl.wait_for(kind, name, namespace, reason_is("InvalidQueueName"),
                                   timeout=30)  # fmt: skip
        said = condition(stalled)
        assert said["message"].startswith(
            f"the label {QUEUE} is '{value}', which no Kueue LocalQueue can be named: a queue "
            "name is a LocalQueue's name, which Kueue requires to be a lowercase RFC 1123 "
            "subdomain"
        ), said
        assert held in said["message"] and stalled["status"]["phase"] == "Pending"
        kinds = {c["type"]: c["status"] for c in stalled["status"]["conditions"]}
        assert kinds["Stalled"] == "True" and kinds["Reconciling"] == "False"
    assert time.monotonic() - started < 30
    assert kubectl.items("jobs", namespace) == [] and kubectl.items("deployments", namespace) == []
    assert kubectl.items("workloads.kueue.x-k8s.io", namespace) == []
    # Relabelled with the LocalQueue's name: queued there, and it Succeeds.
    kubectl.run("label", "evaluationrun", "mislabelled", "-n", namespace, f"{QUEUE}=team",
                "--overwrite")  # fmt: skip
    done = kubectl.wait_for(
        "evaluationrun", "mislabelled", namespace, phase_is("Succeeded", "Failed"), timeout=120
    )
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
    assert {job["metadata"]["labels"][QUEUE] for job in kubectl.items("jobs", namespace)} == {
        "team"
    }
