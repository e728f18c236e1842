"""KeyFile: a key read from a file only when the file changed, redacted, errors naming the flag;
and the chat client's two transports sending it (httpx.MockTransport, no network)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from kyai.evaluation import ChatClient, ChatError, RetryPolicy
from kyai.evaluation._keyfile import KeyFile, KeyFileError
from kyai.evaluation._redact import REDACTED, forget_secrets, redact

FLAG = "--judge-api-key-file"


@pytest.fixture(autouse=True)
def _forget() -> None:
    forget_secrets()


def swap(path: Path, key: str) -> None:
    fresh = path.with_name("fresh")
    fresh.write_text(key)
    os.replace(fresh, path)


def test_the_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-key-123\n")
    key_file = KeyFile(path, flag=FLAG)
    assert [key_file.key() for _ in range(5)] == ["first-key-123"] * 5
    assert key_file.reads == 1
    swap(path, "second-key-456")
    assert key_file.key() == "second-key-456" and key_file.reads == 2
    # Both keys are redacted from everything printed or stored from now on.
    assert redact("a first-key-123 b second-key-456") == f"a {REDACTED} b {REDACTED}"
    assert "first-key" not in repr(key_file)


@pytest.mark.parametrize(
    ("setup", "why"),
    [("missing", "No such file"), ("empty", "it is empty"), ("binary", "not UTF-8")],
)
def test_unreadable_files_are_errors_naming_flag_and_path(
    tmp_path: Path, setup: str, why: str
) -> None:
    path = tmp_path / "token"
    if setup == "empty":
        path.write_text(" \n")
    elif setup == "binary":
        path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(KeyFileError) as caught:
        KeyFile(path, flag=FLAG).key()
    assert str(caught.value).startswith(f"{FLAG}: cannot read the API key from {path}: ")
    assert why in str(caught.value)


def chat_answer(request: httpx.Request) -> httpx.Response:
    body = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}
    return httpx.Response(200, json=body, headers={"x-auth": request.headers["Authorization"]})


async def test_each_request_sends_the_key_as_read_then(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first-key-123")
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        return chat_answer(request)

    key_file = KeyFile(path, flag=FLAG)
    async with ChatClient(
        "http://judge/v1",
        api_key=key_file,
        transport=httpx.MockTransport(handler),
        retry=RetryPolicy(max_retries=1, backoff_base_s=0.01),
    ) as client:
        await client.chat("m", [{"role": "user", "content": "x"}], max_tokens=4)
        swap(path, "second-key-456")
        await client.chat("m", [{"role": "user", "content": "x"}], max_tokens=4)
        # Other routes (a model-backed grader's embeddings) read it too.
        await client.http.post("/embeddings", json={})
        path.unlink()
        with pytest.raises(ChatError) as caught:
            await client.chat("m", [{"role": "user", "content": "x"}], max_tokens=4)
    assert seen == ["Bearer first-key-123", "Bearer second-key-456", "Bearer second-key-456"]
    assert caught.value.kind == "credentials_error"
    assert FLAG in caught.value.message and str(path) in caught.value.message
