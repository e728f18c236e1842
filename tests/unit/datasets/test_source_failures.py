"""A download that fails is sorted by what trying again can change, keeping the server's words.

The errors are the real ones: the HuggingFace Hub client's own ``hf_raise_for_status`` on the
answers the Hub gives (its ``X-Error-Code`` headers), wrapped as ``hf_hub_download`` wraps
them; ``httpx``'s (and the Hub client's ``httpx2``) connection errors carrying the resolver's
``gaierror`` (the look-up refused through ``socket.getaddrinfo``, no network used).
"""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import hf_raise_for_status

from kyai.datasets import (
    DatasetError,
    DatasetUnavailableError,
    failure_of,
    failure_of_status,
    hub_host,
    load_dataset,
    one_line,
)
from kyai.datasets._hub import hub_error

URL = "https://huggingface.co/datasets/Idavidrein/gpqa/resolve/main/gpqa_diamond.csv"
GATED = (
    "Access to dataset Idavidrein/gpqa is restricted. You must have access to it and be "
    "authenticated to access it. Please log in."
)


def hub_answer(status: int, **headers: str) -> Exception:
    """What the Hub client raises for the Hub's answer ``status`` with ``headers``."""
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("HEAD", URL))
    try:
        hf_raise_for_status(response)
    except Exception as exc:
        return exc
    raise AssertionError(f"{status} raised nothing")


def as_download_raises(cause: Exception) -> Exception:
    """``hf_hub_download``'s "not in the cache" error, raised from the HEAD call's."""
    try:
        try:
            raise cause
        except Exception as exc:
            raise LocalEntryNotFoundError(
                "An error happened while trying to locate the file on the Hub and we cannot "
                "find the requested files in the local cache."
            ) from exc
    except LocalEntryNotFoundError as wrapped:
        return wrapped


@pytest.mark.parametrize(
    ("status", "headers", "kind", "words"),
    [
        (404, {"X-Error-Code": "RepoNotFound"}, "not-found", "Repository Not Found for url"),
        # The Hub answers 401 for a dataset that does not exist or that it will not show.
        (401, {"X-Error-Message": "Invalid username or password."}, "not-found",
         "Invalid username or password."),
        (403, {"X-Error-Code": "GatedRepo", "X-Error-Message": GATED}, "forbidden", GATED),
        (404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id: v9"},
         "not-found", "Invalid rev id: v9"),
        (404, {"X-Error-Code": "EntryNotFound"}, "not-found", "Entry Not Found for url"),
        (403, {"X-Error-Message": "Access to this resource is disabled."}, "forbidden",
         "Access to this resource is disabled."),
        (403, {"X-Error-Message": "Forbidden by policy"}, "forbidden", "Forbidden by policy"),
        (503, {}, "unavailable", "503 Service Unavailable"),
        (429, {}, "unavailable", "429 Too Many Requests"),
    ],
)  # fmt: skip
def test_the_hubs_answers_are_sorted_with_its_words(
    status: int, headers: dict[str, str], kind: str, words: str
) -> None:
    error = hub_answer(status, **headers)
    for raised in (error, as_download_raises(error)):
        failure = failure_of(raised)
        assert (failure.kind, failure.status) == (kind, status), (type(raised), failure)
        assert words in failure.said and "\n" not in failure.said
        assert failure.permanent == (kind in ("not-found", "forbidden"))


def test_an_unknown_host_is_unreachable_through_httpx_and_the_hub_client(
    no_such_host: str,
) -> None:
    for client in (httpx.Client(), httpx2.Client()):
        with client, pytest.raises(Exception) as caught:
            client.get(f"http://{no_such_host}/rows.jsonl")
        for raised in (caught.value, as_download_raises(caught.value)):
            failure = failure_of(raised)
            assert failure.kind == "unreachable", (type(raised), failure)
            assert failure.said == "[Errno -2] Name or service not known"
            assert failure.host == no_such_host and not failure.permanent


def test_what_time_may_mend_is_unavailable() -> None:
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    offline = OfflineModeIsEnabled("offline mode is enabled (HF_HUB_OFFLINE)")
    for error in (
        refused,
        httpx.ReadTimeout("timed out"),
        httpx2.RemoteProtocolError("Server disconnected without sending a response."),
        as_download_raises(offline),
        LocalEntryNotFoundError("Cannot find the requested files in the disk cache"),
    ):
        failure = failure_of(error)
        assert failure.kind == "unavailable" and not failure.permanent, (error, failure)
        assert failure.said
    assert failure_of(as_download_raises(offline)).said.startswith("offline mode is enabled")


@pytest.mark.parametrize(
    ("status", "kind"),
    [(404, "not-found"), (410, "not-found"), (401, "forbidden"), (403, "forbidden"),
     (500, "unavailable"), (502, "unavailable"), (408, "unavailable"), (429, "unavailable")],
)  # fmt: skip
def test_an_http_status_alone(status: int, kind: str) -> None:
    failure = failure_of_status(status, f"HTTP {status}:\n  the server's words")
    assert (failure.kind, failure.status) == (kind, status)
    assert failure.said == f"HTTP {status}: the server's words"
    response = httpx.Response(status, request=httpx.Request("GET", "https://x/rows.jsonl"))
    raised = httpx.HTTPStatusError("status", request=response.request, response=response)
    assert failure_of(raised).kind == kind


def test_secrets_never_reach_the_words(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "hf_" + "k" * 34
    monkeypatch.setenv("HF_TOKEN", "s3cret-token-value")
    text = (
        f"401 for https://alice:pa55word@example.com/rows.jsonl with {token} "
        "(token s3cret-token-value)\n\nsee the docs"
    )
    said = one_line(text)
    assert "pa55word" not in said and "alice" not in said and token not in said
    assert "s3cret-token-value" not in said
    assert said == (
        "401 for https://example.com/rows.jsonl with [REDACTED] (token [REDACTED]) see the docs"
    )
    assert len(one_line("x" * 5000)) == 600


def test_the_datasets_errors_keep_their_class_and_carry_the_failure() -> None:
    """The command line's exit statuses stay (2: the input, 3: access or the network)."""
    where = {"repo_id": "Idavidrein/gpqa", "filename": "gpqa_diamond.csv", "revision": "v9"}
    gated = hub_error(hub_answer(403, **{"X-Error-Code": "GatedRepo", "X-Error-Message": GATED}),
                      **where)  # fmt: skip
    assert isinstance(gated, DatasetUnavailableError) and gated.failure is not None
    assert gated.failure.kind == "forbidden"
    assert "HF_TOKEN" in str(gated) and "huggingface_hub said: 403 Client Error." in str(gated)
    assert GATED in str(gated)
    revision = hub_error(hub_answer(404, **{"X-Error-Code": "RevisionNotFound"}), **where)
    assert type(revision) is DatasetError and revision.failure is not None
    assert revision.failure.kind == "not-found" and "'v9' does not exist" in str(revision)
    assert "Revision Not Found for url" in str(revision)
    forbidden = hub_error(as_download_raises(hub_answer(403)), **where)
    assert isinstance(forbidden, DatasetUnavailableError) and forbidden.failure is not None
    assert forbidden.failure.kind == "forbidden" and "refused the dataset" in str(forbidden)
    with pytest.raises(ValueError, match="not a hub error"):
        hub_error(ValueError("not a hub error"), **where)


def test_a_download_through_the_hub_client_says_why(
    monkeypatch: pytest.MonkeyPatch, no_such_host: str
) -> None:
    import huggingface_hub

    def gated(**kwargs: Any) -> str:
        raise hub_answer(403, **{"X-Error-Code": "GatedRepo", "X-Error-Message": GATED})

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(DatasetUnavailableError) as caught:
        load_dataset("gpqa-diamond")
    assert caught.value.failure is not None and caught.value.failure.kind == "forbidden"

    def unknown_host(**kwargs: Any) -> str:
        with httpx2.Client() as client:
            try:
                client.head(f"https://{no_such_host}/x")
            except httpx2.ConnectError as exc:
                raise as_download_raises(exc) from None
        raise AssertionError("resolved")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", unknown_host)
    with pytest.raises(DatasetUnavailableError) as caught:
        load_dataset("humaneval")
    failure = caught.value.failure
    assert failure is not None and failure.kind == "unreachable"
    assert f"The host {no_such_host} cannot be resolved (DNS)" in str(caught.value)
    assert "--dataset-file" in str(caught.value)


def test_the_hub_host_is_looked_up_unless_offline_or_proxied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in ("HF_HUB_OFFLINE", "HF_ENDPOINT", "https_proxy", "HTTPS_PROXY",
                     "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    assert hub_host() == "huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example:8443/")
    assert hub_host() == "hf-mirror.example"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert hub_host() is None  # the proxy looks the name up
    monkeypatch.setenv("NO_PROXY", "hf-mirror.example")
    assert hub_host() == "hf-mirror.example"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_host() is None
