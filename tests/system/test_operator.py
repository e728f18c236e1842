"""kubectl apply of a Snapshot, a Workload and an EvaluationRun ends in a score, in status and
on /metrics, with the same value ``kyai run`` computes on the same rows."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kyai.api import EvaluationRunStatus, SnapshotStatus, WorkloadStatus
from kyai.cli import main as kyai_main
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator, condition, phase_is

GEN = "Answer with the bare answer."
JUDGE = 'Score 1 if the response has the ground truth, else 0. Return JSON {"score": 0..1}.'
ROWS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris", "externalRowId": "fr"},
    {"instruction": "Capital of Italy?", "groundTruthResponse": "Rome", "externalRowId": "it"},
    {"instruction": "Capital of Spain?", "groundTruthResponse": "Madrid", "externalRowId": "es"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima", "externalRowId": "pe"},
]


def snapshot(name: str, namespace: str, rows: list[dict[str, str]] = ROWS) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"rows": rows}, "prompts": {"generation": GEN, "judge": JUDGE}},
    }


def workload(name: str, namespace: str, double: LLMDouble) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"framework": "vllm", "model": "cand", "endpoint": {"url": double.base_url}},
    }


def run(name: str, namespace: str, double: LLMDouble, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workloadRef": {"name": "cand"},
        "snapshotRef": {"name": "capitals"},
        "judge": {"type": "llm", "llm": {"endpoint": double.base_url, "model": "judge"}},
        "generation": {"concurrency": 4},
    }
    body.update(spec)
    body = {key: value for key, value in body.items() if value is not None}
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def cli_score(double: LLMDouble, tmp_path: Path) -> float:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {
                    "instruction": r["instruction"],
                    "ground_truth_response": r["groundTruthResponse"],
                    "external_row_id": r["externalRowId"],
                }
            )
            + "\n"
            for r in ROWS
        )
    )
    out = tmp_path / "cli"
    assert (
        kyai_main(
            [
                "run",
                "--endpoint",
                double.base_url,
                "--model",
                "cand",
                "--dataset",
                str(rows),
                "--generation-prompt",
                GEN,
                "--judge-prompt",
                JUDGE,
                "--judge-endpoint",
                double.base_url,
                "--judge-model",
                "judge",
                "--output",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    score: float = json.loads((out / "summary.json").read_text())["avg_score"]
    return score


def test_run_succeeds_with_the_cli_score_and_metrics(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str, tmp_path: Path
) -> None:
    kubectl.apply(
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        run("first", namespace, double, thresholds={"avgScore": 0.9}),
    )
    done = kubectl.wait_for("evaluationrun", "first", namespace, phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs())
    expected = cli_score(double, tmp_path)
    status = EvaluationRunStatus.model_validate(done["status"])  # the API's status contract
    assert status.avg_score == expected == 0.5  # Paris and Rome (thinking stripped) right
    assert status.questions == 4 and status.scores == [1.0, 1.0, 0.0, 0.0]
    assert status.comparison_key and status.error_count == 0
    assert status.observed_generation == done["metadata"]["generation"]
    assert condition(done, "Ready")["status"] == "True"
    passed = condition(done, "Passed")
    assert passed["status"] == "False" and "0.5" in passed["message"]
    wl = WorkloadStatus.model_validate(kubectl.get("workload", "cand", namespace)["status"])
    assert wl.phase == "Ready" and wl.max_model_len == 4096
    assert wl.max_model_len_source == "server"
    snap = SnapshotStatus.model_validate(kubectl.get("snapshot", "capitals", namespace)["status"])
    assert snap.rows == 4 and snap.sha256 is not None and len(snap.sha256) == 64
    assert status.dataset_sha256 == snap.sha256
    table = kubectl.run("get", "er", "first", "-n", namespace).stdout
    # Phase, score, the gates' verdict (it missed avgScore 0.9), latency, workload, snapshot,
    # then the Ready reason (WaitingForQuota while Kueue holds a Job).
    assert re.search(
        r"NAME\s+PHASE\s+SCORE\s+PASSED\s+LATENCY-MS\s+WORKLOAD\s+SNAPSHOT\s+REASON\s+AGE", table
    ), table
    assert re.search(
        r"first\s+Succeeded\s+0\.5\s+False\s+[\d.]+\s+cand\s+capitals\s+Succeeded", table
    ), table
    metrics = operator.metrics()
    line = next(
        (
            m
            for m in metrics.splitlines()
            if m.startswith("kyai_evaluation_score{") and 'run="first"' in m and namespace in m
        ),
        None,
    )
    assert line is not None, metrics
    assert line.endswith(" 0.5")
    for label in (
        'workload="cand"',
        'model="cand"',
        'framework="vllm"',
        'dataset="capitals"',
        'snapshot_version="custom"',
        f'comparison_key="{status.comparison_key}"',
    ):
        assert label in line
    events = kubectl.run("get", "events", "-n", namespace, "-o", "json").stdout
    reasons = {e["reason"] for e in json.loads(events)["items"]}
    assert {"Generating", "Judging", "Succeeded"} <= reasons

    # Re-judging reads the stored answers: the candidate gets no request.
    asked_before = len(double.requests_for("cand"))
    kubectl.apply(
        run(
            "rejudge",
            namespace,
            double,
            workloadRef=None,
            snapshotRef=None,
            generationFrom={"runRef": {"name": "first"}},
            judge={
                "type": "llm",
                "llm": {"endpoint": double.base_url, "model": "judge"},
                "prompt": "A stricter judge prompt. Return JSON.",
            },
        )
    )
    again = kubectl.wait_for("evaluationrun", "rejudge", namespace, phase_is("Succeeded", "Failed"))
    assert again["status"]["phase"] == "Succeeded", again["status"]
    assert len(double.requests_for("cand")) == asked_before
    rejudged = EvaluationRunStatus.model_validate(again["status"])
    assert rejudged.comparison_key != status.comparison_key
    assert rejudged.avg_score == 0.5

    # Deleting a run removes its series.
    kubectl.run("delete", "er", "first", "-n", namespace)
    kubectl.wait_for("evaluationrun", "rejudge", namespace, lambda _: True)
    for _ in range(50):
        if 'run="first",' not in operator.metrics() or namespace not in operator.metrics():
            break
        import time

        time.sleep(0.2)
    assert not any(
        'run="first"' in m and f'namespace="{namespace}"' in m
        for m in operator.metrics().splitlines()
        if m.startswith("kyai_evaluation_score")
    )


def test_run_waits_for_its_workload(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    kubectl.apply(snapshot("capitals", namespace), run("early", namespace, double))
    waiting = kubectl.wait_for(
        "evaluationrun",
        "early",
        namespace,
        lambda o: condition_reason(o, "Ready") == "WorkloadNotFound",
    )
    assert waiting["status"]["phase"] == "Pending"
    assert "cand" in condition(waiting, "Ready")["message"]
    kubectl.apply(workload("cand", namespace, double))
    done = kubectl.wait_for("evaluationrun", "early", namespace, phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded" and done["status"]["avgScore"] == 0.5


def condition_reason(obj: dict[str, Any], type_: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return str(c["reason"])
    return None


def test_operator_restart_mid_run(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    slow = [{"instruction": f"slow question {i}", "groundTruthResponse": "done"} for i in range(12)]
    kubectl.apply(
        snapshot("capitals", namespace, slow),
        workload("cand", namespace, double),
        run("restart", namespace, double, generation={"concurrency": 2}),
    )
    kubectl.wait_for("evaluationrun", "restart", namespace, phase_is("Generating"))
    operator.kill()
    operator.start()
    done = kubectl.wait_for(
        "evaluationrun", "restart", namespace, phase_is("Succeeded", "Failed"), timeout=90
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["avgScore"] == 1.0
    jobs = kubectl.items("jobs", namespace, "-l", "kyai.io/evaluation-run=restart")
    assert sorted(j["metadata"]["name"] for j in jobs) == ["restart-generate", "restart-judge"]


def test_invalid_objects_are_rejected_naming_the_field(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    cases = [
        ({"kind": "EngineArgsSet", "spec": {"framework": "ollama"}}, "spec.framework"),
        (
            {"kind": "Workload", "spec": {"framework": "vllm", "model": "m", "replicas": -1}},
            "spec.replicas",
        ),
        ({"kind": "Snapshot", "spec": {"builtin": "mmlu"}}, "spec.builtin"),
        (
            {"kind": "EvaluationRun", "spec": {"generation": {"concurrency": 0}}},
            "spec.generation.concurrency",
        ),
    ]
    for partial, field in cases:
        body = {
            "apiVersion": "kyai.io/v1alpha1",
            "metadata": {"name": "bad", "namespace": namespace},
            **partial,
        }
        result = kubectl.apply(body, check=False)
        assert result.returncode != 0, partial
        assert field in result.stderr, result.stderr


def test_semantic_errors_become_conditions(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    # The CRD's CEL rule refuses owned flags in spec.args at admission (as a real API server
    # does); the operator's own check still catches them in extraArgs.
    refused = kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EngineArgsSet",
            "metadata": {"name": "owns-port-args", "namespace": namespace},
            "spec": {"framework": "vllm", "args": {"port": 9000}},
        },
        check=False,
    )
    assert refused.returncode != 0
    assert 'spec: Invalid value: "object": args may not set host, port' in refused.stderr
    kubectl.apply(
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EngineArgsSet",
            "metadata": {"name": "owns-port", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "args": {"tensor-parallel-size": 2},
                "extraArgs": ["--port=9000"],
            },
        },
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": "no-prompts", "namespace": namespace},
            "spec": {"source": {"rows": ROWS}},
        },
    )
    eas = kubectl.wait_for("engineargsset", "owns-port", namespace, phase_is("Invalid"))
    assert "port" in eas["status"]["message"] and condition_reason(eas, "Ready") == "OwnedFlag"
    snap = kubectl.wait_for("snapshot", "no-prompts", namespace, phase_is("Failed"))
    assert "spec.prompts.generation" in snap["status"]["message"]


NATIVE_MATH = Path(__file__).parent.parent / "unit/datasets/data/native/math500_test.jsonl"


def test_several_judges_on_a_builtin_snapshot(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "math-native", "namespace": namespace},
            "data": {"test.jsonl": NATIVE_MATH.read_text()},
        },
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": "math", "namespace": namespace},
            "spec": {
                "builtin": "math-500",
                "source": {"configMapRef": {"name": "math-native", "key": "test.jsonl"}},
            },
        },
        workload("cand", namespace, double),
        run(
            "judged-thrice",
            namespace,
            double,
            snapshotRef={"name": "math"},
            judge=None,
            judges=[
                {"name": "platform", "type": "llm"},  # the operator's default judge
                {"name": "verify", "type": "builtin"},
                {
                    "name": "ends-with",
                    "type": "python",
                    "python": {
                        "source": "def grade(sample, item):\n"
                        "    out = (sample.get('extracted_output') or '').strip()\n"
                        "    return 1.0 if out.endswith(item.get('target') or '?') else 0.0\n"
                    },
                },
            ],
        ),
    )
    snap = kubectl.wait_for("snapshot", "math", namespace, phase_is("Ready", "Failed"))
    assert snap["status"]["phase"] == "Ready" and snap["status"]["version"] == "v1", snap["status"]
    done = kubectl.wait_for(
        "evaluationrun", "judged-thrice", namespace, phase_is("Succeeded", "Failed"), timeout=90
    )
    assert done["status"]["phase"] == "Succeeded", done["status"]
    status = EvaluationRunStatus.model_validate(done["status"])
    judges = status.judges or []
    assert [j.name for j in judges] == ["platform", "verify", "ends-with"]  # the spec's names
    by_name = {j.name: j for j in judges}
    assert by_name["verify"].judge_model == "math-verify"
    assert by_name["platform"].judge_model == "judge"
    # Only the "1+1" row's answer 2 is right, for every judge.
    assert status.questions
    for judge in judges:
        assert judge.avg_score == round(1 / status.questions, 6), judge
    pairs = (status.agreement or {})["pairs"]
    assert {tuple(p["judges"]) for p in pairs} == {
        ("platform", "verify"),
        ("platform", "ends-with"),
        ("verify", "ends-with"),
    }
    assert all(p["exact_agreement"] == 1.0 for p in pairs)
    assert status.avg_score == by_name["platform"].avg_score
    # Grader code runs in the judge pod: the pod gets a NetworkPolicy with only what it needs.
    policy = kubectl.get("networkpolicy", "judged-thrice-judge", namespace)
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 443, 6443, int(double.url.rsplit(":", 1)[1])}
    assert policy["metadata"]["ownerReferences"][0]["name"] == "judged-thrice"


def test_served_workload_gets_the_engine_and_rolls_on_new_flags(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    eas = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EngineArgsSet",
        "metadata": {"name": "tp2", "namespace": namespace},
        "spec": {
            "framework": "vllm",
            "args": {"tensor-parallel-size": 2, "enable-prefix-caching": True},
        },
    }
    kubectl.apply(
        eas,
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": "qwen", "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "model": "Qwen/Qwen3-8B",
                "engineArgsSetRef": {"name": "tp2"},
                "resources": {"gpus": 2},
            },
        },
    )
    deployment = kubectl.wait_for("deployment", "qwen-engine", namespace, lambda _: True)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container.get("command", []) + container.get("args", [])
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"], argv
    assert "--tensor-parallel-size" in argv and "--enable-prefix-caching" in argv
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    hash_before = deployment["spec"]["template"]["metadata"]["annotations"][
        "kyai.io/engine-args-hash"
    ]
    service = kubectl.get("service", "qwen-engine", namespace)
    assert service["spec"]["ports"][0]["port"] == 8000
    workload = kubectl.wait_for(
        "workload", "qwen", namespace, lambda o: (o.get("status") or {}).get("phase") == "Deploying"
    )
    assert workload["status"]["phase"] == "Deploying"
    # New flags: the pod template changes, so the Deployment rolls.
    eas["spec"]["args"]["max-model-len"] = 8192
    kubectl.apply(eas)
    rolled = kubectl.wait_for(
        "deployment",
        "qwen-engine",
        namespace,
        lambda d: (
            d["spec"]["template"]["metadata"]["annotations"]["kyai.io/engine-args-hash"]
            != hash_before
        ),
    )
    args = rolled["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--max-model-len" in args


def test_snapshots_that_cannot_be_resolved_say_why(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    import secrets

    # Incompressible rows, more than the operator's ConfigMap limit (100,000 bytes here) even
    # compressed; in a ConfigMap of their own (inline rows are bounded at admission).
    big = "".join(
        json.dumps({"instruction": secrets.token_hex(2000), "ground_truth_response": "x"}) + "\n"
        for _ in range(60)
    )
    huge_snapshot = snapshot("huge", namespace)
    huge_snapshot["spec"]["source"] = {"configMapRef": {"name": "huge-rows", "key": "q.jsonl"}}
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "huge-rows", "namespace": namespace},
            "data": {"q.jsonl": big},
        },
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": "mmlu", "namespace": namespace},
            "spec": {"builtin": "mmlu-pro"},
        },
        huge_snapshot,
    )
    offline = kubectl.wait_for("snapshot", "mmlu", namespace, phase_is("Pending", "Ready"))
    assert offline["status"]["phase"] == "Pending"
    assert condition_reason(offline, "Ready") == "SourceUnavailable"
    message = offline["status"]["message"]
    assert "HuggingFace" in message and "spec.source" in message
    huge = kubectl.wait_for("snapshot", "huge", namespace, phase_is("Failed", "Ready"))
    assert huge["status"]["phase"] == "Failed"
    assert condition_reason(huge, "Ready") == "TooLarge"
    assert "split the dataset" in huge["status"]["message"]
    assert kubectl.items("configmaps", namespace, "-l", "kyai.io/snapshot=huge") == []
