"""Server-sent events assembled into one answer, timed (no I/O: bytes fed by hand)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kyai.evaluation._stream import (
    SseAssembler,
    StreamCutError,
    StreamErrorEvent,
    is_event_stream,
    refuses_streaming,
)


def event(delta: dict[str, Any] | None = None, reason: str | None = None, **top: Any) -> bytes:
    body: dict[str, Any] = {"id": "c1", "model": "m", "object": "chat.completion.chunk", **top}
    if "choices" not in top:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": reason}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


ROLE = event({"role": "assistant", "content": ""})
USAGE = event(choices=[], usage={"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6})
DONE = b"data: [DONE]\n\n"


def test_an_answer_is_assembled_and_timed_like_vllm_bench() -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "Hel"}), 1.0)
    events.feed(event({"content": "lo"}), 1.5)
    events.feed(event({"content": "!"}, "stop"), 1.75)
    events.feed(USAGE, 1.8)
    events.feed(DONE, 1.9)
    events.finish(2.0)
    assert events.joined() == ("Hello!", None, None)
    assert events.finish_reason == "stop"
    assert events.usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert (events.response_id, events.model) == ("c1", "m")
    assert events.first_text == 1.0  # the role chunk carries no text
    assert list(events.gaps_ms) == [500.0, 250.0]
    assert events.text_chunks == 3
    assert events.last_event == 1.8  # the usage chunk; [DONE] is not a JSON chunk


def test_reasoning_is_assembled_from_both_spellings_and_counts_as_text() -> None:
    events = SseAssembler()
    events.feed(event({"reasoning_content": "think "}), 0.1)
    events.feed(event({"reasoning_content": "hard", "reasoning": "hard"}), 0.2)
    events.feed(event({"content": "<think>x</think>A"}, "stop") + DONE, 0.3)
    events.finish(0.4)
    content, reasoning_content, reasoning = events.joined()
    assert content == "<think>x</think>A"  # kept verbatim: the judge-facing copy strips it
    assert reasoning_content == "think hard"
    assert reasoning == "hard"
    assert events.first_text == 0.1
    assert events.text_chunks == 3


def test_events_split_anywhere_and_crlf_and_comments_are_read() -> None:
    whole = (
        b": ping\r\n\r\n"
        + ROLE.replace(b"\n", b"\r\n")
        + b"event: message\n"
        + event({"content": "ab"}, "stop")
        + DONE
    )
    events = SseAssembler()
    for index in range(len(whole)):  # one byte at a time
        events.feed(whole[index : index + 1], float(index))
    events.finish(float(len(whole)))
    assert events.joined()[0] == "ab"
    assert events.done


def test_a_multi_line_data_event_is_joined_with_a_line_feed() -> None:
    events = SseAssembler()
    events.feed(b'data: {"choices": [{"delta": {"content": "x"},\n', 1.0)
    events.feed(b'data: "finish_reason": "stop"}]}\n\n', 1.0)
    events.finish(1.0)
    assert events.joined()[0] == "x"
    assert events.finish_reason == "stop"


def test_empty_content_and_role_chunk() -> None:
    only_role = SseAssembler()
    only_role.feed(ROLE + event({"reasoning_content": "r"}, "length") + DONE, 1.0)
    only_role.finish(1.0)
    assert only_role.joined() == (None, "r", None)  # as a non-streamed null content
    empty = SseAssembler()
    empty.feed(ROLE + event({"content": ""}, "stop") + DONE, 1.0)
    empty.finish(1.0)
    assert empty.joined() == ("", None, None)  # an empty answer stays empty
    assert empty.first_text is None
    assert empty.text_chunks == 0


def test_a_stream_without_its_end_is_cut() -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "half"}), 1.0)
    with pytest.raises(StreamCutError) as caught:
        events.finish(2.0)
    assert not caught.value.malformed
    assert "the end of the body came before" in str(caught.value)
    assert "no finish_reason" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "chunks"),
    [
        # llama-cpp-python's interrupted stream: its role chunk, then [DONE].
        (ROLE + DONE, "after 1 chunks with a choice and 0 with text"),
        # A proxy that gave up after some text.
        (ROLE + event({"content": "half"}) + DONE, "after 2 chunks with a choice and 1 with"),
        # Every token and the usage, but no chunk said how the answer finished.
        (ROLE + event({"content": "all"}) + USAGE + DONE, "after 2 chunks with a choice"),
        # Nothing but [DONE].
        (DONE, "after 0 chunks with a choice"),
    ],
    ids=["role-then-done", "text-then-done", "usage-no-finish", "done-alone"],
)
def test_done_without_a_finish_reason_is_a_cut_stream(body: bytes, chunks: str) -> None:
    events = SseAssembler()
    events.feed(body, 1.0)
    with pytest.raises(StreamCutError) as caught:
        events.finish(1.0)
    assert not caught.value.malformed
    assert str(caught.value).startswith("data: [DONE] came before any chunk said how")
    assert chunks in str(caught.value)


@pytest.mark.parametrize("reason", ["abort", "error", "cancelled", "timeout"])
def test_a_finish_reason_of_an_unfinished_answer_is_a_cut_stream(reason: str) -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "hal"}) + event({}, reason) + USAGE + DONE, 1.0)
    with pytest.raises(StreamCutError) as caught:
        events.finish(1.0)
    assert not caught.value.malformed
    assert f"finish_reason {reason!r}" in str(caught.value)


@pytest.mark.parametrize("reason", ["stop", "length", "repetition", "tool_calls"])
def test_a_finished_answer_is_complete_whatever_its_reason(reason: str) -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "ok"}, reason) + DONE, 1.0)
    events.finish(1.0)
    assert (events.joined()[0], events.finish_reason) == ("ok", reason)


def test_a_finished_answer_without_any_text_is_the_empty_content() -> None:
    events = SseAssembler()
    events.feed(ROLE + event({}, "stop") + USAGE + DONE, 1.0)
    events.finish(1.0)
    assert events.joined() == ("", None, None)  # the model stopped at once: not None


def test_a_finish_reason_without_done_is_complete() -> None:
    events = SseAssembler()
    events.feed(event({"content": "ok"}, "stop"), 1.0)
    events.finish(1.0)  # some servers never send [DONE]
    assert events.joined()[0] == "ok"


def test_an_event_cut_inside_its_json_is_malformed() -> None:
    events = SseAssembler()
    with pytest.raises(StreamCutError) as caught:
        events.feed(ROLE + b'data: {"id": "x", "choi\n\n', 1.0)
    assert caught.value.malformed


def test_a_stream_of_no_choice_is_cut() -> None:
    events = SseAssembler()
    events.feed(USAGE + DONE, 1.0)
    with pytest.raises(StreamCutError) as caught:
        events.finish(1.0)
    assert not caught.value.malformed  # retried as stream_incomplete: never an answer


def test_an_error_event_raises_with_its_code() -> None:
    events = SseAssembler()
    error = b'data: {"error": {"message": "engine died", "type": "x", "code": 503}}\n\n'
    with pytest.raises(StreamErrorEvent) as caught:
        events.feed(ROLE + error, 1.0)
    assert (caught.value.message, caught.value.status) == ("engine died", 503)
    null_error = SseAssembler()
    null_error.feed(event({"content": "a"}, "stop", error=None) + DONE, 1.0)  # OpenAI's null
    null_error.finish(1.0)
    assert null_error.joined()[0] == "a"


def test_helpers() -> None:
    assert is_event_stream("text/event-stream; charset=utf-8")
    assert not is_event_stream("application/json")
    assert refuses_streaming(400, "Streaming is not supported")
    assert refuses_streaming(422, "stream: extra fields not permitted")
    assert not refuses_streaming(400, "max_tokens is too large")
    assert not refuses_streaming(500, "stream broke")
