"""The operator's event recorder: posts from any task, in order per object, never blocks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kyai.controllers._events import MAX_MESSAGE_LENGTH, EventRecorder, event_body
from kyai.controllers._kube import KubeError


class Recording:
    """A KubeClient stand-in that keeps every request (and fails those it is told to)."""

    def __init__(self, fail: set[str] | None = None, delay: float = 0.0) -> None:
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.fail = fail or set()
        self.delay = delay

    async def request(
        self, method: str, path: str, *, body: Any = None, **_: Any
    ) -> dict[str, Any]:
        await asyncio.sleep(self.delay)
        if body["reason"] in self.fail:
            raise KubeError(f"{method} {path}: HTTP 403: forbidden", status=403)
        self.requests.append((method, path, body))
        return body


def run(name: str, uid: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
    }


async def test_an_event_recorded_outside_any_kopf_handler_is_posted() -> None:
    kube = Recording()
    recorder = EventRecorder(kube)  # type: ignore[arg-type]

    async def resync() -> None:  # a task of the operator's own, as the scheduler's resync
        recorder.record(run("stuck", "u1"), "Warning", "WorkerNotStarting", "cannot start")

    await asyncio.create_task(resync())
    await recorder.aclose()
    [(method, path, body)] = kube.requests
    assert (method, path) == ("POST", "/api/v1/namespaces/team-a/events")
    assert body["involvedObject"] == {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "name": "stuck",
        "namespace": "team-a",
        "uid": "u1",
    }
    assert (body["type"], body["reason"], body["message"]) == (
        "Warning", "WorkerNotStarting", "cannot start"
    )  # fmt: skip
    assert body["metadata"] == {"namespace": "team-a", "generateName": "stuck."}
    assert body["source"] == {"component": "kyai-operator"}
    assert body["firstTimestamp"] == body["lastTimestamp"] and body["count"] == 1


async def test_one_objects_events_keep_their_order_and_record_never_waits() -> None:
    kube = Recording(delay=0.01)
    recorder = EventRecorder(kube)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    started = loop.time()
    for i in range(20):
        recorder.record(run("a", "ua"), "Normal", f"Step{i}", "")
        recorder.record(run("b", "ub"), "Normal", f"Step{i}", "")
    assert loop.time() - started < 0.01  # queued, not posted inline (40 posts take 0.4 s)
    await recorder.aclose(timeout=10)
    for name in ("a", "b"):
        reasons = [b["reason"] for _, _, b in kube.requests if b["involvedObject"]["name"] == name]
        assert reasons == [f"Step{i}" for i in range(20)]


async def test_a_refused_event_is_logged_without_its_message_and_the_next_is_posted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kube = Recording(fail={"Refused"})
    recorder = EventRecorder(kube)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="kyai.controllers._events"):
        recorder.record(run("r", "u"), "Warning", "Refused", "the judge said: sk-secret-text")
        recorder.record(run("r", "u"), "Normal", "Next", "fine")
        await recorder.aclose()
    assert [b["reason"] for _, _, b in kube.requests] == ["Next"]
    assert "could not post the Warning event Refused about EvaluationRun team-a/r: 403" in (
        caplog.text
    )
    assert "sk-secret-text" not in caplog.text


def test_without_a_running_loop_nothing_is_posted_and_nothing_fails() -> None:
    kube = Recording()
    EventRecorder(kube).record(run("r", "u"), "Normal", "X", "y")  # type: ignore[arg-type]
    assert kube.requests == []


def test_a_long_message_is_cut_in_the_middle_to_the_apis_limit() -> None:
    message = "head " + "x" * 3000 + " tail"
    cut = event_body(run("r", "u"), "Warning", "Long", message)["message"]
    assert len(cut) == MAX_MESSAGE_LENGTH
    assert cut.startswith("head ") and cut.endswith(" tail") and "..." in cut
    assert event_body(run("r", "u"), "Normal", "Short", "ok")["message"] == "ok"
