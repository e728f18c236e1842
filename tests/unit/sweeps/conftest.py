"""A namespace as the API server would list it, for the sweep's pure functions.

``Namespace`` holds Workloads, EngineArgsSets, Snapshots, the sweep's runs and derived
Workloads as dicts shaped like the API's, carries out a :class:`kyai.sweeps.Plan` as the
controller would (creates get a uid, a create of an existing name is refused as a 409 would
be), and lets a test finish runs with the status a worker writes.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable
from typing import Any

import pytest

from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.sweeps import Expansion, Plan, expand, plan, sweep_status

NAMESPACE = "evals"


def sweep_body(name: str = "pick", uid: str = "sweep-uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1},
    }


def sweep_spec(**fields: Any) -> EvaluationSweepSpec:
    return EvaluationSweepSpec.model_validate(fields)


def named(*names: str) -> list[dict[str, str]]:
    return [{"name": name} for name in names]


class AlreadyExists(Exception):
    """What a create of a taken name gets (HTTP 409)."""


class Namespace:
    """One namespace's objects, and one sweep in it."""

    def __init__(self, sweep: dict[str, Any] | None = None) -> None:
        self.sweep = sweep or sweep_body()
        self.workloads: dict[str, dict[str, Any]] = {}
        self.engine_args_sets: dict[str, dict[str, Any]] = {}
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        #: Derived Workloads whose deletion is slow (pods terminating) stay with a
        #: deletionTimestamp until :meth:`gone`.
        self.slow_deletion = False
        self.created_runs: list[str] = []
        self.deleted_runs: list[str] = []
        self.created_workloads: list[str] = []
        self.deleted_workloads: list[str] = []
        self._uids = itertools.count(1)

    # -- objects ------------------------------------------------------------------------------

    def add_workload(
        self,
        name: str,
        *,
        endpoint: bool = False,
        framework: str = "vllm",
        labels: dict[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": f"org/{name}", **spec}
        if endpoint:
            body["endpoint"] = {"url": f"http://{name}.example/v1"}
            body.setdefault("framework", framework)
        else:
            body["framework"] = framework
        self.workloads[name] = self._object("Workload", name, body, labels)
        return self.workloads[name]

    def add_engine_args_set(self, name: str, *, framework: str = "vllm") -> None:
        spec = {"framework": framework, "args": {"max-num-seqs": 8}}
        self.engine_args_sets[name] = self._object("EngineArgsSet", name, spec, None)

    def add_snapshot(self, name: str, *, labels: dict[str, str] | None = None) -> None:
        self.snapshots[name] = self._object("Snapshot", name, {"builtin": "mmlu-pro"}, labels)

    def _object(
        self, kind: str, name: str, spec: dict[str, Any], labels: dict[str, str] | None
    ) -> dict[str, Any]:
        return {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": f"uid-{next(self._uids)}",
                "labels": dict(labels or {}),
            },
            "spec": spec,
        }

    # -- the sweep's functions on this namespace ------------------------------------------------

    def expand(self, spec: EvaluationSweepSpec) -> Expansion:
        return expand(
            self.sweep["metadata"]["name"],
            spec,
            workloads=list(self.workloads.values()),
            engine_args_sets=list(self.engine_args_sets.values()),
            snapshots=list(self.snapshots.values()),
        )

    def derived(self) -> list[dict[str, Any]]:
        """The Workloads labelled with the sweep (what the controller lists)."""
        name = self.sweep["metadata"]["name"]
        return [
            w
            for w in self.workloads.values()
            if w["metadata"]["labels"].get("kyai.io/sweep") == name
        ]

    def sweep_runs(self) -> list[dict[str, Any]]:
        name = self.sweep["metadata"]["name"]
        return [
            r for r in self.runs.values() if r["metadata"]["labels"].get("kyai.io/sweep") == name
        ]

    def plan(self, spec: EvaluationSweepSpec) -> Plan:
        return plan(
            self.sweep, spec, self.expand(spec), runs=self.sweep_runs(), workloads=self.derived()
        )

    def step(self, spec: EvaluationSweepSpec) -> Plan:
        """Decide and carry the plan out, as the controller does (Workloads first)."""
        decided = self.plan(spec)
        for manifest in decided.create_workloads:
            self.create(self.workloads, manifest)
            self.created_workloads.append(manifest["metadata"]["name"])
        for manifest in decided.create_runs:
            self.create(self.runs, manifest)
            self.created_runs.append(manifest["metadata"]["name"])
        for name in decided.delete_runs:
            del self.runs[name]
            self.deleted_runs.append(name)
        for name in decided.delete_workloads:
            self.deleted_workloads.append(name)
            if self.slow_deletion:
                self.workloads[name]["metadata"]["deletionTimestamp"] = "2026-01-31T12:00:00Z"
            else:
                del self.workloads[name]
        return decided

    def status(self, spec: EvaluationSweepSpec, **kwargs: Any) -> Any:
        return sweep_status(self.sweep, spec, self.expand(spec), self.sweep_runs(), **kwargs)

    def create(self, store: dict[str, dict[str, Any]], manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        if name in store:
            raise AlreadyExists(name)
        body = copy.deepcopy(manifest)
        body["metadata"]["uid"] = f"uid-{next(self._uids)}"
        store[name] = body

    def gone(self, name: str) -> None:
        """A Workload being deleted is gone (its pods terminated)."""
        del self.workloads[name]

    # -- runs -----------------------------------------------------------------------------------

    def unfinished(self) -> list[str]:
        return [
            name
            for name, run in self.runs.items()
            if (run.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]

    def run_of(self, workload: str, snapshot: str, engine_args_set: str | None = None) -> str:
        for name, run in self.runs.items():
            notes = run["metadata"]["annotations"]
            if (
                notes["kyai.io/sweep-workload"] == workload
                and notes["kyai.io/sweep-snapshot"] == snapshot
                and notes.get("kyai.io/sweep-engine-args-set") == engine_args_set
            ):
                return name
        raise KeyError((workload, snapshot, engine_args_set))

    def set_phase(self, name: str, phase: str) -> None:
        self.runs[name]["status"] = {"phase": phase}

    def succeed(
        self,
        name: str,
        scores: Iterable[float],
        *,
        key: str = "key-1",
        latency: float | None = 100.0,
        keep_scores: bool = True,
        **status: Any,
    ) -> None:
        """The status a worker writes when the run succeeded (avgScore from the scores)."""
        values = [float(score) for score in scores]
        self.runs[name]["status"] = {
            "phase": "Succeeded",
            "avgScore": sum(values) / len(values),
            "avgLatencyMs": latency,
            "questions": len(values),
            "errorCount": 0,
            "comparisonKey": key,
            "scores": values if keep_scores else None,
            "workload": self.runs[name]["spec"]["workloadRef"]["name"],
            "completedAt": "2026-01-31T12:00:00Z",
            **status,
        }

    def fail(self, name: str) -> None:
        self.runs[name]["status"] = {"phase": "Failed", "message": "the generation Job failed"}


@pytest.fixture
def ns() -> Namespace:
    return Namespace()
