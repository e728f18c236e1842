"""Every failure mode of a run, over every kind of run, end to end (issue 19).

Each test runs once per kind of run (generate + judge, re-judge, lm-eval) against the
devcluster, with the operator's timers shortened by its settings:

- a missing API-key Secret is named in the run's condition within 90 s, and the run goes on
  once it exists;
- a worker pod that cannot start is reported before the start deadline, then fails the run;
- a failed Job's cause (the worker's own last words) is in the run's condition;
- a Snapshot, Workload or source run deleted mid-run never hangs the run.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import Kubectl, Operator, finished, free_port, keyed_judge, secret
from system.test_operator import condition, condition_reason, phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(300)

#: The start deadline of this module's operator (workerStartTimeoutSeconds).
START_DEADLINE_S = 15

_NO_LM_EVAL = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None, reason="lm_eval is not installed"
)
KINDS = ["generate", "rejudge", pytest.param("lmEval", marks=_NO_LM_EVAL)]

#: The first Job of each kind: its name's suffix, the run's phase while it runs, and the
#: reason of the run's failure when it fails.
FIRST_JOB = {
    "generate": ("-generate", "Generating", "GenerationFailed"),
    "rejudge": ("-judge", "Judging", "JudgingFailed"),
    "lmEval": ("-lmeval", "Generating", "GenerationFailed"),
}

#: gsm8k rows (its native format); "slow" makes the double answer in 0.4 s each.
GSM8K = [
    {"question": f"Question {i}: each $ coin is 1, slow please?", "answer": "1+1=2\n#### 2"}
    for i in range(6)
]


@pytest.fixture(scope="module")
def operator(
    request: pytest.FixtureRequest,
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the operator's timers are shortened by its environment (devcluster only)")
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "HF_HUB_OFFLINE": "1",
            "KYAI_WORKER_START_TIMEOUT_SECONDS": str(START_DEADLINE_S),
            "KYAI_JOB_START_GRACE_SECONDS": "2",
            "KYAI_RUN_RESYNC_SECONDS": "3",
        },
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A namespace per test and kind (the test's name cut short, then the kind)."""
    kind = str(request.node.callspec.params["kind"]).lower()
    base = request.node.originalname.removeprefix("test_a_").replace("_", "-")[:40].strip("-")
    name = f"{base}-{kind}"
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture(scope="module")
def slow_judge() -> Iterator[LLMDouble]:
    """A judge that takes half a second per answer: a re-judge stays Judging a while."""
    server = LLMDouble(
        models=[ModelSpec("judge", max_model_len=8192)],
        rules=[Rule(model="judge", content=substring_judge, delay_s=0.5)],
    )
    with server.start_in_thread() as running:
        yield running


def gsm8k_rows(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gsm8k-rows", "namespace": namespace},
        "data": {"test.jsonl": "".join(json.dumps(row) + "\n" for row in GSM8K)},
    }


def references(
    kind: str, kubectl: Kubectl, namespace: str, double: LLMDouble, *, url: str | None = None,
    rows: list[dict[str, str]] | None = None, data: bool = True, key: str | None = None,
) -> None:  # fmt: skip
    """What a run of ``kind`` names, there and ready (a re-judge's source run Succeeded).

    ``url``: the candidate's endpoint instead of the double; ``rows``: the Snapshot's;
    ``data``: whether lm-eval's data file exists; ``key``: the candidate's API-key Secret.
    """
    candidate = workload("cand", namespace, double)
    if url is not None:
        candidate["spec"]["endpoint"]["url"] = url
    if key is not None:
        kubectl.apply(secret(key, namespace, **{"api-key": "k"}))
        candidate["spec"]["endpoint"]["apiKeySecretRef"] = {"name": key}
    if kind == "lmEval":
        kubectl.apply(candidate, *([gsm8k_rows(namespace)] if data else []))
    else:
        kubectl.apply(snapshot("capitals", namespace, *([rows] if rows else [])), candidate)
    kubectl.wait_for("workload", "cand", namespace, phase_is("Ready"))
    if kind == "rejudge":
        kubectl.apply(run("src", namespace, double))
        source = kubectl.wait_for(
            "er", "src", namespace, phase_is("Succeeded", "Failed"), timeout=90
        )
        assert source["status"]["phase"] == "Succeeded", source["status"]


def kind_run(
    kind: str, name: str, namespace: str, double: LLMDouble, **spec: Any
) -> dict[str, Any]:
    """A run of ``kind``: its defaults, ``spec`` on top."""
    if kind == "generate":
        return run(name, namespace, double, **spec)
    if kind == "rejudge":
        body = {
            "generationFrom": {"runRef": {"name": "src"}},
            "judge": {"type": "llm", "llm": {"endpoint": double.base_url, "model": "judge"}},
        }
    else:
        data = [{"split": "test", "configMapRef": {"name": "gsm8k-rows", "key": "test.jsonl"}}]
        body = {"workloadRef": {"name": "cand"},
                "lmEval": {"tasks": [{"name": "gsm8k", "numFewshot": 0, "dataFiles": data}]},
                "generation": {"concurrency": 1}}  # fmt: skip
    body.update(spec)
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_api_key_secret_is_named_within_90_s(
    kind: str, kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    if kind == "lmEval":
        # The Workload's own key: there when it turned Ready, deleted before the run.
        references(kind, kubectl, namespace, double, key="cand-key")
        kubectl.run("delete", "secret", "cand-key", "-n", namespace)
        missing, spec = secret("cand-key", namespace, **{"api-key": "k"}), {}
    else:
        references(kind, kubectl, namespace, double)
        missing = secret("judge-key", namespace, token="sk-1")
        spec = {"judge": keyed_judge(double.base_url)}
    started = time.monotonic()
    kubectl.apply(kind_run(kind, "keyed", namespace, double, **spec))
    waiting = kubectl.wait_for(
        "er", "keyed", namespace, lambda o: condition_reason(o, "Ready") == "SecretNotFound",
        timeout=90,
    )  # fmt: skip
    assert time.monotonic() - started < 90
    assert waiting["status"]["phase"] == "Pending"
    name = missing["metadata"]["name"]
    assert name in condition(waiting, "Ready")["message"], waiting["status"]
    assert not kubectl.items("jobs", namespace, "-l", "kyai.io/evaluation-run=keyed")
    kubectl.apply(missing)
    going = kubectl.wait_for("er", "keyed", namespace, lambda o: not phase_is("Pending")(o))
    assert going["status"]["phase"] != "Failed", going["status"]
    kubectl.run("delete", "er", "keyed", "-n", namespace, "--wait=false")  # no need to finish


@pytest.mark.parametrize("kind", KINDS)
def test_a_pod_that_cannot_start_is_reported_before_the_deadline(
    kind: str, kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    # What its first pod mounts is missing: the rows (generate), the source's results claim
    # (re-judge), the task's data file (lm-eval).
    references(kind, kubectl, namespace, double, data=False)
    if kind == "generate":
        kubectl.wait_for("snapshot", "capitals", namespace, phase_is("Ready"))
        kubectl.run("delete", "configmap", "capitals-rows", "-n", namespace)
    elif kind == "rejudge":
        kubectl.run("delete", "pvc", "src-results", "-n", namespace)
    suffix, phase, _ = FIRST_JOB[kind]
    started = time.monotonic()
    kubectl.apply(kind_run(kind, "stuck", namespace, double))
    reported = kubectl.wait_for(
        "er", "stuck", namespace,
        lambda o: condition_reason(o, "Progressing") == "WorkerNotStarting",
        timeout=START_DEADLINE_S + 30,
    )  # fmt: skip
    assert time.monotonic() - started < START_DEADLINE_S  # before the deadline it names
    assert reported["status"]["phase"] == phase
    message = condition(reported, "Progressing")["message"]
    assert f"stuck{suffix}" in message and "CreateContainerConfigError" in message, message
    done = finished(kubectl, "stuck", namespace, timeout=START_DEADLINE_S + 60)
    assert done["status"]["phase"] == "Failed", (done["status"], operator.logs())
    ready = condition(done, "Ready")
    assert ready["reason"] == "WorkerNotStarting", ready
    assert f"{START_DEADLINE_S} s" in ready["message"], ready


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_jobs_cause_is_in_the_runs_condition(
    kind: str, kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    # No pod retry, no request retry: the first failure is the worker's last.
    spec: dict[str, Any] = {"jobs": {"backoffLimit": 0}, "generation": {"maxRetries": 0}}
    if kind == "rejudge":  # the judge cannot be reached
        references(kind, kubectl, namespace, double)
        closed = f"http://127.0.0.1:{free_port()}/v1"
        spec["judge"] = {"type": "llm", "llm": {"endpoint": closed, "model": "judge"}}
    else:  # the candidate answered the Workload's probe, then went away
        with LLMDouble(models=[ModelSpec("cand", max_model_len=4096)]).start_in_thread() as gone_:
            references(kind, kubectl, namespace, double, url=gone_.base_url)
    kubectl.apply(kind_run(kind, "broken", namespace, double, **spec))
    done = finished(kubectl, "broken", namespace, timeout=180)
    assert done["status"]["phase"] == "Failed", (done["status"], operator.logs())
    suffix, _, reason = FIRST_JOB[kind]
    # kyai generate checks its candidate before any request, the operator a judge before the
    # judge Job: the run fails with the check's reason (kyai lm-eval has its own probe, and
    # the Job's reason).
    reason = {"generate": "CandidateUnreachable", "rejudge": "JudgeUnreachable"}.get(kind, reason)
    ready = condition(done, "Ready")
    assert ready["reason"] == reason, ready
    assert done["status"]["message"] == ready["message"]
    if kind == "rejudge":
        # The operator checked the judge before making the judge Job: none was made.
        assert ready["message"].startswith(f"spec.judge.llm.endpoint: Cannot reach {closed}/")
        assert ready["message"].endswith("(checked before the judge Job was made: it never ran)")
        assert kubectl.items("jobs", namespace, "-l", "kyai.io/evaluation-run=broken") == []
        return
    # The worker's own last words, not only the Job's reason.
    assert f"broken{suffix}" in ready["message"] and "exited with code" in ready["message"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_reference_deleted_mid_run_never_hangs(
    kind: str, kubectl: Kubectl, operator: Operator, double: LLMDouble, slow_judge: LLMDouble,
    namespace: str,
) -> None:  # fmt: skip
    slow = [{"instruction": f"Question {i}, slow please?", "groundTruthResponse": "done"}
            for i in range(8)]  # fmt: skip
    references(kind, kubectl, namespace, double, rows=slow)
    spec: dict[str, Any] = {"generation": {"concurrency": 1}}
    if kind == "rejudge":
        spec["judge"] = {"type": "llm", "llm": {"endpoint": slow_judge.base_url, "model": "judge"}}
    held = {"generate": ("snapshot", "capitals"), "rejudge": ("er", "src"),
            "lmEval": ("workload", "cand")}[kind]  # fmt: skip
    kubectl.apply(kind_run(kind, "busy", namespace, double, **spec))
    kubectl.wait_for("er", "busy", namespace, phase_is(FIRST_JOB[kind][1]), timeout=60)
    kubectl.run("delete", *held, "-n", namespace, "--wait=false")
    if kind != "rejudge":  # held by the run (kyai.io/in-use) while it runs
        meta = kubectl.get(held[0], held[1], namespace)["metadata"]
        assert meta.get("deletionTimestamp") and "kyai.io/in-use" in meta["finalizers"]
    done = finished(kubectl, "busy", namespace, timeout=240)
    if kind == "rejudge":
        # A re-judge holds nothing: its source (and the source's results claim) may go
        # under it. It ends either way, saying why when it cannot finish.
        assert done["status"]["phase"] in ("Succeeded", "Failed")
        assert done["status"].get("message"), done["status"]
    else:
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
        assert kubectl.wait_gone(*held, namespace)  # released once the run ended
