"""An EvaluationRun's children and worker command lines, built from a Plan with no cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kyai._exitcodes import EXIT_UNREACHABLE, EXIT_USAGE
from kyai.api import EvaluationRunStatus, GenerationSettings, LmEvalSpec, status_patch
from kyai.api.plan import (
    GatewayToken,
    GeneratePlan,
    JudgesPlan,
    LLMJudgePlan,
    LmEvalPlan,
    RejudgePlan,
    SecretEnv,
    plan_from_status,
)
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.builders.lmeval import lmeval_job_name, lmeval_plan
from kyai.builders.snapshot import snapshot_load_job
from kyai.constants import LABEL_COMPONENT, LABEL_RUN
from kyai.gateway import (
    JUDGE_COMPONENT,
    TOKEN_MOUNT_PATH,
    TOKEN_VOLUME,
    token_mount,
    token_volume,
)

OWNER = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "EvaluationRun",
    "metadata": {"name": "r1", "namespace": "team-a", "uid": "u-1"},
}
GEN = GenerationSettings(concurrency=8, request_timeout_seconds=90, max_retries=2)
JUDGE_SECRET = SecretEnv(env=worker_args.JUDGE_KEY_ENV, secret="judge-key", key="token")


def grader(source: str = "def grade(sample, item):\n    return 1.0\n") -> dict[str, Any]:
    return {"grader": {"type": "python", "contract": "sample", "source": source}}


def judges(**fields: Any) -> JudgesPlan:
    base: dict[str, Any] = {
        "llm": LLMJudgePlan(endpoint="https://judge.example:8443/v1", model="j", secret=None),
        "use_llm": True,
    }
    return JudgesPlan(**{**base, **fields})


def plan(**fields: Any) -> GeneratePlan:
    base: dict[str, Any] = {
        "generation_args": ["generate", "--model", "m"],
        "results_claim": "r1-results",
        "own_claim": True,
        "judges": judges(),
        "generations_path": "/results/r1",
    }
    return GeneratePlan(**{**base, **fields})


def owned_by_run(meta: dict[str, Any]) -> None:
    assert meta["namespace"] == "team-a"
    assert meta["labels"][LABEL_RUN] == "r1"
    (ref,) = meta["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "EvaluationRun", "r1", "u-1", True
    )  # fmt: skip


def test_generation_args_full() -> None:
    args = worker_args.generation_args(
        namespace="team-a", run="r1", endpoint="http://cand:8000/v1", model="qwen",
        generation=GEN, api_key=True, context_window=32768,
    )  # fmt: skip
    assert args == [
        "generate", "--snapshot", "/etc/kyai/snapshot", "--endpoint", "http://cand:8000/v1",
        "--model", "qwen", "--output", "/results/r1", "--concurrency", "8",
        "--request-timeout", "90", "--max-retries", "2", "--report-run", "team-a/r1",
        "--api-key-env", "KYAI_CANDIDATE_API_KEY", "--context-window", "32768",
    ]  # fmt: skip


def test_generation_args_without_key_or_window() -> None:
    args = worker_args.generation_args(
        namespace="n", run="r", endpoint="e", model="m", generation=GEN, api_key=False,
        context_window=None,
    )  # fmt: skip
    assert "--api-key-env" not in args and "--context-window" not in args
    assert args[args.index("--output") + 1] == "/results/r"


def test_judge_args_default_names_need_no_flag() -> None:
    args = worker_args.judge_args(
        judges(), namespace="team-a", run="r1", generations_path="/results/src", generation=GEN
    )
    assert args[:5] == ["judge", "--generations", "/results/src", "--output", "/results/r1"]
    assert args[args.index("--judge") + 1] == "llm"
    assert "--judge-name" not in args
    assert args[args.index("--judge-endpoint") + 1] == "https://judge.example:8443/v1"
    assert "--judge-api-key-env" not in args and "--judge-prompt" not in args


def test_judge_args_keep_the_spec_names() -> None:
    plan_judges = judges(
        llm=LLMJudgePlan(endpoint="http://j/v1", model="j", secret=JUDGE_SECRET, prompt="P"),
        builtin=True,
        graders={"ends-with": grader(), "llm-check": grader()},
        names={"llm": "platform", "builtin": "verify"},
    )
    args = worker_args.judge_args(
        plan_judges, namespace="n", run="r", generations_path="/results/r", generation=GEN
    )
    joined = " ".join(args)
    assert "--judge llm --judge-name llm=platform" in joined
    assert "--judge builtin --judge-name builtin=verify" in joined
    graders = [args[i + 1] for i, arg in enumerate(args) if arg == "--grader"]
    assert graders == ["/etc/kyai/graders/ends-with.json", "/etc/kyai/graders/llm-check.json"]
    assert args[args.index("--judge-api-key-env") + 1] == "KYAI_JUDGE_API_KEY"
    assert args[args.index("--judge-prompt") + 1] == "P"


def test_judge_args_bridge_only_endpoint_has_no_llm_judge() -> None:
    plan_judges = judges(use_llm=False, graders={"g": grader()})
    args = worker_args.judge_args(
        plan_judges, namespace="n", run="r", generations_path="/results/r", generation=GEN
    )
    assert "--judge" not in args and "--judge-endpoint" in args


def test_graders_config_map() -> None:
    manifest = build.graders_config_map(OWNER, {"ends-with": grader("x = 1")})
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("ConfigMap", "r1-graders")
    owned_by_run(manifest["metadata"])
    assert json.loads(manifest["data"]["ends-with.json"]) == grader("x = 1")


def test_worker_rbac_reaches_only_its_run() -> None:
    account, role, binding = build.worker_rbac(OWNER)
    assert [o["kind"] for o in (account, role, binding)] == [
        "ServiceAccount", "Role", "RoleBinding"
    ]  # fmt: skip
    for obj in (account, role, binding):
        assert obj["metadata"]["name"] == "r1-worker"
        owned_by_run(obj["metadata"])
    assert account["automountServiceAccountToken"] is False
    assert {tuple(rule["resources"]) for rule in role["rules"]} == {
        ("evaluationruns",), ("evaluationruns/status",)
    }  # fmt: skip
    assert all(rule["resourceNames"] == ["r1"] for rule in role["rules"])
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "r1-worker", "namespace": "team-a"}
    ]


@pytest.mark.parametrize("storage_class", [None, "fast"])
def test_results_claim(storage_class: str | None) -> None:
    claim = build.results_claim(OWNER, size="2Gi", storage_class=storage_class)
    assert claim["metadata"]["name"] == "r1-results"
    owned_by_run(claim["metadata"])
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"].get("storageClassName") == storage_class


def job_manifest(job: build.WorkerJob) -> dict[str, Any]:
    return build.worker_job(
        OWNER, job, image="img:1", image_pull_policy="Never", results_claim="r1-results",
        backoff_limit=1, active_deadline_seconds=600,
    )  # fmt: skip


def test_generation_job_mounts_snapshot_and_candidate_key() -> None:
    secret = SecretEnv(env=worker_args.CANDIDATE_KEY_ENV, secret="cand", key="api-key")
    job = build.generation_job("r1", plan(candidate_secret=secret, snapshot_config_map="s-rows"))
    manifest = job_manifest(job)
    assert manifest["metadata"]["name"] == "r1-generate"
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["generate", "--model", "m"]
    assert secret.env_entry() in container["env"]
    assert {"name": "snapshot", "configMap": {"name": "s-rows"}} in pod["volumes"]
    assert pod["serviceAccountName"] == "r1-worker"
    assert manifest["spec"]["activeDeadlineSeconds"] == 600


def test_judge_job_mounts_graders_only_when_there_are_some() -> None:
    with_graders = job_manifest(
        build.judge_job("r1", judges(llm=LLMJudgePlan(
            endpoint="e", model="m", secret=JUDGE_SECRET), graders={"g": grader()}), ["judge"])
    )  # fmt: skip
    pod = with_graders["spec"]["template"]["spec"]
    assert {"name": "graders", "configMap": {"name": "r1-graders"}} in pod["volumes"]
    (container,) = pod["containers"]
    assert JUDGE_SECRET.env_entry() in container["env"]
    plain = job_manifest(build.judge_job("r1", judges(), ["judge"]))
    volumes = plain["spec"]["template"]["spec"]["volumes"]
    assert all(v["name"] != "graders" for v in volumes)
    assert all(v["name"] != TOKEN_VOLUME for v in volumes)


GATEWAY = "http://kyai-judge-gateway.kyai-system.svc:8080/v1"


def gateway_judges(**fields: Any) -> JudgesPlan:
    token = GatewayToken(audience="aud-x", expiration_seconds=900)
    llm = LLMJudgePlan(endpoint=GATEWAY, model="big", gateway_token=token)
    return judges(llm=llm, **fields)


def test_judge_args_behind_the_gateway_read_the_token_file() -> None:
    args = worker_args.judge_args(
        gateway_judges(), namespace="team-a", run="r1", generations_path="/results/r1",
        generation=GEN,
    )  # fmt: skip
    flag = args.index("--judge-api-key-file")
    assert args[flag + 1] == f"{TOKEN_MOUNT_PATH}/token"
    assert "--judge-api-key-env" not in args
    assert args[args.index("--judge-endpoint") + 1] == GATEWAY
    assert args[args.index("--judge-model") + 1] == "big"


def test_judge_job_behind_the_gateway_mounts_its_token_and_no_secret() -> None:
    judged = gateway_judges(graders={"g": grader()})
    args = worker_args.judge_args(
        judged, namespace="team-a", run="r1", generations_path="/results/r1", generation=GEN
    )
    manifest = job_manifest(build.judge_job("r1", judged, args))
    template = manifest["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert token_volume(audience="aud-x", expiration_seconds=900) in pod["volumes"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == TOKEN_VOLUME]
    source = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert source == {"audience": "aud-x", "expirationSeconds": 900, "path": "token"}
    assert token_mount() in container["volumeMounts"]
    assert {"name": "graders", "configMap": {"name": "r1-graders"}} in pod["volumes"]
    # No key in the pod: no env from a Secret, no Secret volume.
    assert not any("valueFrom" in item for item in container["env"])
    assert not any("secret" in v for v in pod["volumes"])
    # What the gateway checks on the caller's pod: the run label, the judge component and the
    # run's own worker ServiceAccount (the token is issued to it).
    labels = template["metadata"]["labels"]
    assert labels[LABEL_RUN] == "r1" and labels[LABEL_COMPONENT] == JUDGE_COMPONENT
    assert pod["serviceAccountName"] == build.worker_name("r1")
    assert container["args"] == args
    # The gateway's port is the one the judge's fence lets out.
    assert 8080 in build.endpoint_ports(judged)


def lmeval_worker_job() -> build.WorkerJob:
    """The lm-eval Job's part, as the lm-eval kind of run makes it."""
    spec = LmEvalSpec.model_validate({"tasks": [{"name": "gsm8k"}]})
    lm = lmeval_plan(
        spec, namespace="team-a", run="r1", endpoint="http://c/v1", model="m", concurrency=4,
        request_timeout_seconds=60, candidate_secret=None,
    )  # fmt: skip
    return build.WorkerJob(name=lmeval_job_name("r1"), component="lmeval", args=lm.args)


#: The worker Jobs of a run, by their container's name (its component).
WORKER_JOBS = {
    "generate": lambda: build.generation_job("r1", plan()),
    "judge": lambda: build.judge_job("r1", judges(), ["judge"]),
    "lmeval": lmeval_worker_job,
}


@pytest.mark.parametrize("component", sorted(WORKER_JOBS))
def test_worker_jobs_fail_at_once_when_the_worker_exits_2_or_3(component: str) -> None:
    # Bad input (2) and an endpoint that failed its check before anything was sent (3) fail
    # the Job at its first pod (Kubernetes' podFailurePolicy), not after backoffLimit retries.
    manifest = job_manifest(WORKER_JOBS[component]())
    spec = manifest["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == component
    assert pod["restartPolicy"] == "Never"  # what Kubernetes requires of a podFailurePolicy
    assert spec["podFailurePolicy"] == {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": container["name"],
                    "operator": "In",
                    "values": [EXIT_USAGE, EXIT_UNREACHABLE],
                },
            }
        ]
    }
    assert [EXIT_USAGE, EXIT_UNREACHABLE] == [2, 3]  # sorted and unique, as Kubernetes wants
    assert spec["backoffLimit"] == 1  # other failures still retried


def test_snapshot_load_job_fails_at_once_when_it_exits_2_or_3() -> None:
    owner = {
        "apiVersion": "kyai.io/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "s", "namespace": "team-a", "uid": "u-2"},
        "spec": {"source": {"url": "https://data.example/rows.jsonl"}},
    }  # fmt: skip
    job = snapshot_load_job(owner, image="kyai:1", image_pull_policy="Never", expect_sha256="d")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["restartPolicy"] == "Never"
    (rule,) = job["spec"]["podFailurePolicy"]["rules"]
    assert rule == {
        "action": "FailJob",
        "onExitCodes": {"containerName": "load", "operator": "In", "values": [2, 3]},
    }
    assert container["name"] == "load"


@pytest.mark.parametrize(
    ("endpoint", "ports"),
    [("https://judge.example:8443/v1", [8443]), ("https://j/v1", [443]), ("http://j/v1", [80])],
)
def test_endpoint_ports(endpoint: str, ports: list[int]) -> None:
    assert build.endpoint_ports(judges(llm=LLMJudgePlan(endpoint=endpoint, model="m"))) == ports
    assert build.endpoint_ports(JudgesPlan()) == []


def test_plan_round_trips_through_status() -> None:
    original = plan(
        candidate_secret=SecretEnv(env="A", secret="b", key="c"),
        judges=judges(
            llm=LLMJudgePlan(
                endpoint="e", model="m", secret=JUDGE_SECRET,
                gateway_token=GatewayToken(audience="kyai-judge-gateway", expiration_seconds=600),
            ),
            graders={"g": grader()}, names={"llm": "platform"},
        ),
    )  # fmt: skip
    status = original.to_status()
    assert json.loads(json.dumps(status)) == status  # plain JSON, as the API server keeps it
    assert status["judges"]["useLlm"] is True and status["resultsClaim"] == "r1-results"
    assert status["kind"] == "generate"
    assert plan_from_status(status) == original


def test_plan_reads_the_earlier_list_form_of_secrets() -> None:
    status = plan().to_status()
    status["candidateSecret"] = ["A", "b", "c"]
    status["judges"]["llm"]["secret"] = ["E", "s", "k"]
    read = plan_from_status(status)
    assert isinstance(read, GeneratePlan)
    assert read.candidate_secret == SecretEnv(env="A", secret="b", key="c")
    assert read.judges.llm is not None
    assert read.judges.llm.secret == SecretEnv(env="E", secret="s", key="k")


def test_plans_that_named_a_secret_to_copy_are_read_without_it() -> None:
    # Written before the gateway: the platform key's Secret to copy. Never copied any more.
    status = plan(judges=judges(llm=LLMJudgePlan(endpoint="e", model="m", secret=JUDGE_SECRET)))
    written = status.to_status()
    written["judges"]["llm"]["copySecretFrom"] = {"namespace": "ns", "name": "k", "key": "api-key"}
    read = plan_from_status(written)
    assert isinstance(read, GeneratePlan) and read.judges.llm is not None
    assert read.judges.llm.secret == JUDGE_SECRET and read.judges.llm.gateway_token is None
    assert "copySecretFrom" not in read.to_status()["judges"]["llm"]


def test_status_plan_is_one_union_told_apart_by_kind() -> None:
    rejudge = RejudgePlan(
        results_claim="src-results", own_claim=False, judges=judges(), generations_path="/r/s"
    )
    lmeval = LmEvalPlan(results_claim="r1-results", own_claim=True, args=["lm-eval"], tasks=["t"])
    for original in (plan(), rejudge, lmeval):
        # Written through the status model: the whole plan, its kind among it, even in a
        # patch of the fields set.
        written = status_patch(EvaluationRunStatus(plan=original))["plan"]
        assert written["kind"] == original.kind
        assert EvaluationRunStatus.model_validate({"plan": written}).plan == original
    with pytest.raises(ValueError, match="kind"):
        plan_from_status({**plan().to_status(), "kind": "sweep"})


def test_plans_written_before_kind_existed_are_read() -> None:
    generating = plan().to_status()
    del generating["kind"]
    assert isinstance(plan_from_status({**generating, "generate": True}), GeneratePlan)
    judged = plan_from_status({**generating, "generate": False})
    assert isinstance(judged, RejudgePlan) and judged.results_claim == "r1-results"
    earlier_lmeval = {
        "lmEval": {"args": ["lm-eval", "--task", "gsm8k"], "tasks": ["gsm8k"]},
        "resultsClaim": "r1-results",
        "ownClaim": True,
    }
    read = EvaluationRunStatus.model_validate({"plan": earlier_lmeval}).plan
    assert isinstance(read, LmEvalPlan)
    assert (read.tasks, read.results_claim, read.own_claim) == (["gsm8k"], "r1-results", True)


def test_judges_model_shown_in_status() -> None:
    assert judges().model == "j"
    assert JudgesPlan(builtin=True).model == "builtin"
    assert JudgesPlan(graders={"first": {}, "second": {}}).model == "first"
    assert JudgesPlan().model == "python"
