"""The CRDs' CEL rules (x-kubernetes-validations), worded as the real API server words them."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import WIDGET_CRD, Api, widget
from kyai_devcluster._cel import _pruned, _reads

CRDS = Path(__file__).resolve().parents[2] / "crds"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
KYAI = "/apis/kyai.io/v1alpha1/namespaces/default"


def ruled_widget_crd() -> dict[str, Any]:
    crd = copy.deepcopy(WIDGET_CRD)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    spec["x-kubernetes-validations"] = [
        {"rule": "self.size <= 8 || self.color == 'blue'", "message": "big widgets are blue"},
        {
            "rule": "!has(self.label) || self.label != 'reserved'",
            "messageExpression": "'label ' + self.label + ' is reserved'",
            "reason": "FieldValueForbidden",
            "fieldPath": ".label",
        },
        {"rule": "self.size >= oldSelf.size", "message": "size may only grow"},
        {"rule": "!has(self.tags) || size(self.tags) != 2"},
        {"rule": "!has(self.tags) || self.tags.isSorted()", "message": "tags sorted"},
        {
            "rule": "!has(self.label) || self.label.upperAscii().lowerAscii() == self.label",
            "message": "lower case",
        },
        {
            "rule": "!has(self.tags) || self.tags.join(',').split(',').size() == size(self.tags)",
            "message": "no commas in tags",
        },
        {"rule": "!has(self.extra) || quantity(self.extra.memory).isGreaterThan(quantity('0'))"},
    ]
    spec["properties"]["tags"]["items"]["x-kubernetes-validations"] = [
        {"rule": "self.startsWith('t')", "message": "tags start with t"}
    ]
    schema["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.status) || !has(self.status.phase) || "
            "self.status.phase != 'Frozen' || self.spec == oldSelf.spec",
            "message": "a Frozen widget is immutable",
        }
    ]
    return crd


@pytest.fixture
async def ruled(api: Api) -> Api:
    await api.create_crd(ruled_widget_crd())
    return api


async def test_a_false_rule_is_a_422_with_the_real_wording(ruled: Api) -> None:
    status, body = await ruled.post(WIDGETS, widget("w", size=9))
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: spec: Invalid value: "object": big widgets are blue'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": big widgets are blue',
            "field": "spec",
        }
    ]
    assert (await ruled.post(WIDGETS, widget("w", size=9, color="blue")))[0] == 201


async def test_message_expression_reason_field_path_and_default_message(ruled: Api) -> None:
    status, body = await ruled.post(WIDGETS, widget("w", label="reserved"))
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: spec.label: Forbidden: label reserved is reserved'
    )
    status, body = await ruled.post(WIDGETS, widget("w", tags=["ta", "tb"]))
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: spec: Invalid value: "object": failed rule: '
        "!has(self.tags) || size(self.tags) != 2"
    )
    status, body = await ruled.post(WIDGETS, widget("w", tags=["ta", "x"]))
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: [spec: Invalid value: "object": failed rule: '
        '!has(self.tags) || size(self.tags) != 2, spec.tags[1]: Invalid value: "string": '
        "tags start with t]"
    )


async def test_transition_rules_run_only_on_update(ruled: Api) -> None:
    assert (await ruled.post(WIDGETS, widget("w", size=5)))[0] == 201
    status, body = await ruled.patch(f"{WIDGETS}/w", {"spec": {"size": 3}})
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: spec: Invalid value: "object": size may only grow'
    )
    assert (await ruled.patch(f"{WIDGETS}/w", {"spec": {"size": 6}}))[0] == 200


async def test_root_rule_with_old_self_freezes_the_spec(ruled: Api) -> None:
    assert (await ruled.post(WIDGETS, widget("w", size=2)))[0] == 201
    assert (await ruled.patch(f"{WIDGETS}/w", {"spec": {"size": 3}}))[0] == 200
    frozen = {"status": {"phase": "Frozen"}}
    assert (await ruled.patch(f"{WIDGETS}/w/status", frozen))[0] == 200
    status, body = await ruled.patch(f"{WIDGETS}/w", {"spec": {"size": 4}})
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: <nil>: Invalid value: "object": a Frozen widget '
        "is immutable"
    )
    # Status and metadata writes stay possible.
    assert (await ruled.patch(f"{WIDGETS}/w/status", {"status": {"phase": "Frozen2"}}))[0] == 200
    assert (await ruled.patch(f"{WIDGETS}/w", {"metadata": {"labels": {"a": "b"}}}))[0] == 200


async def test_rules_cel_python_cannot_run_are_skipped_and_logged_once(
    ruled: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kyai_devcluster.cel")
    memory = {"memory": "1Gi"}
    assert (await ruled.post(WIDGETS, widget("a", extra=memory)))[0] == 201
    assert (await ruled.post(WIDGETS, widget("b", extra=memory)))[0] == 201
    skipped = [r.getMessage() for r in caplog.records if "quantity" in r.getMessage()]
    assert len(skipped) == 1 and "CEL rule skipped" in skipped[0]


async def test_kubernetes_library_functions(ruled: Api) -> None:
    status, body = await ruled.post(WIDGETS, widget("w", tags=["tb", "ta", "tc"]))
    assert status == 422
    assert body["message"].endswith('spec: Invalid value: "object": tags sorted')
    assert (await ruled.post(WIDGETS, widget("w", tags=["ta", "tb", "tc"])))[0] == 201
    status, body = await ruled.post(WIDGETS, widget("v", tags=["ta", "tb,tc", "td"]))
    assert status == 422 and body["message"].endswith("no commas in tags")


# -- the project's own CRDs --------------------------------------------------------------


@pytest.fixture
async def kyai(api: Api) -> Api:
    for path in sorted(CRDS.glob("*.yaml")):
        await api.create_crd(yaml.safe_load(path.read_text()))
    return api


def kyai_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


SNAPSHOT_SPEC = {"source": {"rows": [{"instruction": "2+2?", "groundTruthResponse": "4"}]}}


async def test_a_ready_snapshot_is_immutable(kyai: Api) -> None:
    path = f"{KYAI}/snapshots"
    assert (await kyai.post(path, kyai_object("Snapshot", "s", SNAPSHOT_SPEC)))[0] == 201
    changed = {"spec": {"source": {"rows": [{"instruction": "3+3?", "groundTruthResponse": "6"}]}}}
    assert (await kyai.patch(f"{path}/s", changed))[0] == 200
    assert (await kyai.patch(f"{path}/s/status", {"status": {"phase": "Ready"}}))[0] == 200
    status, body = await kyai.patch(f"{path}/s", {"spec": SNAPSHOT_SPEC})
    assert status == 422
    assert body["message"] == (
        'Snapshot.kyai.io "s" is invalid: <nil>: Invalid value: "object": a Ready Snapshot is '
        "immutable (its rows and sha256 are pinned): create a new Snapshot instead"
    )


async def test_a_started_runs_spec_is_immutable(kyai: Api) -> None:
    path = f"{KYAI}/evaluationruns"
    spec = {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}
    assert (await kyai.post(path, kyai_object("EvaluationRun", "r", spec)))[0] == 201
    assert (await kyai.patch(f"{path}/r/status", {"status": {"phase": "Pending"}}))[0] == 200
    assert (await kyai.patch(f"{path}/r", {"spec": {"snapshotRef": {"name": "s2"}}}))[0] == 200
    assert (await kyai.patch(f"{path}/r/status", {"status": {"phase": "Generating"}}))[0] == 200
    status, body = await kyai.patch(f"{path}/r", {"spec": {"snapshotRef": {"name": "s3"}}})
    assert status == 422
    assert body["message"] == (
        'EvaluationRun.kyai.io "r" is invalid: <nil>: Invalid value: "object": an '
        "EvaluationRun's spec is immutable once the run has started: create a new "
        "EvaluationRun instead"
    )


async def test_workload_and_engine_args_rules(kyai: Api) -> None:
    status, body = await kyai.post(
        f"{KYAI}/workloads", kyai_object("Workload", "w", {"model": "m"})
    )
    assert status == 422
    assert body["message"] == (
        'Workload.kyai.io "w" is invalid: spec: Invalid value: "object": spec.framework is '
        "required (vllm, sglang or trtllm) unless spec.endpoint is set"
    )
    spec = {"framework": "vllm", "args": {"port": 9000}}
    status, body = await kyai.post(
        f"{KYAI}/engineargssets", kyai_object("EngineArgsSet", "e", spec)
    )
    assert status == 422
    assert body["message"].startswith(
        'EngineArgsSet.kyai.io "e" is invalid: spec: Invalid value: "object": args may not set '
        "host, port, model or the served model name"
    )
    spec = {"framework": "vllm", "args": {"max-model-len": 4096}}
    assert (await kyai.post(f"{KYAI}/engineargssets", kyai_object("EngineArgsSet", "e", spec)))[
        0
    ] == 201


def test_what_a_rule_reads() -> None:
    rule = (
        "!has(oldSelf.status) || !has(oldSelf.status.phase) || "
        "oldSelf.status.phase == 'Pending' || self.spec == oldSelf.spec"
    )
    assert _reads(rule) == (
        ("oldSelf", ("spec",), False),
        ("oldSelf", ("status",), True),
        ("oldSelf", ("status", "phase"), False),
        ("self", ("spec",), False),
    )
    # Method calls end a chain; a bare self is the whole value.
    assert _reads("self.tags.all(t, t.startsWith('a')) && self.size() > 0") == (
        ("self", (), False),
        ("self", ("tags",), False),
    )
    assert _reads("has(self.a) && self.a > 1") == (("self", ("a",), False),)


async def test_cached_outcomes_follow_the_values_they_read(ruled: Api) -> None:
    assert (await ruled.post(WIDGETS, widget("w", size=5)))[0] == 201
    for size, expected in ((4, 422), (5, 200), (4, 422), (6, 200), (5, 422)):
        status, _ = await ruled.patch(f"{WIDGETS}/w", {"spec": {"size": size}})
        assert status == expected, size


def test_a_rule_sees_only_what_it_reads_and_that_whole() -> None:
    """Only the chains a rule reads are converted for CEL; each whole, the rest left out."""
    obj = {
        "spec": {"a": {"b": 1, "c": [1, 2]}, "d": 2},
        "status": {"phase": "Judging", "scores": [0.5] * 1000},
        "metadata": {"name": "x"},
    }
    rule = "!has(oldSelf.status.phase) || self.spec == oldSelf.spec || self.spec.a.b > 0"
    reads = _reads(rule)
    assert _pruned(obj, reads, "self") == {"spec": obj["spec"]}
    assert _pruned(obj, reads, "oldSelf") == {"spec": obj["spec"], "status": {"phase": "Judging"}}
    # A chain that stops short of a missing key keeps the absence.
    assert _pruned({"spec": {}}, _reads("self.spec.a.b == 1"), "self") == {"spec": {}}
    # Methods or indexing on self itself: everything.
    for whole in ("self.size() > 1", "self['spec'].d == 2", "self.all(k, k != 'x')"):
        assert _pruned(obj, _reads(whole), "self") is obj
    # Not read at all (only oldSelf): nothing of self.
    assert _pruned(obj, _reads("oldSelf.spec.d == 2"), "self") == {}
