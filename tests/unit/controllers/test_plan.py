"""Plan resolution of an EvaluationRun, against objects held in memory (no API server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kyai.api import EvaluationRunSpec, GatewayToken, GeneratePlan, RejudgePlan, SecretEnv
from kyai.controllers import _conditions as c
from kyai.controllers._services import Services
from kyai.controllers.kinds import resolve as resolve_plan
from kyai.controllers.runkind import Invalid, Waiting
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

NS = "team-a"


class MemoryKube:
    """The three reads plan resolution makes, from a dict of objects."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {
            (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
            for o in objects
        }
        self.reads: list[tuple[str, str, str]] = []

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((kind, namespace, name))
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
        "status": status,
    }


WORKLOAD = obj(
    "Workload",
    "cand",
    {"framework": "vllm", "model": "Qwen/Qwen3-8B",
     "endpoint": {"url": "http://c/v1", "apiKeySecretRef": {"name": "cand-key"}}},
    {"phase": "Ready", "endpoint": "http://c/v1", "servedModelName": "qwen", "maxModelLen": 4096},
)  # fmt: skip
SNAPSHOT = obj(
    "Snapshot",
    "caps",
    {"builtin": "mmlu-pro"},
    {"phase": "Ready", "dataset": "mmlu-pro", "version": "v1", "sha256": "ab" * 32,
     "rows": 12, "configMap": "caps-rows"},
)  # fmt: skip
RUN = obj("EvaluationRun", "r1", {}, {})


def services(*objects: dict[str, Any], **settings: Any) -> Services:
    return Services(MemoryKube(*objects), OperatorSettings(**settings), RunMetrics())  # type: ignore[arg-type]


def spec(**fields: Any) -> EvaluationRunSpec:
    base: dict[str, Any] = {
        "workloadRef": {"name": "cand"},
        "snapshotRef": {"name": "caps"},
        "judge": {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge"}},
    }
    return EvaluationRunSpec.model_validate({**base, **fields})


async def test_generating_run_plan_and_facts() -> None:
    resolved = await resolve_plan(services(WORKLOAD, SNAPSHOT), RUN, spec())
    plan, facts = resolved.plan, resolved.facts
    assert isinstance(plan, GeneratePlan) and plan.own_claim
    assert plan.results_claim == "r1-results" and plan.generations_path == "/results/r1"
    assert plan.candidate_secret == SecretEnv(
        env="KYAI_CANDIDATE_API_KEY", secret="cand-key", key="api-key"
    )
    assert plan.snapshot_config_map == "caps-rows"
    args = plan.generation_args
    assert args[args.index("--model") + 1] == "qwen"
    assert args[args.index("--context-window") + 1] == "4096"
    assert plan.judges.use_llm and plan.judges.llm is not None
    assert (plan.judges.llm.endpoint, plan.judges.llm.model) == ("http://j/v1", "judge")
    assert plan.judges.names == {"llm": "llm"}
    assert facts.model_dump(by_alias=True, exclude_unset=True) == {
        "workload": WORKLOAD["metadata"]["name"], "snapshot": SNAPSHOT["metadata"]["name"],
        "model": "qwen", "framework": "vllm", "dataset": "mmlu-pro", "datasetVersion": "v1",
        "datasetSha256": "ab" * 32, "resultsClaim": "r1-results", "resultsPath": "/results/r1",
        "questions": 12, "judgeModel": "judge",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("objects", "reason"),
    [
        ((), c.WORKLOAD_NOT_FOUND),
        ((obj("Workload", "cand", {}, {"phase": "Deploying"}),), c.WORKLOAD_NOT_READY),
        ((WORKLOAD,), c.SNAPSHOT_NOT_FOUND),
        ((WORKLOAD, obj("Snapshot", "caps", {}, {"phase": "Resolving"})), c.SNAPSHOT_NOT_READY),
    ],
)
async def test_waits_for_references(objects: tuple[dict[str, Any], ...], reason: str) -> None:
    with pytest.raises(Waiting) as caught:
        await resolve_plan(services(*objects), RUN, spec())
    assert caught.value.reason == reason
    assert NS in caught.value.message or "not Ready" in caught.value.message


async def test_judges_keep_their_spec_names() -> None:
    judges = [
        {"name": "platform", "type": "llm", "llm": {"endpoint": "http://j/v1", "model": "j"}},
        {"name": "verify", "type": "builtin"},
        {"name": "llm-ish", "type": "python",
         "python": {"source": "def grade(sample, item):\n    return 1.0\n"}},
    ]  # fmt: skip
    resolved = await resolve_plan(
        services(WORKLOAD, SNAPSHOT), RUN, spec(judge=None, judges=judges)
    )
    judges_plan = resolved.plan.judges
    assert judges_plan.names == {"llm": "platform", "builtin": "verify"}
    assert list(judges_plan.graders) == ["llm-ish"]
    assert judges_plan.builtin and judges_plan.use_llm


async def test_two_llm_judges_are_invalid() -> None:
    judges = [
        {"name": "a", "type": "llm", "llm": {"endpoint": "http://j/v1", "model": "j"}},
        {"name": "b", "type": "llm", "llm": {"endpoint": "http://j/v1", "model": "j"}},
    ]
    with pytest.raises(Invalid, match="at most one judge of type llm"):
        await resolve_plan(services(WORKLOAD, SNAPSHOT), RUN, spec(judge=None, judges=judges))


async def test_grader_source_config_map_is_waited_for() -> None:
    judges = [{"name": "g", "type": "python",
               "python": {"configMapRef": {"name": "src", "key": "g.py"}}}]  # fmt: skip
    with pytest.raises(Waiting) as caught:
        await resolve_plan(services(WORKLOAD, SNAPSHOT), RUN, spec(judge=None, judges=judges))
    assert caught.value.reason == c.JUDGE_NOT_READY


async def test_no_judge_and_no_default_is_invalid() -> None:
    with pytest.raises(Invalid) as caught:
        await resolve_plan(services(WORKLOAD, SNAPSHOT), RUN, spec(judge=None))
    assert caught.value.reason == c.JUDGE_NOT_CONFIGURED


PLATFORM = {"default_judge_endpoint": "https://platform/v1", "default_judge_model": "big"}
GATEWAY_URL = "http://kyai-judge-gateway.kyai-system.svc:8080/v1"
OPT_IN = '{"matchLabels": {"kyai.io/default-judge": "enabled"}}'


def namespace(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": labels}}


async def test_default_judge_behind_the_gateway_holds_no_secret() -> None:
    svc = services(
        WORKLOAD, SNAPSHOT, **PLATFORM, default_judge_gateway=GATEWAY_URL,
        default_judge_gateway_audience="aud-x", default_judge_gateway_token_seconds=900,
        default_judge_secret_namespace="kyai-system", default_judge_secret_name="judge-key",
    )  # fmt: skip
    resolved = await resolve_plan(svc, RUN, spec(judge=None))
    llm = resolved.plan.judges.llm
    assert llm is not None
    assert (llm.endpoint, llm.model, llm.secret) == (GATEWAY_URL, "big", None)
    assert llm.gateway_token == GatewayToken(audience="aud-x", expiration_seconds=900)
    assert resolved.facts.judge_model == "big"
    # Nothing read but the run's references: no Secret, and no Namespace without a selector.
    kube = svc.kube
    assert isinstance(kube, MemoryKube)
    assert {kind for kind, _, _ in kube.reads} <= {"Workload", "Snapshot"}


async def test_default_judge_key_of_another_namespace_is_never_copied() -> None:
    svc = services(
        WORKLOAD, SNAPSHOT, **PLATFORM,
        default_judge_secret_namespace="kyai-system", default_judge_secret_name="judge-key",
    )  # fmt: skip
    with pytest.raises(Waiting) as caught:
        await resolve_plan(svc, RUN, spec(judge=None))
    assert caught.value.reason == c.DEFAULT_JUDGE_NEEDS_GATEWAY
    assert caught.value.reason in c.STALLING  # Stalled at once
    message = caught.value.message
    assert "never copied into a tenant's namespace" in message
    assert "KYAI_DEFAULT_JUDGE_GATEWAY" in message and "kyai-system" in message


async def test_default_judge_key_of_the_runs_own_namespace_still_works() -> None:
    for source in (NS, None):
        svc = services(
            WORKLOAD, SNAPSHOT, **PLATFORM,
            default_judge_secret_namespace=source, default_judge_secret_name="judge-key",
        )  # fmt: skip
        llm = (await resolve_plan(svc, RUN, spec(judge=None))).plan.judges.llm
        assert llm is not None and llm.gateway_token is None
        assert llm.endpoint == "https://platform/v1"
        assert llm.secret == SecretEnv(env="KYAI_JUDGE_API_KEY", secret="judge-key", key="api-key")


@pytest.mark.parametrize("gateway", [GATEWAY_URL, None])
async def test_a_namespace_the_selector_leaves_out_is_stalled(gateway: str | None) -> None:
    svc = services(
        WORKLOAD, SNAPSHOT, namespace({"team": "a"}), **PLATFORM, default_judge_gateway=gateway,
        default_judge_namespace_selector=OPT_IN,
    )  # fmt: skip
    with pytest.raises(Waiting) as caught:
        await resolve_plan(svc, RUN, spec(judge=None))
    assert caught.value.reason == c.DEFAULT_JUDGE_NOT_ALLOWED
    assert caught.value.reason in c.STALLING
    message = caught.value.message
    assert "defaultJudge.namespaceSelector" in message and NS in message
    assert "kyai.io/default-judge=enabled" in message


async def test_a_selected_namespace_uses_the_default_judge() -> None:
    svc = services(
        WORKLOAD, SNAPSHOT, namespace({"kyai.io/default-judge": "enabled"}), **PLATFORM,
        default_judge_gateway=GATEWAY_URL, default_judge_namespace_selector=OPT_IN,
    )  # fmt: skip
    llm = (await resolve_plan(svc, RUN, spec(judge=None))).plan.judges.llm
    assert llm is not None and llm.endpoint == GATEWAY_URL


async def test_a_run_naming_its_judge_ignores_the_selector() -> None:
    svc = services(
        WORKLOAD, SNAPSHOT, namespace({}), **PLATFORM, default_judge_gateway=GATEWAY_URL,
        default_judge_namespace_selector=OPT_IN,
    )  # fmt: skip
    llm = (await resolve_plan(svc, RUN, spec())).plan.judges.llm
    assert llm is not None and llm.endpoint == "http://j/v1" and llm.gateway_token is None


async def test_judge_workload() -> None:
    judge_wl = obj(
        "Workload", "big", {"framework": "vllm", "model": "m"},
        {"phase": "Ready", "endpoint": "http://b/v1"},
    )  # fmt: skip
    run_spec = spec(judge={"type": "llm", "workloadRef": {"name": "big"}})
    llm = (
        await resolve_plan(services(WORKLOAD, SNAPSHOT, judge_wl), RUN, run_spec)
    ).plan.judges.llm
    assert llm is not None and (llm.endpoint, llm.model, llm.secret) == ("http://b/v1", "m", None)


async def test_rejudge_reads_the_source_run() -> None:
    source = obj(
        "EvaluationRun", "src", {},
        {"phase": "Succeeded", "resultsClaim": "src-results", "resultsPath": "/results/src",
         "model": "qwen", "dataset": "mmlu-pro", "datasetVersion": "v1"},
    )  # fmt: skip
    run_spec = spec(workloadRef=None, snapshotRef=None, generationFrom={"runRef": {"name": "src"}})
    resolved = await resolve_plan(services(source), RUN, run_spec)
    plan = resolved.plan
    assert isinstance(plan, RejudgePlan) and not plan.own_claim
    assert (plan.results_claim, plan.generations_path) == ("src-results", "/results/src")
    assert resolved.facts.model_dump(by_alias=True, exclude_unset=True) == {
        "resultsClaim": "src-results", "resultsPath": "/results/r1", "model": "qwen",
        "dataset": "mmlu-pro", "datasetVersion": "v1", "judgeModel": "judge",
    }  # fmt: skip


async def test_rejudge_waits_for_the_source_run() -> None:
    run_spec = spec(workloadRef=None, snapshotRef=None, generationFrom={"runRef": {"name": "src"}})
    with pytest.raises(Waiting) as caught:
        await resolve_plan(services(), RUN, run_spec)
    assert caught.value.reason == c.SOURCE_RUN_NOT_FOUND
    running = obj("EvaluationRun", "src", {}, {"phase": "Judging"})
    with pytest.raises(Waiting) as caught:
        await resolve_plan(services(running), RUN, run_spec)
    assert caught.value.reason == c.SOURCE_RUN_NOT_READY
    assert "phase Judging" in caught.value.message


@pytest.mark.parametrize(
    ("dataset", "version"), [("capitals", "custom"), ("quantum-mechanics", "v1")]
)
async def test_a_builtin_judge_without_a_grader_names_the_runs_fields(
    dataset: str, version: str
) -> None:
    # A resource's user has no CLI flags to pass: the message names the spec's fields.
    snapshot = copy.deepcopy(SNAPSHOT)
    snapshot["status"].update(dataset=dataset, version=version)
    with pytest.raises(Invalid) as caught:
        await resolve_plan(services(WORKLOAD, snapshot), RUN, spec(judge={"type": "builtin"}))
    message = caught.value.message
    assert message.startswith("judge type builtin: ") and "spec.judge.type: llm" in message
    assert "--" not in message, message
    if version == "custom":
        assert "spec.judge.type: python with spec.judge.python" in message
