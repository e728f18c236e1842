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


class Clock:
    """A stand-in for ``time.perf_counter``: set ``now`` before a read; each reading of it
    moves it on by ``step`` (one event's processing), as a real clock moves between events."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_an_answer_is_assembled_and_timed_like_vllm_bench() -> None:
    clock = Clock()
    events = SseAssembler(clock)
    clock.now = 1.0
    events.feed(ROLE + event({"content": "Hel"}))  # one read: two events, two times
    clock.now = 1.5
    events.feed(event({"content": "lo"}))
    clock.now = 1.75
    events.feed(event({"content": "!"}, "stop"))
    clock.now = 1.8
    events.feed(USAGE)
    events.feed(DONE)
    events.finish()
    assert events.joined() == ("Hello!", None, None)
    assert events.finish_reason == "stop"
    assert events.usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert (events.response_id, events.model) == ("c1", "m")
    # TTFT at the first chunk with a choice: vLLM's role chunk (sent with the first token).
    assert events.first_choice == pytest.approx(1.001)
    assert list(events.gaps_ms) == pytest.approx([1.0, 499.0, 250.0])
    assert (events.choice_chunks, events.text_chunks) == (4, 3)
    assert events.last_choice == pytest.approx(1.751)  # E2E: not the usage chunk, not [DONE]


def test_several_events_in_one_read_are_timed_one_by_one_as_vllm_bench_does() -> None:
    """N choice chunks in one read: N times (one per event, as each is taken out of the read),
    so N - 1 gaps of the time between them; none dropped, merged or set to zero. (Timed per
    read, they were one time: gaps of exactly 0 ms, and the chunks without text dropped.)"""
    clock = Clock(step=0.0002)
    events = SseAssembler(clock)
    clock.now = 0.5
    events.feed(ROLE + event({"content": "a"}))
    clock.now = 1.0
    batch = [event({"content": c}) for c in "bcd"] + [event({}, "stop")]
    events.feed(b"".join(batch) + USAGE + DONE)
    events.finish()
    assert events.joined()[0] == "abcd"
    assert events.choice_chunks == 6 and events.text_chunks == 4
    assert events.first_choice == pytest.approx(0.5002)
    assert list(events.gaps_ms) == pytest.approx([0.2, 499.8, 0.2, 0.2, 0.2])
    assert all(gap > 0 for gap in events.gaps_ms)
    assert events.last_choice == pytest.approx(1.0008)  # the empty finish chunk ends E2E


def test_every_choice_chunk_counts_reasoning_tool_calls_and_empty_deltas() -> None:
    """vllm bench times any event whose ``choices`` is not empty, whatever its delta holds."""
    clock = Clock()
    events = SseAssembler(clock)
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "hmm"},
        {"reasoning": "hmm"},
        {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]},
        {"content": ""},
        {"content": "A"},
    ]
    for number, delta in enumerate(deltas):
        clock.now = float(number)
        events.feed(event(delta))
    clock.now = 10.0
    events.feed(event({}, "stop") + USAGE + DONE)
    events.finish()
    assert events.choice_chunks == 7 and events.text_chunks == 3
    assert events.first_choice == pytest.approx(0.001)
    assert list(events.gaps_ms) == pytest.approx([1000.0] * 5 + [5000.0])
    assert events.last_choice == pytest.approx(10.001)


def test_an_event_is_taken_in_the_read_that_completes_its_json() -> None:
    """As vllm bench's reader: a read ending after an event's JSON (its blank line still to
    come) delivers the event then; the blank line then adds nothing."""
    clock = Clock()
    events = SseAssembler(clock)
    clock.now = 1.0
    events.feed(ROLE.rstrip(b"\n"))  # no line end at all
    clock.now = 2.0
    events.feed(b"\n\n" + event({"content": "ab"}).rstrip(b"\n") + b"\n")  # one line end
    clock.now = 3.0
    events.feed(b"\n" + event({"content": "cd"})[:-6])  # cut inside the JSON: not yet
    clock.now = 4.0
    events.feed(event({"content": "cd"})[-6:] + event({}, "stop") + DONE)
    events.finish()
    assert events.joined()[0] == "abcd"
    assert events.choice_chunks == 4
    assert events.first_choice == pytest.approx(1.001)
    assert list(events.gaps_ms) == pytest.approx([1000.0, 2000.0, 1.0])


def test_reasoning_is_assembled_from_both_spellings_and_counts_as_text() -> None:
    clock = Clock()
    events = SseAssembler(clock)
    clock.now = 0.1
    events.feed(event({"reasoning_content": "think "}))
    clock.now = 0.2
    events.feed(event({"reasoning_content": "hard", "reasoning": "hard"}))
    clock.now = 0.3
    events.feed(event({"content": "<think>x</think>A"}, "stop") + DONE)
    events.finish()
    content, reasoning_content, reasoning = events.joined()
    assert content == "<think>x</think>A"  # kept verbatim: the judge-facing copy strips it
    assert reasoning_content == "think hard"
    assert reasoning == "hard"
    assert events.first_choice == pytest.approx(0.101)
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
        events.feed(whole[index : index + 1])
    events.finish()
    assert events.joined()[0] == "ab"
    assert events.done


def test_a_multi_line_data_event_is_joined_with_a_line_feed() -> None:
    events = SseAssembler()
    events.feed(b'data: {"choices": [{"delta": {"content": "x"},\n')
    events.feed(b'data: "finish_reason": "stop"}]}\n\n')
    events.finish()
    assert events.joined()[0] == "x"
    assert events.finish_reason == "stop"


def test_empty_content_and_role_chunk() -> None:
    only_role = SseAssembler()
    only_role.feed(ROLE + event({"reasoning_content": "r"}, "length") + DONE)
    only_role.finish()
    assert only_role.joined() == (None, "r", None)  # as a non-streamed null content
    empty = SseAssembler()
    empty.feed(ROLE + event({"content": ""}, "stop") + DONE)
    empty.finish()
    assert empty.joined() == ("", None, None)  # an empty answer stays empty
    assert empty.text_chunks == 0
    assert empty.choice_chunks == 2  # timed all the same: vllm bench counts it a success


def test_a_stream_without_its_end_is_cut() -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "half"}))
    with pytest.raises(StreamCutError) as caught:
        events.finish()
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
    events.feed(body)
    with pytest.raises(StreamCutError) as caught:
        events.finish()
    assert not caught.value.malformed
    assert str(caught.value).startswith("data: [DONE] came before any chunk said how")
    assert chunks in str(caught.value)


@pytest.mark.parametrize("reason", ["abort", "error", "cancelled", "timeout"])
def test_a_finish_reason_of_an_unfinished_answer_is_a_cut_stream(reason: str) -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "hal"}) + event({}, reason) + USAGE + DONE)
    with pytest.raises(StreamCutError) as caught:
        events.finish()
    assert not caught.value.malformed
    assert f"finish_reason {reason!r}" in str(caught.value)


@pytest.mark.parametrize("reason", ["stop", "length", "repetition", "tool_calls"])
def test_a_finished_answer_is_complete_whatever_its_reason(reason: str) -> None:
    events = SseAssembler()
    events.feed(ROLE + event({"content": "ok"}, reason) + DONE)
    events.finish()
    assert (events.joined()[0], events.finish_reason) == ("ok", reason)


def test_a_finished_answer_without_any_text_is_the_empty_content() -> None:
    events = SseAssembler()
    events.feed(ROLE + event({}, "stop") + USAGE + DONE)
    events.finish()
    assert events.joined() == ("", None, None)  # the model stopped at once: not None


def test_a_finish_reason_without_done_is_complete() -> None:
    events = SseAssembler()
    events.feed(event({"content": "ok"}, "stop"))
    events.finish()  # some servers never send [DONE]
    assert events.joined()[0] == "ok"


def test_an_event_cut_inside_its_json_is_malformed() -> None:
    events = SseAssembler()
    with pytest.raises(StreamCutError) as caught:
        events.feed(ROLE + b'data: {"id": "x", "choi\n\n')
    assert caught.value.malformed


def test_a_stream_of_no_choice_is_cut() -> None:
    events = SseAssembler()
    events.feed(USAGE + DONE)
    with pytest.raises(StreamCutError) as caught:
        events.finish()
    assert not caught.value.malformed  # retried as stream_incomplete: never an answer


def test_an_error_event_raises_with_its_code() -> None:
    events = SseAssembler()
    error = b'data: {"error": {"message": "engine died", "type": "x", "code": 503}}\n\n'
    with pytest.raises(StreamErrorEvent) as caught:
        events.feed(ROLE + error)
    assert (caught.value.message, caught.value.status) == ("engine died", 503)
    null_error = SseAssembler()
    null_error.feed(event({"content": "a"}, "stop", error=None) + DONE)  # OpenAI's null
    null_error.finish()
    assert null_error.joined()[0] == "a"


def test_helpers() -> None:
    assert is_event_stream("text/event-stream; charset=utf-8")
    assert not is_event_stream("application/json")
    assert refuses_streaming(400, "Streaming is not supported")
    assert refuses_streaming(422, "stream: extra fields not permitted")
    assert not refuses_streaming(400, "max_tokens is too large")
    assert not refuses_streaming(500, "stream broke")
