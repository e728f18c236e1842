"""The shared status writer: typed fields, observedGeneration, "spec changed" noted once."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kyai.api import SnapshotStatus
from kyai.builders import spec_hash
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter, spec_changed
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings


class PatchRecorder:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []

    async def patch(
        self, kind: str, namespace: str, name: str, body: dict[str, Any], *, subresource: str
    ) -> dict[str, Any]:
        assert subresource == "status"
        self.patches.append((kind, namespace, name, body))
        return {"kind": kind, "metadata": {"name": name, "namespace": namespace}, **body}


BODY = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "Snapshot",
    "metadata": {"name": "s", "namespace": "n", "generation": 3},
    "spec": {"builtin": "ifeval"},
    "status": {"phase": "Ready", "rows": 5},
}


def writer() -> tuple[StatusWriter, PatchRecorder]:
    kube = PatchRecorder()
    svc = Services(kube, OperatorSettings(), RunMetrics())  # type: ignore[arg-type]
    return StatusWriter(svc, BODY), kube


async def test_patch_sends_the_fields_set_with_observed_generation() -> None:
    status_writer, kube = writer()
    await status_writer.patch(SnapshotStatus(phase="Failed", message="m", config_map=None))
    (_, _, _, body), = kube.patches  # fmt: skip
    assert body == {
        "status": {"phase": "Failed", "message": "m", "configMap": None, "observedGeneration": 3}
    }
    assert status_writer.status["rows"] == 5 and status_writer.status["phase"] == "Failed"
    assert status_writer.unchanged(SnapshotStatus(phase="Failed", message="m"))
    assert not status_writer.unchanged(SnapshotStatus(phase="Ready"))


async def test_spec_change_is_noted_once() -> None:
    status_writer, kube = writer()
    await status_writer.note_spec_change("changed")
    await status_writer.note_spec_change("changed")
    assert len(kube.patches) == 1
    (condition,) = kube.patches[0][3]["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "Degraded", "True", c.SPEC_IMMUTABLE
    )  # fmt: skip
    assert condition["observedGeneration"] == 3


def test_spec_changed_accepts_the_current_and_the_earlier_hash() -> None:
    spec = {"b": [1, 2], "a": "é"}
    earlier = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
    assert not spec_changed(spec, spec_hash(spec))
    assert not spec_changed(spec, earlier)
    assert spec_changed({**spec, "a": "x"}, spec_hash(spec))
    assert spec_changed(spec, None)


def test_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    (first,) = c.set_condition([], Change(c.READY, False, "A", "a"), generation=1)
    old = [first.model_copy(update={"last_transition_time": "2020-01-01T00:00:00Z"})]
    (same,) = c.set_condition(old, Change(c.READY, False, "B", "b"), generation=2)
    assert same.last_transition_time == "2020-01-01T00:00:00Z"
    assert (same.reason, same.observed_generation) == ("B", 2)
    flipped = c.set_condition(old, Change(c.READY, True, "C", "c"), generation=2)
    assert flipped[0].last_transition_time != "2020-01-01T00:00:00Z"
    both = c.set_condition(flipped, Change(c.PROGRESSING, None, "D", "d"), generation=2)
    assert [(x.type, x.status) for x in both] == [
        ("Ready", "True"),
        ("Progressing", "Unknown"),
    ]
    assert c.find_condition(both, c.PROGRESSING) == both[1]
    assert c.find_condition(both, c.DEGRADED) is None
