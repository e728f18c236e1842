"""A stream whose body ends right after its last event, without a final line end.

Issue 45, item 14. Servers and proxies may close the body right after the last event's JSON
(no blank line, not even a line feed; no ``[DONE]``). When that event carried a
``finish_reason`` the answer is complete: taken when the read ends with a whole JSON object,
or when the body ends (:meth:`SseAssembler.finish`) for an event that could not be told
whole before (trailing blanks, a field line after it, reads of one byte). Without a
``finish_reason`` the same end is a cut stream. Then through the client, once: an answer
whose body so ends is returned, not retried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from kyai.evaluation import ChatClient, RetryPolicy
from kyai.evaluation._stream import SseAssembler, StreamCutError


def line(delta: dict[str, Any], reason: str | None = None) -> bytes:
    """One event's ``data:`` line, without any line end."""
    body = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": reason}]}  # fmt: skip
    return b"data: " + json.dumps(body).encode()


HEAD = line({"role": "assistant", "content": ""}) + b"\n\n" + line({"content": "Par"}) + b"\n\n"
LAST = line({"content": "is"}, "stop")
UNFINISHED = line({"content": "is"})

#: Bodies ending right after the last event, by what follows its JSON (nothing at all).
ENDS = {
    "json": LAST,
    "blanks": LAST + b"  ",  # the JSON is whole, but the line is not seen to end in "}"
    "crlf-half": LAST + b"\r",
    "field-after": LAST + b"\nid: 7",
    "line-feed-only": LAST + b"\n",
}


def feed(body: bytes, size: int | None) -> SseAssembler:
    events = SseAssembler()
    step = size or len(body)
    for start in range(0, len(body), step):
        events.feed(body[start : start + step])
    return events


@pytest.mark.parametrize("size", [None, 1, 7], ids=["one-read", "byte-by-byte", "reads-of-7"])
@pytest.mark.parametrize("end", list(ENDS), ids=list(ENDS))
def test_a_body_ending_after_an_event_with_a_finish_reason_is_a_complete_answer(
    end: str, size: int | None
) -> None:
    events = feed(HEAD + ENDS[end], size)
    events.finish()
    assert events.joined() == ("Paris", None, None)
    assert events.finish_reason == "stop"
    assert (events.choice_chunks, events.text_chunks, events.done) == (3, 2, False)


@pytest.mark.parametrize("tail", [b"", b"\r"], ids=["json", "crlf-half"])
@pytest.mark.parametrize("size", [None, 1], ids=["one-read", "byte-by-byte"])
def test_the_last_event_is_taken_by_the_read_that_ends_with_its_json(
    size: int | None, tail: bytes
) -> None:
    """As vllm bench's reader: timed when it arrives, not when the body is seen to end."""
    events = feed(HEAD + LAST + tail, size)
    assert events.finish_reason == "stop" and events.choice_chunks == 3
    events.finish()
    assert events.choice_chunks == 3  # not taken twice


@pytest.mark.parametrize("tail", [b"", b"  ", b"\nid: 7"], ids=["json", "blanks", "field-after"])
def test_the_same_end_without_a_finish_reason_is_a_cut_stream(tail: bytes) -> None:
    events = feed(HEAD + UNFINISHED + tail, None)
    with pytest.raises(StreamCutError, match=r"the end of the body came before") as caught:
        events.finish()
    assert not caught.value.malformed
    assert "after 3 chunks with a choice and 2 with text" in str(caught.value)


def test_a_last_event_cut_inside_its_json_at_the_end_of_the_body_is_malformed() -> None:
    events = feed(HEAD + LAST[:-3], None)
    with pytest.raises(StreamCutError) as caught:
        events.finish()
    assert caught.value.malformed


class Body(httpx.AsyncByteStream):
    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part


@pytest.mark.parametrize("end", ["json", "blanks"])
async def test_the_client_returns_such_an_answer_without_asking_again(end: str) -> None:
    asked: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.content)
        stream = Body(HEAD, ENDS[end])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    retry = RetryPolicy(max_retries=2, backoff_base_s=0.001, backoff_max_s=0.01)
    transport = httpx.MockTransport(handler)
    async with ChatClient("http://llm.test", retry=retry, transport=transport) as client:
        result = await client.chat(
            "m", [{"role": "user", "content": "capital?"}], max_tokens=5, stream=True
        )
    assert (result.content, result.finish_reason, result.streamed) == ("Paris", "stop", True)
    assert len(asked) == 1
