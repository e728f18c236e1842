"""spec.preprocessors and spec.embeddingModel reach the workers (seed 001, issue 13)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kyai.api import EvaluationRunSpec
from kyai.builders import evaluation as build
from kyai.builders.worker_args import GRADERS_MOUNT, PREPROCESS_KEY
from kyai.controllers._services import Services
from kyai.controllers.kinds import resolve as resolve_plan
from kyai.controllers.runkind import Invalid, Waiting
from kyai.graders import PythonPreprocessor
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

NS = "team-a"
SOURCE = "def transform(row):\n    return {**row, 'instruction': row['instruction'].upper()}\n"


class MemoryKube:
    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {
            (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects
        }

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None


def obj(kind: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
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
    "Snapshot", "caps", {"source": {"rows": []}},
    {"phase": "Ready", "dataset": "caps", "version": "custom", "sha256": "ab" * 32, "rows": 2,
     "configMap": "caps-rows"},
)  # fmt: skip
CODE = obj("ConfigMap", "prep", {}, {})
CODE["data"] = {"prep.py": SOURCE}
RUN = obj("EvaluationRun", "r1", {}, {})
RUN["apiVersion"] = "kyai.io/v1alpha1"
RUN["metadata"]["uid"] = "0000-1111"


def services(*objects: dict[str, Any]) -> Services:
    return Services(MemoryKube(*objects), OperatorSettings(), RunMetrics())  # type: ignore[arg-type]


def spec(**fields: Any) -> EvaluationRunSpec:
    base = {
        "workloadRef": {"name": "cand"},
        "snapshotRef": {"name": "caps"},
        "judge": {"type": "llm", "llm": {"endpoint": "http://j/v1", "model": "judge"}},
    }
    return EvaluationRunSpec.model_validate({**base, **fields})


async def test_preprocessor_from_a_config_map_reaches_the_generation_job() -> None:
    pre = [{"configMapRef": {"name": "prep", "key": "prep.py"}, "timeoutSeconds": 30}]
    resolved = await resolve_plan(services(WORKLOAD, SNAPSHOT, CODE), RUN, spec(preprocessors=pre))
    plan = resolved.plan
    assert plan.preprocess == {
        "preprocess": {
            "type": "python",
            "contract": "sample",
            "source": SOURCE,
            "timeout_seconds": 30,
        }
    }
    args = plan.generation_args
    assert args[args.index("--preprocess") + 1] == f"{GRADERS_MOUNT}/{PREPROCESS_KEY}"
    job = build.worker_job(
        RUN, build.generation_job("r1", plan), image="i", image_pull_policy="Never",
        results_claim="c", backoff_limit=1, active_deadline_seconds=None,
    )  # fmt: skip
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "graders", "mountPath": GRADERS_MOUNT, "readOnly": True} in container[
        "volumeMounts"
    ]
    config_map = build.graders_config_map(RUN, plan.judges.graders, plan.preprocess)
    # The worker loads exactly what the ConfigMap holds.
    declaration = json.loads(config_map["data"][PREPROCESS_KEY])
    assert PythonPreprocessor.from_declaration(declaration).identity["type"] == "python"


async def test_no_preprocessor_no_flag_and_no_mount() -> None:
    plan = (await resolve_plan(services(WORKLOAD, SNAPSHOT), RUN, spec())).plan
    assert plan.preprocess is None and "--preprocess" not in plan.generation_args
    assert not build.generation_job("r1", plan).extra_mounts


async def test_bad_or_missing_preprocessor_says_why() -> None:
    with pytest.raises(Invalid, match=r"spec\.preprocessors\[0\].*transform"):
        await resolve_plan(
            services(WORKLOAD, SNAPSHOT),
            RUN,
            spec(preprocessors=[{"source": "def other(row):\n    return row\n"}]),
        )
    with pytest.raises(Waiting, match=r"ConfigMap prep, key missing\.py"):
        await resolve_plan(
            services(WORKLOAD, SNAPSHOT),
            RUN,
            spec(preprocessors=[{"configMapRef": {"name": "prep", "key": "missing.py"}}]),
        )
