"""Streamed chat completions: server-sent events assembled into one answer, and timed.

A streamed request (``"stream": true``, ``"stream_options": {"include_usage": true}``) is
answered with ``data: {json}`` events separated by blank lines and ended by ``data: [DONE]``.
:class:`SseAssembler` is fed the body's bytes read by read, as they arrive, and keeps:

- the answer, assembled from the deltas exactly as a non-streamed answer carries it:
  ``content``, ``reasoning_content`` and ``reasoning`` are the concatenations of their deltas
  (None when no delta carried the field; the empty ``content`` of the opening role chunk does
  not count), the last ``finish_reason``, the server's ``usage`` (the final chunk when
  ``include_usage`` is honoured), the response id and the served model;
- the timings, taken as ``vllm bench serve``'s ``openai-chat`` client takes them
  (``vllm/benchmarks/lib/endpoint_request_func.py``): every event is timed on its own, with
  ``time.perf_counter()`` when it is taken out of the read that completed it, so several
  events that arrive in one read get as many (close) times, never one shared time; the events
  that count are the *choice chunks*, those whose ``choices`` list is not empty, whatever
  their delta carries (vLLM's opening role chunk, content, reasoning, tool calls, an empty
  delta with the ``finish_reason``); the usage chunk (``choices: []``) and ``[DONE]`` do not.
  The first choice chunk's time is the first token's (TTFT), each later one adds the gap since
  the one before to the inter-token latencies (ITL), and the last one's time ends the request
  (E2E). An event is complete at its blank line, or, as vllm's reader takes it, as soon as a
  read ends with its ``data:`` holding a whole JSON object (the blank line may come in the
  next read).

An answer is complete only when a choice chunk said how it finished: a ``finish_reason``
other than those with which servers end an answer they did not complete
(:data:`INCOMPLETE_FINISH_REASONS`). A stream that ends without one — at ``[DONE]`` or at the
end of the body, with or without text before it — was cut short: llama-cpp-python's server
(``interrupt_requests``, its default) ends a stream with ``[DONE]`` and no ``finish_reason``
when a newer request arrives, often before the first token, and proxies or load balancers
that time out end streams the same way. A cut stream, or one whose event is not JSON, raises
:class:`StreamCutError`, which the client retries as it does a connection error, discarding
the partial answer. An event holding an ``error`` object (vLLM and SGLang report a failure
met mid-generation so) is a :class:`StreamErrorEvent`.

SSE details: lines end with LF or CRLF; an event's ``data`` lines are joined with LF (a
server never splits a JSON chunk over several, but it would be read right); other fields
(``event:``, ``id:``, ``retry:``) and comments (``: ping``) are ignored.
"""

from __future__ import annotations

import json
import time
from array import array
from collections.abc import Callable, Mapping
from typing import Any

from kyai import _json

#: What a streamed request adds to its body.
STREAM_FIELDS: Mapping[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}

#: Error statuses with which a server or gateway may refuse ``"stream": true``.
REFUSAL_STATUSES = frozenset({400, 422})

_DONE = b"[DONE]"

#: ``finish_reason`` values with which servers end an answer they did not complete: vLLM's
#: ``abort`` and ``error`` (its engine's ``FINISH_REASON_STRINGS``; ``repetition`` is a
#: complete answer), SGLang's ``abort``, TensorRT-LLM's ``cancelled`` and ``timeout``.
INCOMPLETE_FINISH_REASONS = frozenset({"abort", "error", "cancelled", "timeout"})


class StreamCutError(Exception):
    """The stream ended, or became unreadable, before the answer was complete.

    ``malformed`` says that an event could not be read (rather than that the stream stopped).
    """

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


class StreamErrorEvent(Exception):
    """The server reported an error inside the stream; ``status`` is its code when numeric."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def is_event_stream(content_type: str) -> bool:
    """Whether a response's ``Content-Type`` announces server-sent events."""
    return "text/event-stream" in content_type.lower()


def refuses_streaming(status: int, message: str) -> bool:
    """Whether an error answer refuses streaming: a 400 (or 422) whose message names it."""
    return status in REFUSAL_STATUSES and "stream" in message.lower()


class SseAssembler:
    """One streamed answer being received: feed it bytes, then :meth:`finish` it.

    ``clock`` times each event (``time.perf_counter``; tests hand in their own).
    """

    __slots__ = (
        "_buffer",
        "_clock",
        "_data",
        "choice_chunks",
        "content",
        "content_seen",
        "done",
        "finish_reason",
        "first_choice",
        "gaps_ms",
        "last_choice",
        "model",
        "reasoning",
        "reasoning_content",
        "response_id",
        "text_chunks",
        "usage",
    )

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._buffer = b""
        self._data: list[bytes] = []
        self.content: list[str] = []
        self.content_seen = False
        self.reasoning_content: list[str] | None = None
        self.reasoning: list[str] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        #: ``clock()`` of the first and of the latest choice chunk (None before the first).
        self.first_choice: float | None = None
        self.last_choice: float | None = None
        #: Milliseconds between successive choice chunks (the inter-token latencies).
        self.gaps_ms = array("d")
        #: Choice chunks, and those whose delta carried text (content or reasoning).
        self.choice_chunks = 0
        self.text_chunks = 0
        self.done = False

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the body: what one read returned."""
        buffer = self._buffer + chunk if self._buffer else chunk
        start = 0
        find = buffer.find
        while (end := find(b"\n", start)) >= 0:
            line = buffer[start:end]
            start = end + 1
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if self._data:
                    self._dispatch()
            elif line[:5] == b"data:":
                value = line[5:]
                self._data.append(value[1:] if value[:1] == b" " else value)
        self._buffer = buffer[start:]
        if self._data or self._buffer[:5] == b"data:":
            self._take_whole_object()

    def _take_whole_object(self) -> None:
        """Take the event the read ended in when its data is already a whole JSON object.

        vllm bench's reader takes a message left at the end of a read (its blank line not
        there yet) as soon as its ``data:`` parses as JSON; so does this (an object only: a
        JSON object's text has no prefix that is itself an object, so a part never passes).
        """
        parts = self._data
        rest = self._buffer
        if rest:
            if rest[:5] != b"data:":
                return  # another field's line, or a line not yet long enough to tell
            line = rest[:-1] if rest[-1:] == b"\r" else rest
            value = line[5:]
            parts = [*parts, value[1:] if value[:1] == b" " else value]
        payload = parts[0] if len(parts) == 1 else b"\n".join(parts)
        if payload[-1:] != b"}":
            return
        now = self._clock()
        try:
            event = _json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if isinstance(event, dict):
            self._data.clear()
            self._buffer = b""
            self._event(event, now)

    def finish(self) -> None:
        """The body has ended: take a last event left without its blank line, check the end.

        Raises :class:`StreamCutError` unless a choice chunk carried a ``finish_reason`` (one
        not in :data:`INCOMPLETE_FINISH_REASONS`).
        """
        if self._buffer:
            self.feed(b"\n")
        if self._data:
            self._dispatch()
        if self.finish_reason is None:
            end = "data: [DONE]" if self.done else "the end of the body"
            raise StreamCutError(
                f"{end} came before any chunk said how the answer finished (no "
                f"finish_reason), after {self.choice_chunks} chunks with a choice and "
                f"{self.text_chunks} with text"
            )
        if self.finish_reason in INCOMPLETE_FINISH_REASONS:
            raise StreamCutError(
                f"the server ended the answer with finish_reason {self.finish_reason!r} "
                f"after {self.text_chunks} chunks with text"
            )

    def _dispatch(self) -> None:
        now = self._clock()  # before parsing, as vllm bench stamps its messages
        data = self._data
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        data.clear()
        if payload == _DONE:
            self.done = True
            return
        try:
            event = _json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StreamCutError(
                f"an event of the stream is not valid JSON ({type(exc).__name__}): "
                f"{payload[:200]!r}",
                malformed=True,
            ) from None
        if not isinstance(event, dict):
            raise StreamCutError(
                f"an event of the stream is not a JSON object: {payload[:200]!r}", malformed=True
            )
        self._event(event, now)

    def _event(self, event: dict[str, Any], now: float) -> None:
        choices = event.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict):
            self._time_choice(now)
            self._choice(choices[0])
        elif event.get("error"):
            _raise_error(event)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if self.response_id is None and isinstance(event.get("id"), str):
            self.response_id = event["id"]
        if self.model is None and isinstance(event.get("model"), str):
            self.model = event["model"]

    def _time_choice(self, now: float) -> None:
        """A choice chunk arrived at ``now``: the first token's time, or one more gap."""
        self.choice_chunks += 1
        if self.last_choice is None:
            self.first_choice = now
        else:
            self.gaps_ms.append((now - self.last_choice) * 1000.0)
        self.last_choice = now

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        text = False
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                if content:
                    self.content.append(content)
                    self.content_seen = text = True
                elif "role" not in delta:
                    self.content_seen = True
            thinking = delta.get("reasoning_content")
            if isinstance(thinking, str):
                if self.reasoning_content is None:
                    self.reasoning_content = []
                self.reasoning_content.append(thinking)
                text = text or bool(thinking)
            thinking = delta.get("reasoning")
            if isinstance(thinking, str):
                if self.reasoning is None:
                    self.reasoning = []
                self.reasoning.append(thinking)
                text = text or bool(thinking)
        self.text_chunks += text
        reason = choice.get("finish_reason")
        if reason is not None:
            self.finish_reason = reason

    def joined(self) -> tuple[str | None, str | None, str | None]:
        """``content``, ``reasoning_content``, ``reasoning`` as a non-streamed answer has them.

        A finished answer that carried neither content nor reasoning (the model stopped at
        once) is the empty content ``""``, as a non-streamed answer has it.
        """
        empty = self.reasoning_content is None and self.reasoning is None
        content = "".join(self.content) if self.content_seen or empty else None
        thinking = None if self.reasoning_content is None else "".join(self.reasoning_content)
        reasoning = None if self.reasoning is None else "".join(self.reasoning)
        return content, thinking, reasoning


def _raise_error(event: Mapping[str, Any]) -> None:
    inner = event.get("error")
    payload = inner if isinstance(inner, Mapping) else event
    message = payload.get("message")
    text = message if isinstance(message, str) and message else str(inner)[:500]
    code = payload.get("code")
    status = code if isinstance(code, int) and not isinstance(code, bool) else None
    raise StreamErrorEvent(text, status)
