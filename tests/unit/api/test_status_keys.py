"""No camelCase status key is spelled outside api/: writers and readers go through the models.

Every camelCase key of a status model (the four kinds' statuses, conditions, progress, the
run plans) is collected from the models themselves; a product module outside ``kyai.api``
that spells one as a string is a finding. The tools beside the product (devcluster, test
doubles) are not scanned. A few keys are also Kubernetes' own (a Pod's conditions, a
volume's ``configMap``): those are allowed where they name the built-in object's field.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel

from kyai import api

PACKAGE = Path(api.__file__).resolve().parents[1]

#: Not the product: tools beside it.
SKIPPED = ("api", "devcluster", "testing")

#: (module, key): a key of a built-in Kubernetes object that a status model spells the same.
BUILT_IN = {
    ("kyai/builders/evaluation.py", "configMap"),  # a Pod's volume source
    ("kyai/builders/lmeval.py", "configMap"),  # a Pod's volume source
    ("kyai/controllers/_pods.py", "lastTransitionTime"),  # a Pod's PodScheduled condition
    ("kyai/controllers/_kueue.py", "lastTransitionTime"),  # a Kueue Workload's conditions
    ("kyai/controllers/_multinode.py", "readyReplicas"),  # a LeaderWorkerSet's status
    ("kyai/gateway/_worker.py", "expirationSeconds"),  # a projected token volume's source
}

STATUS_MODELS: tuple[type[BaseModel], ...] = (
    api.EvaluationRunStatus,
    api.WorkloadStatus,
    api.SnapshotStatus,
    api.EngineArgsSetStatus,
    api.Condition,
    api.Progress,
    api.JudgeResult,
    api.GeneratePlan,
    api.RejudgePlan,
    api.LmEvalPlan,
    api.JudgesPlan,
    api.LLMJudgePlan,
    api.SecretEnv,
    api.GatewayToken,
    api.PackedScores,
    api.ScoreInterval,
    api.ServingStatus,
    api.ServerServing,
    api.NonInferiorityResult,
)


def camel_keys() -> set[str]:
    keys = set()
    for model in STATUS_MODELS:
        for name, field in model.model_fields.items():
            alias = field.alias or name
            if alias != alias.lower():
                keys.add(alias)
    return keys


def scan_all(package: Path, keys: set[str]) -> list[tuple[str, int, str]]:
    """(module, line, key) of every string equal to one of ``keys`` in the product's modules."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).as_posix()
        if relative.split("/")[1] in SKIPPED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in keys:
                found.append((relative, node.lineno, str(node.value)))
    return found


def findings(package: Path = PACKAGE, keys: set[str] | None = None) -> list[str]:
    keys = camel_keys() if keys is None else keys
    return [
        f"{module}:{line}: {key!r}"
        for module, line, key in scan_all(package, keys)
        if (module, key) not in BUILT_IN
    ]


def test_the_keys_come_from_the_models() -> None:
    keys = camel_keys()
    assert {"avgScore", "acceptedSpec", "observedGeneration", "generationJob"} <= keys
    assert {"lastTransitionTime", "resultsClaim", "useLlm", "gatewayToken"} <= keys


def test_no_camel_case_status_key_outside_api() -> None:
    assert findings() == []


def test_every_allowed_built_in_key_is_still_spelled_there() -> None:
    spelled = {(module, key) for module, _, key in (scan_all(PACKAGE, camel_keys()))}
    assert spelled >= BUILT_IN


def test_the_scan_sees_a_status_key_read_by_hand(tmp_path: Path) -> None:
    module = tmp_path / "kyai" / "controllers" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text('def score(run):\n    return run["status"].get("avgScore")\n')
    (tmp_path / "kyai" / "api").mkdir()
    (tmp_path / "kyai" / "api" / "y.py").write_text('KEY = "avgScore"\n')  # api/ may
    assert findings(tmp_path / "kyai") == ["kyai/controllers/x.py:2: 'avgScore'"]
