"""What the gateway reads and changes in requests and answers; what it redacts."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from kyai.gateway import (
    REDACTED,
    BodyError,
    RedactingFilter,
    Redactor,
    StreamUsage,
    only_model,
    prepare_chat,
    usage_of,
)

MODEL = "judge-model"


def test_a_plain_chat_request_is_forwarded_byte_for_byte() -> None:
    raw = b'{"model": "judge-model", "messages": [], "temperature": 0}'
    assert prepare_chat(raw, MODEL) == (raw, False)


def test_a_streamed_request_is_made_to_report_usage() -> None:
    body, streamed = prepare_chat(
        json.dumps({"model": MODEL, "stream": True, "stream_options": {"x": 1}}).encode(), MODEL
    )
    assert streamed
    assert json.loads(body)["stream_options"] == {"x": 1, "include_usage": True}
    raw = json.dumps(
        {"model": MODEL, "stream": True, "stream_options": {"include_usage": True}}
    ).encode()
    assert prepare_chat(raw, MODEL) == (raw, True)
    body, _ = prepare_chat(json.dumps({"model": MODEL, "stream": True}).encode(), MODEL)
    assert json.loads(body)["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("raw", "status", "reason", "words"),
    [
        (b"{not json", 400, "InvalidBody", "not JSON"),
        (b"[1, 2]", 400, "InvalidBody", "a JSON object"),
        (b'{"messages": []}', 400, "MissingModel", "model is required (the default judge is"),
        (b'{"model": "gpt-5"}', 403, "ModelNotAllowed", "model 'gpt-5' is not served here"),
        (b'{"model": 7}', 403, "ModelNotAllowed", "model 7"),
    ],
)
def test_requests_the_gateway_refuses(raw: bytes, status: int, reason: str, words: str) -> None:
    with pytest.raises(BodyError) as refused:
        prepare_chat(raw, MODEL)
    assert (refused.value.status, refused.value.reason) == (status, reason)
    assert words in str(refused.value)


def test_usage_of_a_whole_answer() -> None:
    assert usage_of(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
    }
    for raw in (b"", b"oops", b"[]", b'{"usage": null}', b'{"usage": 5}'):
        assert usage_of(raw) is None


def test_usage_is_found_in_a_stream_whatever_the_chunks() -> None:
    events = [
        {"choices": [{"delta": {"content": "hel"}}], "usage": None},
        {"choices": [{"delta": {"content": "lo"}}], "usage": None},
        {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}},
    ]
    stream = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    data = stream.encode()
    for size in (1, 3, 7, 64, len(data)):
        found = StreamUsage()
        for start in range(0, len(data), size):
            found.feed(data[start : start + size])
        found.close()
        assert found.usage == {"prompt_tokens": 11, "completion_tokens": 2}, size
    # The last event without its line feed is looked at when the stream ends.
    tail = StreamUsage()
    tail.feed(b'data: {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}')
    assert tail.usage is None
    tail.close()
    assert tail.usage == {"prompt_tokens": 1, "completion_tokens": 1}
    nothing = StreamUsage()
    nothing.feed(b': comment "usage"\nevent: x\ndata: {"usage": {}}\n')
    nothing.close()
    assert nothing.usage is None


def test_only_the_default_judges_model_is_listed() -> None:
    raw = json.dumps(
        {"object": "list", "data": [{"id": "a"}, {"id": MODEL, "max_model_len": 8192}, "odd"]}
    ).encode()
    assert json.loads(only_model(raw, MODEL) or b"") == {
        "object": "list",
        "data": [{"id": MODEL, "max_model_len": 8192}],
    }
    assert only_model(b'{"data": "x"}', MODEL) is None and only_model(b"<html>", MODEL) is None


def test_the_redactor_catches_the_key_raw_and_base64_encoded() -> None:
    key = "sk-live-0123456789abcdef"
    redactor = Redactor()
    redactor.add(key)
    redactor.add("short")  # too short to redact safely: ignored
    encoded = base64.b64encode(f"Authorization: Bearer {key}".encode()).decode()
    urlsafe = base64.urlsafe_b64encode(f"x{key}".encode()).decode()
    text = f"got {key}; header {encoded}; again {urlsafe}; short stays"
    cleaned = redactor.text(text)
    assert key not in cleaned and "short stays" in cleaned
    assert cleaned.count(REDACTED) == 3
    assert redactor.bytes(text.encode()) == cleaned.encode()
    rotated = "sk-live-fedcba9876543210"
    redactor.add(rotated)
    assert redactor.text(f"{key} {rotated}") == f"{REDACTED} {REDACTED}"


def test_logs_never_show_bearer_credentials_jwts_or_the_key() -> None:
    redactor = Redactor()
    redactor.add("sk-live-0123456789abcdef")
    token = "eyJhbGciOiJSUzI1NiJ9.eyJhdWQiOlsia3lhaSJdfQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    record = logging.LogRecord(
        "kyai.gateway", logging.INFO, __file__, 1, "sent %s with %s, saw %s", None, None
    )
    record.args = ("Authorization: Bearer abc.def", "sk-live-0123456789abcdef", token)
    assert RedactingFilter(redactor).filter(record)
    message = record.getMessage()
    assert "abc.def" not in message and "sk-live" not in message and token not in message
    assert message == f"sent Authorization: Bearer {REDACTED} with {REDACTED}, saw {REDACTED}"
