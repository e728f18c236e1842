"""Bad rows are reported by the field or ConfigMap key they came from; inline rows are bounded.

A source that does not give the file says why with the server's own words (a URL through an
httpx transport, the Hub through its client's own errors; no network): not there
(``SourceNotFound``) or refused (``SourceForbidden``) is Stalled and looked at again every
``snapshot_retry_max_seconds``; an unknown host (``SourceUnreachable``) and anything else
(``SourceUnavailable``) are tried again on the doubling schedule. A run waiting for the
Snapshot quotes it, and takes its reason when the source said it.
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from pydantic import ValidationError

from kyai.api import SnapshotSpec
from kyai.api.snapshot import MAX_INLINE_CHARACTERS, MAX_INLINE_ROWS
from kyai.builders.queue import QUEUE_NAME_LABEL
from kyai.controllers import _conditions as c
from kyai.controllers import snapshot
from kyai.controllers._services import Services
from kyai.controllers.snapshot import SourceUnavailable, reconcile_snapshot, resolve
from kyai.datasets import DatasetError
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

sys.path.insert(0, str(Path(__file__).parent))
from test_worker_pods import (
    NS,
    SNAPSHOT,
    MemoryKube,
    condition,
    obj,
    run_object,
    stamp,
    step,
    world,
)

PROMPTS = {"generation": "Answer.", "judge": "Score."}


class ConfigMaps:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "ConfigMap"
        return {"metadata": {"name": name}, "data": self.data} if name == "rows" else None


def svc(data: dict[str, str] | None = None) -> Services:
    return Services(ConfigMaps(data or {}), OperatorSettings(), RunMetrics())  # type: ignore[arg-type]


async def test_a_bad_config_map_line_names_the_config_map_and_key() -> None:
    spec = SnapshotSpec.model_validate(
        {"source": {"configMapRef": {"name": "rows", "key": "q.jsonl"}}, "prompts": PROMPTS}
    )
    good = '{"instruction": "a", "ground_truth_response": "b"}\n'
    with pytest.raises(DatasetError) as caught:
        await resolve(svc({"q.jsonl": good + "not json\n"}), "n", "snap", spec)
    message = str(caught.value)
    assert message.startswith("ConfigMap rows key q.jsonl (spec.source.configMapRef), line 2")
    assert "/tmp" not in message and "kyai-snapshot-" not in message


async def test_a_bad_inline_row_names_its_index_and_camel_case_field() -> None:
    rows = [
        {"instruction": "fine", "groundTruthResponse": "yes", "externalRowId": "q1"},
        {"instruction": "again", "groundTruthResponse": "no", "externalRowId": "q1"},
    ]
    spec = SnapshotSpec.model_validate({"source": {"rows": rows}, "prompts": PROMPTS})
    with pytest.raises(DatasetError) as caught:
        await resolve(svc(), "n", "snap", spec)
    message = str(caught.value)
    assert message.startswith("spec.source.rows[1]"), message
    assert "'externalRowId'" in message and "/tmp" not in message


def test_inline_rows_are_bounded_with_a_message_naming_the_way_out() -> None:
    row = {"instruction": "q", "groundTruthResponse": "a"}
    SnapshotSpec.model_validate({"source": {"rows": [row] * MAX_INLINE_ROWS}, "prompts": PROMPTS})
    with pytest.raises(ValidationError) as many:
        SnapshotSpec.model_validate(
            {"source": {"rows": [row] * (MAX_INLINE_ROWS + 1)}, "prompts": PROMPTS}
        )
    assert many.value.errors()[0]["loc"] == ("source", "rows")
    long_row = {"instruction": "q" * 1000, "groundTruthResponse": "a"}
    count = MAX_INLINE_CHARACTERS // 1001 + 1
    with pytest.raises(ValidationError) as large:
        SnapshotSpec.model_validate({"source": {"rows": [long_row] * count}, "prompts": PROMPTS})
    text = str(large.value)
    assert "spec.source.rows" in text and "spec.source.url" in text
    assert "spec.source.configMapRef" in text and str(MAX_INLINE_CHARACTERS) in text


# -- sources that cannot answer: what they said, and whether time can mend it -----------------

NATIVE = Path(__file__).parents[1] / "datasets" / "data" / "native"
URL = "https://alice:pa55word@data.example/sets/rows.jsonl"
GATED = "Access to dataset Idavidrein/gpqa is restricted. Please log in."


def url_spec(url: str = URL) -> SnapshotSpec:
    return SnapshotSpec.model_validate(
        {"source": {"url": {"url": url, "sha256": "ab" * 32}}, "prompts": PROMPTS}
    )


def serve(monkeypatch: pytest.MonkeyPatch, status: int, body: str, kind: str) -> None:
    """Every URL answers ``status`` with ``body`` (an httpx transport: no network)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, text=body, headers={"content-type": kind})

    client = functools.partial(httpx.AsyncClient, transport=httpx.MockTransport(answer))
    monkeypatch.setattr(httpx, "AsyncClient", client)


@pytest.mark.parametrize(
    ("status", "body", "kind", "reason", "said"),
    [
        (404, "no such file: sets/rows.jsonl", "text/plain", c.SOURCE_NOT_FOUND,
         "answered HTTP 404 Not Found: no such file: sets/rows.jsonl: the file is not there"),
        (410, '{"error": "gone"}', "application/json", c.SOURCE_NOT_FOUND,
         'answered HTTP 410 Gone: {"error": "gone"}'),
        (401, "", "text/plain", c.SOURCE_FORBIDDEN,
         "answered HTTP 401 Unauthorized: the server refuses the operator"),
        (403, "<html><p>Forbidden</p></html>", "text/html", c.SOURCE_FORBIDDEN,
         "answered HTTP 403 Forbidden: the server refuses"),  # no HTML quoted
        (503, "busy, try later", "text/plain", c.SOURCE_UNAVAILABLE,
         "answered HTTP 503 Service Unavailable: busy, try later"),
    ],
)  # fmt: skip
async def test_a_url_that_does_not_give_the_file_says_what_the_server_said(
    monkeypatch: pytest.MonkeyPatch, status: int, body: str, kind: str, reason: str, said: str
) -> None:
    serve(monkeypatch, status, body, kind)
    with pytest.raises(SourceUnavailable) as caught:
        await resolve(svc(), "n", "snap", url_spec())
    message = str(caught.value)
    assert caught.value.reason == reason
    assert message.startswith("https://data.example/sets/rows.jsonl (spec.source.url) " + said), (
        message
    )
    assert "pa55word" not in message and "alice" not in message


async def test_a_url_whose_host_has_no_address_says_so(no_such_host: str) -> None:
    with pytest.raises(SourceUnavailable) as caught:
        await resolve(svc(), "n", "snap", url_spec(f"http://{no_such_host}/rows.jsonl"))
    assert caught.value.reason == c.SOURCE_UNREACHABLE
    assert str(caught.value) == (
        f"the host {no_such_host} of http://{no_such_host}/rows.jsonl (spec.source.url) cannot "
        "be resolved ([Errno -2] Name or service not known): check the name and the "
        "cluster's name servers; it is tried again on a schedule (30 s, doubling up to every "
        "5 min)"
    )


def hub_answer(status: int, **headers: str) -> Exception:
    """What the Hub client raises for the Hub's answer (its own ``hf_raise_for_status``)."""
    from huggingface_hub.utils import hf_raise_for_status

    url = "https://huggingface.co/datasets/Idavidrein/gpqa/resolve/main/gpqa_diamond.csv"
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("HEAD", url))
    try:
        hf_raise_for_status(response)
    except Exception as exc:
        return exc
    raise AssertionError(status)


BUILTIN = SnapshotSpec.model_validate({"builtin": "gpqa-diamond", "version": "v1"})


@pytest.mark.parametrize(
    ("answer", "reason", "said"),
    [
        (hub_answer(404, **{"X-Error-Code": "RepoNotFound"}), c.SOURCE_NOT_FOUND,
         "huggingface_hub said: 404 Client Error. Repository Not Found for url"),
        (hub_answer(403, **{"X-Error-Code": "GatedRepo", "X-Error-Message": GATED}),
         c.SOURCE_FORBIDDEN, "is gated: accept its terms"),
        (hub_answer(404, **{"X-Error-Code": "RevisionNotFound"}), c.SOURCE_NOT_FOUND,
         "Revision Not Found for url"),
        (hub_answer(404, **{"X-Error-Code": "EntryNotFound"}), c.SOURCE_NOT_FOUND,
         "has no file 'gpqa_diamond.csv' at this revision"),
        (hub_answer(503), c.SOURCE_UNAVAILABLE, "503 Service Unavailable"),
    ],
)  # fmt: skip
async def test_a_builtin_the_hub_does_not_give_says_what_the_hub_said(
    monkeypatch: pytest.MonkeyPatch, answer: Exception, reason: str, said: str
) -> None:
    import huggingface_hub

    def download(**kwargs: Any) -> str:
        raise answer

    monkeypatch.setattr(snapshot, "hub_host", lambda: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(SourceUnavailable) as caught:
        await resolve(svc(), "n", "gpqa", BUILTIN)
    message = str(caught.value)
    assert caught.value.reason == reason
    assert message.startswith("the built-in gpqa-diamond could not be downloaded from "), message
    assert said in message
    if reason == c.SOURCE_FORBIDDEN:
        assert GATED in message and "HF_TOKEN" in message
    if reason in (c.SOURCE_NOT_FOUND, c.SOURCE_FORBIDDEN):
        assert "set spec.source" in message and "tried again on a schedule" not in message
    else:
        assert "tried again on a schedule" in message


async def test_a_hub_whose_host_has_no_address_is_said_at_once_unless_cached(
    monkeypatch: pytest.MonkeyPatch, no_such_host: str
) -> None:
    """The Hub client would retry the look-up for about 25 s; the cache is still used."""
    import huggingface_hub

    calls: list[dict[str, Any]] = []

    def not_cached(**kwargs: Any) -> str:
        calls.append(kwargs)
        raise huggingface_hub.errors.LocalEntryNotFoundError("not in the disk cache")

    monkeypatch.setattr(snapshot, "hub_host", lambda: no_such_host)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", not_cached)
    with pytest.raises(SourceUnavailable) as caught:
        await resolve(svc(), "n", "gpqa", BUILTIN)
    assert caught.value.reason == c.SOURCE_UNREACHABLE
    assert (
        f"the HuggingFace Hub's host {no_such_host} cannot be resolved ([Errno -2] Name or "
        "service not known) and it is not in the local cache"
    ) in str(caught.value)
    assert [call.get("local_files_only") for call in calls] == [True]  # the cache alone

    def cached(**kwargs: Any) -> str:
        assert kwargs.get("local_files_only") is True
        return str(NATIVE / "gpqa_diamond.csv")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    dataset = await resolve(svc(), "n", "gpqa", BUILTIN)
    assert dataset.name == "gpqa-diamond" and dataset.rows


# -- the Snapshot's conditions, its next look, and the runs waiting for it ---------------------


def snapshot_object(**labels: str) -> dict[str, Any]:
    body = obj("Snapshot", "snap", {"source": {"url": {"url": URL, "sha256": "ab" * 32}},
                                    "prompts": PROMPTS}, {})  # fmt: skip
    body["metadata"]["labels"] = labels
    return body


def conditions_of(status: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        cond["type"]: (cond["status"], cond["reason"], cond.get("message", ""))
        for cond in status["conditions"]
    }


async def reconciled(
    kube: MemoryKube, settings: OperatorSettings
) -> tuple[float | None, dict[str, Any]]:
    body = await kube.get("Snapshot", NS, "snap")
    assert body is not None
    again = await reconcile_snapshot(Services(kube, settings, RunMetrics()), body)  # type: ignore[arg-type]
    found = await kube.get("Snapshot", NS, "snap")
    assert found is not None
    return again, found["status"]


@pytest.mark.parametrize(
    ("reason", "stalled", "again"),
    [(c.SOURCE_NOT_FOUND, True, 300.0), (c.SOURCE_FORBIDDEN, True, 300.0),
     (c.SOURCE_UNREACHABLE, False, 30.0), (c.SOURCE_UNAVAILABLE, False, 30.0)],
)  # fmt: skip
async def test_a_source_that_cannot_answer_is_pending_stalled_only_when_time_cannot_mend_it(
    monkeypatch: pytest.MonkeyPatch, reason: str, stalled: bool, again: float
) -> None:
    tries: list[str] = []

    async def fails(*_: Any) -> Any:
        tries.append(reason)
        raise SourceUnavailable("the server said no", reason)

    monkeypatch.setattr(snapshot, "resolve", fails)
    kube = MemoryKube(snapshot_object())
    settings = OperatorSettings()
    delay, status = await reconciled(kube, settings)
    said = conditions_of(status)
    assert status["phase"] == "Pending" and delay == again
    assert said["Ready"][:2] == ("False", reason)
    assert said["Ready"][2].startswith("the server said no")
    assert said["Stalled"][:2] == (("True", reason) if stalled else ("False", "Pending"))
    assert said["Reconciling"][0] == ("False" if stalled else "True")
    if stalled:
        assert said["Ready"][2].endswith("(looked at again every 300 s)")
    else:
        assert said["Ready"][2] == "the server said no"
    # Tried again: still Pending, never back to Resolving (Stalled does not flicker).
    phases: list[str | None] = []
    patch = kube.patch

    async def recorded(kind: str, namespace: str, name: str, body: Any, **kw: Any) -> Any:
        phases.append(body["status"].get("phase"))
        return await patch(kind, namespace, name, body, **kw)

    kube.patch = recorded  # type: ignore[method-assign]
    delay, status = await reconciled(kube, settings)
    assert status["phase"] == "Pending" and delay == again and len(tries) == 2
    assert "Resolving" not in phases
    assert conditions_of(status)["Stalled"][0] == ("True" if stalled else "False")


async def test_a_snapshot_with_a_queue_kueue_cannot_take_is_stalled_and_resolves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def never(*_: Any) -> Any:
        raise AssertionError("resolved despite its queue label")

    monkeypatch.setattr(snapshot, "resolve", never)
    kube = MemoryKube(snapshot_object(**{QUEUE_NAME_LABEL: "Team_Q"}))
    delay, status = await reconciled(kube, OperatorSettings())
    said = conditions_of(status)
    assert status["phase"] == "Pending" and delay is None
    assert said["Ready"][:2] == ("False", c.INVALID_QUEUE_NAME)
    assert said["Stalled"][:2] == ("True", c.INVALID_QUEUE_NAME)
    message = said["Ready"][2]
    assert message.startswith(f"the label {QUEUE_NAME_LABEL} is 'Team_Q', which no Kueue ")
    assert "lowercase RFC 1123 subdomain" in message and "its rows are not resolved" in message


async def test_a_run_waiting_for_a_snapshot_says_what_its_source_said() -> None:
    told = "https://data.example/rows.jsonl (spec.source.url) answered HTTP 404 Not Found"
    waiting = copy.deepcopy(SNAPSHOT)
    waiting["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": c.SOURCE_NOT_FOUND,
                        "message": told, "lastTransitionTime": stamp()}],
    }  # fmt: skip
    svc, kube = world(run_object())
    kube.put(waiting)
    status = await step(svc, kube)
    assert status.phase == "Pending"
    expected = f"the Snapshot snap is Pending, not Ready ({c.SOURCE_NOT_FOUND}): {told}"
    assert condition(status, "Ready") == ("False", c.SOURCE_NOT_FOUND, expected)
    assert condition(status, "Stalled") == ("True", c.SOURCE_NOT_FOUND, expected)
    # A Snapshot still resolving: the run waits (SnapshotNotReady), quoting it.
    waiting["status"]["conditions"][0].update(status="Unknown", reason=c.RESOLVING,
                                              message="resolving the rows")  # fmt: skip
    kube.put(waiting)
    status = await step(svc, kube)
    assert condition(status, "Ready") == (
        "False", c.SNAPSHOT_NOT_READY,
        "the Snapshot snap is Pending, not Ready (Resolving): resolving the rows",
    )  # fmt: skip
    assert condition(status, "Stalled")[0] == "False"


async def test_a_hub_client_that_could_not_look_its_host_up_says_so_and_is_retried(
    monkeypatch: pytest.MonkeyPatch, no_such_host: str
) -> None:
    """Behind a proxy nothing is looked up first: the Hub client's own failure says it."""
    import huggingface_hub

    def download(**kwargs: Any) -> str:
        with httpx2.Client() as client:
            try:
                client.head(f"https://{no_such_host}/datasets/Idavidrein/gpqa")
            except httpx2.ConnectError as exc:
                raise huggingface_hub.errors.LocalEntryNotFoundError("not cached") from exc
        raise AssertionError("resolved")

    monkeypatch.setattr(snapshot, "hub_host", lambda: None)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    with pytest.raises(SourceUnavailable) as caught:
        await resolve(svc(), "n", "gpqa", BUILTIN)
    assert caught.value.reason == c.SOURCE_UNREACHABLE
    assert f"The host {no_such_host} cannot be resolved (DNS)" in str(caught.value)
    assert "tried again on a schedule" in str(caught.value)
