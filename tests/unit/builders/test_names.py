"""Every generated child name fits its kind's limit, even for a 253-character run name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from kyai.api import WorkloadSpec
from kyai.api.plan import GeneratePlan, JudgesPlan, LLMJudgePlan, SecretEnv
from kyai.builders import LABEL_NAME_MAX, SUBDOMAIN_MAX, child_name
from kyai.builders import evaluation as build
from kyai.builders.snapshot import snapshot_config_map
from kyai.builders.workload import workload_deployment, workload_service
from kyai.controllers.handlers import owning_run
from kyai.settings import OperatorSettings

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

#: Kinds whose name may have at most 63 characters (Jobs: the pods' ``job-name`` label).
SHORT_KINDS = {"Job", "Service"}
#: Kinds whose name is an RFC 1035 label (no dots).
LABEL_KINDS = {"Service"}

WORKLOAD = {"framework": "vllm", "model": "Qwen/Qwen3-8B"}

LONG_NAMES = [
    "r" * 253,
    "a.b-" * 63 + "c",
    "x" * 200 + "-" + "y" * 52,
    "z" * 55,  # the first length whose "-generate" Job name went past 63
]


def owner(name: str, kind: str = "EvaluationRun") -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "team-a", "uid": "u-1"},
    }


def run_children(run: str) -> list[dict[str, Any]]:
    """Every object the operator creates for a run named ``run``."""
    body = owner(run)
    secret = SecretEnv(env="KYAI_JUDGE_API_KEY", secret="judge-key", key="k")
    judges = JudgesPlan(
        llm=LLMJudgePlan(endpoint="https://judge:8443/v1", model="j", secret=secret),
        use_llm=True,
        graders={"g": {"grader": {"type": "python", "contract": "sample", "source": "x"}}},
    )
    plan = GeneratePlan(
        generation_args=["generate"],
        results_claim=build.results_claim_name(run),
        own_claim=True,
        judges=judges,
        generations_path=f"/results/{run}",
        snapshot_config_map=child_name("snap", "-rows"),
    )
    jobs = [
        build.worker_job(
            body,
            job,
            image="kyai:1",
            image_pull_policy="Never",
            results_claim=plan.results_claim,
            backoff_limit=1,
            active_deadline_seconds=None,
        )
        for job in (build.generation_job(run, plan), build.judge_job(run, judges, ["judge"]))
    ]
    return [
        *jobs,
        build.results_claim(body, size="1Gi", storage_class=None),
        *build.worker_rbac(body),
        build.graders_config_map(body, judges.graders),
        build.judge_network_policy(body, [8443]),
    ]


def label_maps(obj: dict[str, Any]) -> Iterator[dict[str, str]]:
    yield obj["metadata"].get("labels") or {}
    template = (obj.get("spec") or {}).get("template") or {}
    yield (template.get("metadata") or {}).get("labels") or {}
    selector = (obj.get("spec") or {}).get("selector") or {}
    yield selector.get("matchLabels", selector) if isinstance(selector, dict) else {}
    yield ((obj.get("spec") or {}).get("podSelector") or {}).get("matchLabels") or {}


def assert_fits(obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    kind = obj["kind"]
    limit = LABEL_NAME_MAX if kind in SHORT_KINDS else SUBDOMAIN_MAX
    assert len(name) <= limit, (kind, len(name))
    assert (DNS_LABEL if kind in LABEL_KINDS else SUBDOMAIN).match(name), (kind, name)
    for labels in label_maps(obj):
        for key, value in labels.items():
            assert len(value) <= LABEL_NAME_MAX and LABEL_VALUE.match(value), (kind, key, value)


@pytest.mark.parametrize("run", LONG_NAMES, ids=lambda name: f"len{len(name)}")
def test_every_run_child_fits(run: str) -> None:
    children = run_children(run)
    assert {obj["kind"] for obj in children} >= {
        "Job", "PersistentVolumeClaim", "ServiceAccount", "Role", "RoleBinding", "ConfigMap",
        "NetworkPolicy",
    }  # fmt: skip
    for obj in children:
        assert_fits(obj)
        # The run is found again from any child, whatever its labels were cut to.
        assert owning_run(obj["metadata"]) == run
    (role_binding,) = [obj for obj in children if obj["kind"] == "RoleBinding"]
    assert role_binding["roleRef"]["name"] == role_binding["subjects"][0]["name"]
    jobs = [obj for obj in children if obj["kind"] == "Job"]
    assert jobs[0]["spec"]["template"]["spec"]["serviceAccountName"] == build.worker_name(run)


@pytest.mark.parametrize("name", LONG_NAMES, ids=lambda name: f"len{len(name)}")
def test_snapshot_and_workload_children_fit(name: str) -> None:
    config_map = snapshot_config_map(owner(name, "Snapshot"), {"snapshot.json": "{}"}, {})
    assert_fits(config_map)
    spec = WorkloadSpec.model_validate(WORKLOAD)
    workload = owner(name, "Workload")
    assert_fits(workload_deployment(name, "team-a", spec, None, OperatorSettings(), workload))
    assert_fits(workload_service(name, "team-a", spec, workload))


def test_names_that_fit_are_unchanged() -> None:
    assert build.generation_job_name("r1") == "r1-generate"
    assert build.judge_job_name("x" * 54) == "x" * 54 + "-judge"
    assert child_name("a" * 244, "-results") == "a" * 244 + "-results"


def test_long_names_stay_distinct_and_keep_their_role() -> None:
    first, second = "p" * 100 + "-one", "p" * 100 + "-two"
    names = {build.generation_job_name(first), build.generation_job_name(second)}
    assert len(names) == 2
    assert all(name.endswith("-generate") and len(name) == 63 for name in names)
    assert build.generation_job_name(first) != build.judge_job_name(first)
    # Deterministic: a restarted operator finds the Job it created.
    assert build.generation_job_name(first) == build.generation_job_name(first)
