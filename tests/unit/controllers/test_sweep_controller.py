"""The EvaluationSweep controller: what one reconcile does, and which events call for one.

The reconciles run against an in-memory API (no I/O) that assigns uids, resourceVersions and
creation times as an API server does and records every call in order; the sweep's pure
decisions are :mod:`kyai.sweeps`' own (tests/unit/sweeps), here they are carried out.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kyai.api import EvaluationSweepStatus
from kyai.constants import LABEL_SWEEP
from kyai.controllers import _conditions as c
from kyai.controllers._kube import KubeError
from kyai.controllers._result import DONE, Result
from kyai.controllers._services import Services
from kyai.controllers.evaluationsweep import (
    Sweeps,
    cares_about,
    child_fingerprint,
    reconcile_sweep,
    wants_reconcile,
)
from kyai.metrics import RunMetrics, SweepMetrics
from kyai.settings import OperatorSettings
from kyai.sweeps import read_table, table_config_map_name

NS = "evals"
GROUP = "kyai.io/v1alpha1"


def stamp(ago: float = 0.0) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


class MemoryKube:
    """Enough of the API server for a sweep's reconcile; every call recorded in order."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []
        #: Kinds whose creates the API refuses, with the HTTP status.
        self.refuse: dict[str, int] = {}
        self._versions = itertools.count(1)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        meta.setdefault("uid", f"uid-{obj['kind']}-{meta['name']}")
        meta.setdefault("creationTimestamp", stamp())
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return obj

    def of(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: obj for (k, _, name), obj in self.objects.items() if k == kind}

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def list(
        self, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        self.calls.append(("list", kind, label_selector or ""))
        wanted = dict(p.split("=", 1) for p in (label_selector or "").split(",") if "=" in p)
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in self.objects.items()
            if k == kind and namespace in (None, ns)
            and all((obj["metadata"].get("labels") or {}).get(key) == value
                    for key, value in wanted.items())
        ]  # fmt: skip

    async def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        meta = obj["metadata"]
        self.calls.append(("create", obj["kind"], meta["name"]))
        if obj["kind"] in self.refuse:
            code = self.refuse[obj["kind"]]
            raise KubeError(f"POST {obj['kind']}: HTTP {code}: refused", status=code)
        existing = await self.get(obj["kind"], meta["namespace"], meta["name"])
        if existing is not None:
            return existing, False
        return copy.deepcopy(self.put(copy.deepcopy(obj))), True

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self.calls.append(("replace", obj["kind"], meta["name"]))
        current = self.objects[(obj["kind"], meta["namespace"], meta["name"])]
        assert meta["resourceVersion"] == current["metadata"]["resourceVersion"]
        replaced = copy.deepcopy(obj)
        replaced["metadata"]["uid"] = current["metadata"]["uid"]
        return copy.deepcopy(self.put(replaced))

    async def patch(
        self, kind: str, namespace: str, name: str, body: Any, *, subresource: str = ""
    ) -> dict[str, Any]:
        self.calls.append(("patch", kind, name))
        assert subresource == "status"
        obj = self.objects[(kind, namespace, name)]
        status = dict(obj.get("status") or {})
        for key, value in body["status"].items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        obj["status"] = status
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        self.calls.append(("delete", kind, name))
        self.objects.pop((kind, namespace, name), None)

    def writes(self) -> list[tuple[str, str, str]]:
        return [call for call in self.calls if call[0] != "list"]


def api_object(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, "generation": 1, **meta},
        "spec": spec,
    }


def endpoint(name: str) -> dict[str, Any]:
    return api_object("Workload", name, {"framework": "vllm", "model": name,
                                         "endpoint": {"url": "http://e.example/v1"}})  # fmt: skip


def served(name: str, framework: str = "vllm") -> dict[str, Any]:
    return api_object("Workload", name, {"framework": framework, "model": f"org/{name}"})


def engine_args(name: str, framework: str = "vllm") -> dict[str, Any]:
    return api_object("EngineArgsSet", name, {"framework": framework, "args": {}})


def snapshot(name: str) -> dict[str, Any]:
    return api_object("Snapshot", name, {"builtin": "mmlu-pro"})


def sweep_object(**spec: Any) -> dict[str, Any]:
    body = {"snapshots": [{"name": "s1"}], **spec}
    return api_object("EvaluationSweep", "pick", body)


@pytest.fixture
def kube() -> MemoryKube:
    return MemoryKube()


def services(kube: MemoryKube, **settings: Any) -> Services:
    return Services(kube, OperatorSettings(**settings), RunMetrics())  # type: ignore[arg-type]


def status(kube: MemoryKube) -> EvaluationSweepStatus:
    return EvaluationSweepStatus.model_validate(
        kube.objects["EvaluationSweep", NS, "pick"]["status"]
    )


def condition(kube: MemoryKube, type_: str) -> tuple[str, str]:
    found = status(kube).condition(type_)
    assert found is not None, type_
    return found.status, found.reason


def finish(
    kube: MemoryKube, run: str, phase: str = "Succeeded", scores: list[float] | None = None
) -> None:
    scores = scores if scores is not None else [1.0, 0.0, 1.0, 1.0]
    kube.objects["EvaluationRun", NS, run]["status"] = {
        "phase": phase,
        "avgScore": sum(scores) / len(scores),
        "scores": scores,
        "questions": len(scores),
        "comparisonKey": "key-1",
    }


async def reconcile(kube: MemoryKube, **settings: Any) -> Any:
    return await reconcile_sweep(services(kube, **settings), NS, "pick", tables={})


# -- what one reconcile does --------------------------------------------------------------------


async def test_derived_workloads_are_made_before_runs_within_parallelism(kube: MemoryKube) -> None:
    for obj in (served("qwen"), engine_args("a"), engine_args("b"), snapshot("s1")):
        kube.put(obj)
    kube.put(
        sweep_object(workloads=[{"name": "qwen"}], engineArgsSets=[{"name": "a"}, {"name": "b"}])
    )
    outcome = await reconcile(kube)
    (workload,) = outcome.created_workloads
    (run,) = outcome.created_runs
    writes = kube.writes()
    assert writes.index(("create", "Workload", workload)) < writes.index(
        ("create", "EvaluationRun", run)
    )
    derived = kube.of("Workload")[workload]
    assert derived["spec"]["engineArgsSetRef"] == {"name": "a"}
    assert derived["metadata"]["labels"][LABEL_SWEEP] == "pick"
    assert kube.of("EvaluationRun")[run]["spec"]["workloadRef"] == {"name": workload}
    written = status(kube)
    assert written.phase == "Running" and written.observed_generation == 1
    assert written.cells is not None and (written.cells.running, written.cells.pending) == (1, 1)
    assert condition(kube, c.READY) == ("False", "CellsRunning")
    assert condition(kube, c.RECONCILING) == ("True", "CellsRunning")
    assert condition(kube, c.STALLED)[0] == "False"
    # The runs are read from the API server, by the sweep's label.
    assert ("list", "EvaluationRun", f"{LABEL_SWEEP}=pick") in kube.calls


async def test_a_run_just_made_holds_its_place_before_any_watch_saw_it(kube: MemoryKube) -> None:
    for name in ("a", "b", "c"):
        kube.put(endpoint(name))
    kube.put(snapshot("s1"))
    kube.put(sweep_object(workloads=[{"name": n} for n in "abc"], parallelism=2))
    first = await reconcile(kube)
    assert len(first.created_runs) == 2
    # The runs have no status yet (as right after their create): nothing more starts, and
    # the status write is skipped as nothing changed.
    before = len(kube.writes())
    second = await reconcile(kube)
    assert second.created_runs == [] and len(kube.of("EvaluationRun")) == 2
    assert kube.writes()[before:] == []
    finish(kube, first.created_runs[0])
    third = await reconcile(kube)
    assert len(third.created_runs) == 1 and len(kube.of("EvaluationRun")) == 3


async def test_nothing_changed_writes_nothing(kube: MemoryKube) -> None:
    kube.put(endpoint("a"))
    kube.put(snapshot("s1"))
    kube.put(sweep_object(workloads=[{"name": "a"}]))
    (run,) = (await reconcile(kube)).created_runs
    finish(kube, run)
    await reconcile(kube)
    assert status(kube).phase == "Succeeded"
    before = len(kube.writes())
    await reconcile(kube)
    assert len(kube.writes()) == before
    assert condition(kube, c.READY) == ("True", "Succeeded")
    assert condition(kube, c.RECONCILING)[0] == condition(kube, c.STALLED)[0] == "False"


async def test_a_finished_cell_frees_its_derived_workload_for_the_next(kube: MemoryKube) -> None:
    for obj in (served("qwen"), engine_args("a"), engine_args("b"), snapshot("s1")):
        kube.put(obj)
    kube.put(
        sweep_object(workloads=[{"name": "qwen"}], engineArgsSets=[{"name": "a"}, {"name": "b"}])
    )
    first = await reconcile(kube)
    finish(kube, first.created_runs[0])
    second = await reconcile(kube)
    # Its last cell ended: the Workload goes; its GPUs hold the one place until it is gone.
    assert second.deleted_workloads == first.created_workloads
    assert second.created_runs == [] and second.created_workloads == []
    third = await reconcile(kube)  # it is gone (deleted at once here): the next set's turn
    (workload,) = third.created_workloads
    assert kube.of("Workload")[workload]["spec"]["engineArgsSetRef"] == {"name": "b"}
    assert len(third.created_runs) == 1


async def test_more_than_64_rows_go_whole_into_a_config_map_written_when_they_change(
    kube: MemoryKube,
) -> None:
    names = [f"w{i:02d}" for i in range(65)]
    for name in names:
        kube.put(endpoint(name))
    kube.put(snapshot("s1"))
    kube.put(sweep_object(workloads=[{"name": n} for n in names], parallelism=100))
    svc = services(kube)
    tables: dict[tuple[str, str], str | None] = {}
    outcome = await reconcile_sweep(svc, NS, "pick", tables=tables)
    assert outcome is not None and len(outcome.created_runs) == 65
    written = status(kube)
    assert written.table is not None and len(written.table) == 64 and written.table_rows == 65
    assert written.table_config_map == table_config_map_name("pick")
    config_map = kube.objects["ConfigMap", NS, "pick-table"]
    assert len(read_table(config_map)) == 65
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == "uid-EvaluationSweep-pick"
    # Unchanged: not written again; changed (a run succeeded): replaced.
    await reconcile_sweep(svc, NS, "pick", tables=tables)
    assert [call for call in kube.writes() if call[1] == "ConfigMap"] == [
        ("create", "ConfigMap", "pick-table")
    ]
    finish(kube, outcome.created_runs[0])
    before = len(kube.writes())
    await reconcile_sweep(svc, NS, "pick", tables=tables)
    assert ("replace", "ConfigMap", "pick-table") in kube.writes()[before:]
    rows = read_table(kube.objects["ConfigMap", NS, "pick-table"])
    assert [row.phase for row in rows].count("Succeeded") == 1
    # Fewer cells: the runs that left go, the table fits in status, the ConfigMap goes.
    sweep = kube.objects["EvaluationSweep", NS, "pick"]
    sweep["spec"]["workloads"] = [{"name": n} for n in names[:3]]
    sweep["metadata"]["generation"] = 2
    shrunk = await reconcile_sweep(svc, NS, "pick", tables=tables)
    assert shrunk is not None and len(shrunk.deleted_runs) == 62
    assert ("ConfigMap", NS, "pick-table") not in kube.objects
    written = status(kube)
    assert written.table_config_map is None and written.table_rows == 3
    assert written.observed_generation == 2


async def test_a_restarted_operator_deletes_a_table_its_status_names(kube: MemoryKube) -> None:
    kube.put(endpoint("a"))
    kube.put(snapshot("s1"))
    sweep = kube.put(sweep_object(workloads=[{"name": "a"}]))
    sweep["status"] = EvaluationSweepStatus(table_config_map="pick-table").to_k8s()
    kube.put(api_object("ConfigMap", "pick-table", {}))
    await reconcile(kube)  # a fresh table cache, as after a restart
    assert ("ConfigMap", NS, "pick-table") not in kube.objects
    assert status(kube).table_config_map is None


async def test_a_spec_the_operator_cannot_read_stalls_at_once(kube: MemoryKube) -> None:
    kube.put(api_object("EvaluationSweep", "pick", {"snapshots": [{"name": "s1"}]}))
    outcome = await reconcile(kube)
    assert outcome.created_runs == [] and outcome.report is None
    assert condition(kube, c.READY) == ("False", c.INVALID_SPEC)
    assert condition(kube, c.STALLED) == ("True", c.INVALID_SPEC)
    assert condition(kube, c.RECONCILING)[0] == "False"
    assert "spec.workloads or spec.workloadSelector" in (status(kube).message or "")


async def test_no_shared_framework_stalls_at_once_and_starts_nothing(kube: MemoryKube) -> None:
    for obj in (served("qwen", "sglang"), engine_args("a"), snapshot("s1")):
        kube.put(obj)
    kube.put(sweep_object(workloads=[{"name": "qwen"}], engineArgsSets=[{"name": "a"}]))
    outcome = await reconcile(kube)
    assert outcome.created_runs == [] and outcome.created_workloads == []
    assert status(kube).phase == "Pending"
    assert condition(kube, c.STALLED) == ("True", c.NO_CELLS)


async def test_a_missing_workload_waits_then_stalls_after_the_grace_period(
    kube: MemoryKube,
) -> None:
    kube.put(snapshot("s1"))
    sweep = kube.put(sweep_object(workloads=[{"name": "later"}]))
    outcome = await reconcile(kube, missing_reference_grace_seconds=60)
    assert condition(kube, c.READY) == ("False", c.WORKLOAD_NOT_FOUND)
    assert condition(kube, c.STALLED)[0] == "False"
    assert outcome.result.requeue_after is not None and 55 < outcome.result.requeue_after <= 62
    sweep["metadata"]["creationTimestamp"] = stamp(ago=120)
    late = await reconcile(kube, missing_reference_grace_seconds=60)
    assert condition(kube, c.STALLED) == ("True", c.WORKLOAD_NOT_FOUND)
    assert late.result == DONE
    kube.put(endpoint("later"))
    await reconcile(kube)
    assert status(kube).phase == "Running" and condition(kube, c.STALLED)[0] == "False"


@pytest.mark.parametrize(
    ("code", "reason", "stalled", "retry"),
    [(403, c.FORBIDDEN, "False", 5.0), (422, c.INVALID_SPEC, "True", None)],
)
async def test_a_refused_create_is_said_on_the_sweep(
    kube: MemoryKube, code: int, reason: str, stalled: str, retry: float | None
) -> None:
    kube.put(endpoint("a"))
    kube.put(snapshot("s1"))
    kube.put(sweep_object(workloads=[{"name": "a"}]))
    kube.refuse["EvaluationRun"] = code
    outcome = await reconcile(kube, api_retry_seconds=5)
    assert outcome.result.requeue_after == retry
    assert condition(kube, c.READY) == ("False", reason)
    assert condition(kube, c.STALLED)[0] == stalled
    assert f"HTTP {code}" in (status(kube).message or "")
    del kube.refuse["EvaluationRun"]
    await reconcile(kube)  # allowed again: the cell starts, Ready says why it waits now
    assert condition(kube, c.READY) == ("False", "CellsRunning")


async def test_a_gone_or_deleted_sweep_is_not_reconciled(kube: MemoryKube) -> None:
    assert await reconcile(kube) is None
    kube.put(sweep_object(workloads=[{"name": "a"}]))
    kube.objects["EvaluationSweep", NS, "pick"]["metadata"]["deletionTimestamp"] = stamp()
    assert await reconcile(kube) is None
    assert kube.writes() == []


# -- which events call for a reconcile ----------------------------------------------------------


def test_a_sweeps_own_events_that_call_for_a_reconcile() -> None:
    body = sweep_object(workloads=[{"name": "a"}])
    body["metadata"]["generation"] = 2
    assert wants_reconcile("ADDED", body)  # no status: new
    assert wants_reconcile(None, {**body, "status": {"observedGeneration": 2}})  # start-up
    assert wants_reconcile("MODIFIED", {**body, "status": {"observedGeneration": 1}})
    assert not wants_reconcile("MODIFIED", {**body, "status": {"observedGeneration": 2}})
    deleting = copy.deepcopy(body)
    deleting["metadata"]["deletionTimestamp"] = stamp()
    assert not wants_reconcile(None, deleting)


def test_which_references_a_sweep_cares_about() -> None:
    listed = sweep_object(workloads=[{"name": "a"}], engineArgsSets=[{"name": "x"}],
                          baseline={"workload": "a"})  # fmt: skip
    assert cares_about(listed, "Workload", "a") and not cares_about(listed, "Workload", "b")
    assert cares_about(listed, "Snapshot", "s1") and not cares_about(listed, "Snapshot", "s2")
    assert cares_about(listed, "EngineArgsSet", "x") and not cares_about(
        listed, "EngineArgsSet", "y"
    )
    selecting = sweep_object(workloadSelector={}, snapshotSelector={"matchLabels": {"a": "b"}})
    assert cares_about(selecting, "Workload", "anything")
    assert cares_about(selecting, "Snapshot", "anything")


class CountingSweeps(Sweeps):
    """Sweeps whose reconcile only counts (and can be held open)."""

    def __init__(self) -> None:
        super().__init__(services(MemoryKube()), SweepMetrics())
        self.looked: list[tuple[str, str]] = []
        self.asked: list[tuple[str, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    def enqueue(self, namespace: str, name: str) -> None:
        self.asked.append((namespace, name))
        super().enqueue(namespace, name)

    async def reconcile(self, namespace: str, name: str) -> Result:
        self.looked.append((namespace, name))
        await self.gate.wait()
        return DONE


def run_event_body(name: str, phase: str | None, *, sweep: str = "pick") -> dict[str, Any]:
    body = api_object("EvaluationRun", name, {})
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": GROUP, "kind": "EvaluationSweep", "name": sweep, "uid": "u",
         "controller": True}
    ]  # fmt: skip
    if phase is not None:
        body["status"] = {"phase": phase, "progress": {"done": 1}}
    return body


async def test_asks_while_a_reconcile_runs_coalesce_into_one_more() -> None:
    sweeps = CountingSweeps()
    sweeps.gate.clear()
    sweeps.enqueue(NS, "pick")
    await asyncio.sleep(0)
    for _ in range(5):
        sweeps.enqueue(NS, "pick")
    sweeps.gate.set()
    await sweeps.idle()
    assert sweeps.looked == [(NS, "pick")] * 2


async def test_a_run_wakes_its_sweep_when_its_phase_changes_not_on_progress() -> None:
    sweeps = CountingSweeps()
    made = run_event_body("r1", None)
    sweeps.created(made)
    await sweeps.child_event("EvaluationRun", "ADDED", made)  # its own create: nothing new
    await sweeps.idle()
    assert sweeps.asked == []
    await sweeps.child_event("EvaluationRun", "MODIFIED", run_event_body("r1", "Generating"))
    await sweeps.idle()
    progress = run_event_body("r1", "Generating")
    progress["status"]["progress"] = {"done": 3}
    await sweeps.child_event("EvaluationRun", "MODIFIED", progress)
    await sweeps.idle()
    assert len(sweeps.asked) == 1
    await sweeps.child_event("EvaluationRun", "MODIFIED", run_event_body("r1", "Succeeded"))
    await sweeps.idle()
    await sweeps.child_event("EvaluationRun", "DELETED", run_event_body("r1", "Succeeded"))
    await sweeps.idle()
    assert len(sweeps.asked) == 3
    # A run no sweep owns is none of its business.
    await sweeps.child_event("EvaluationRun", "ADDED", api_object("EvaluationRun", "x", {}))
    await sweeps.idle()
    assert len(sweeps.asked) == 3


async def test_a_derived_workload_wakes_its_sweep_when_ready_deleting_or_gone() -> None:
    sweeps = CountingSweeps()
    workload = run_event_body("qwen-a-1234", None) | {"kind": "Workload"}
    await sweeps.child_event("Workload", "ADDED", workload)
    workload["status"] = {"phase": "Ready"}
    await sweeps.child_event("Workload", "MODIFIED", workload)
    await sweeps.child_event("Workload", "MODIFIED", workload)
    workload["metadata"]["deletionTimestamp"] = stamp()
    assert child_fingerprint(workload) == ("Ready", True)
    await sweeps.child_event("Workload", "MODIFIED", workload)
    await sweeps.idle()
    assert len(sweeps.asked) == 3


async def test_references_wake_the_sweeps_that_name_or_select_them() -> None:
    sweeps = CountingSweeps()
    await sweeps.sweep_event("MODIFIED", {**sweep_object(workloads=[{"name": "a"}]),
                                          "status": {"observedGeneration": 1}})  # fmt: skip
    other = api_object("EvaluationSweep", "other", {"workloadSelector": {}, "snapshots": []})
    await sweeps.sweep_event("MODIFIED", {**other, "status": {"observedGeneration": 1}})
    await sweeps.idle()
    assert sweeps.asked == []  # their own status writes call for nothing
    await sweeps.reference_event("Workload", "ADDED", endpoint("a"))
    await sweeps.idle()
    assert sorted(sweeps.asked) == [(NS, "other"), (NS, "pick")]
    # The same object again (a status write): nothing; new labels: the selecting sweep.
    await sweeps.reference_event("Workload", "MODIFIED", endpoint("a"))
    await sweeps.idle()
    assert len(sweeps.asked) == 2
    await sweeps.reference_event("Workload", "ADDED", endpoint("b"))  # only "other" selects it
    relabelled = endpoint("b")
    relabelled["metadata"]["labels"] = {"tier": "gold"}
    await sweeps.reference_event("Workload", "MODIFIED", relabelled)
    await sweeps.idle()
    assert sweeps.asked[2:] == [(NS, "other"), (NS, "other")]
    # A Snapshot another namespace's sweep would name: not these.
    elsewhere = snapshot("s1")
    elsewhere["metadata"]["namespace"] = "elsewhere"
    await sweeps.reference_event("Snapshot", "ADDED", elsewhere)
    await sweeps.idle()
    assert len(sweeps.asked) == 4


async def test_the_resync_looks_at_unfinished_sweeps_only() -> None:
    sweeps = CountingSweeps()
    for name, phase in (("a", "Running"), ("b", "Succeeded"), ("c", "Pending"), ("d", "Failed")):
        body = api_object("EvaluationSweep", name, {})
        body["status"] = {"phase": phase, "observedGeneration": 1}
        await sweeps.sweep_event("MODIFIED", body)
    assert sweeps.resync_once() == 2
    await sweeps.idle()
    assert sorted(sweeps.looked) == [(NS, "a"), (NS, "c")]


async def test_sweep_events_feed_the_cells_metric_and_deletion_forgets_it() -> None:
    sweeps = CountingSweeps()
    body = sweep_object(workloads=[{"name": "a"}])
    body["status"] = {"observedGeneration": 1, "cells": {"total": 3, "succeeded": 2, "running": 1}}
    await sweeps.sweep_event("MODIFIED", body)
    families = {s.labels["phase"]: s.value for f in sweeps.metrics.collect() for s in f.samples}
    assert families == {"Pending": 0.0, "Running": 1.0, "Succeeded": 2.0, "Failed": 0.0}
    await sweeps.sweep_event("DELETED", body)
    assert [s for f in sweeps.metrics.collect() for s in f.samples] == []
    assert (NS, "pick") not in sweeps.known


async def test_a_requeue_reconciles_later_and_the_earliest_ask_wins() -> None:
    sweeps = CountingSweeps()
    await sweeps.sweep_event("MODIFIED", {**sweep_object(workloads=[{"name": "a"}]),
                                          "status": {"observedGeneration": 1}})  # fmt: skip
    sweeps.requeue(NS, "pick", Result(5.0))
    sweeps.requeue(NS, "pick", Result(0.1))
    sweeps.requeue(NS, "pick", DONE)
    await asyncio.sleep(0.3)
    await sweeps.idle()
    assert sweeps.looked == [(NS, "pick")]
    await sweeps.aclose()
