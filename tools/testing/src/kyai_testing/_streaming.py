"""How the double paces and streams an answer, as an engine decoding token by token.

The answer is split into the double's tokens (4 characters each, the tokenizer that counts
``usage``): reasoning first (``reasoning_content`` and/or ``reasoning`` deltas), then content.
Token ``k`` (from 0) is due ``ttft_s + k * token_s`` after the answer is ready (after the
double's ``latency_s`` and the rule's ``delay_s``), measured against the clock so that
late wake-ups do not add up. A streamed answer is sent as vLLM sends one:

- ``data: {chunk}`` events with ``object: chat.completion.chunk``; the first token's event is
  preceded by one with ``delta: {"role": "assistant", "content": ""}``; the last token's
  event carries the ``finish_reason``;
- with ``stream_options.include_usage``, a final chunk with ``choices: []`` and ``usage``;
- ``data: [DONE]``.

A whole answer is sent when its last token is due.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from kyai_testing._model import CHARS_PER_TOKEN

#: ``Content-Type`` of a streamed answer.
EVENT_STREAM = "text/event-stream; charset=utf-8"

#: How a streamed answer is damaged on the way: cut mid-body (the connection dropped) or
#: ended cleanly after an event cut inside its JSON.
CUT_CONNECTION = "connection"
CUT_EVENT = "event"


@dataclass(frozen=True)
class Timeline:
    """When an answer's tokens went out (``time.monotonic()``); what the engine observes."""

    arrived: float
    first: float
    gaps: tuple[float, ...]
    last: float


def split_tokens(text: str) -> list[str]:
    """``text`` in the double's tokens: pieces of :data:`CHARS_PER_TOKEN` characters."""
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def token_deltas(message: dict[str, Any]) -> list[dict[str, str]]:
    """The deltas of a (non-streamed) ``message``, one per token, reasoning first."""
    deltas: list[dict[str, str]] = []
    keys = [key for key in ("reasoning_content", "reasoning") if message.get(key) is not None]
    if keys:
        for piece in split_tokens(message[keys[0]]):
            deltas.append(dict.fromkeys(keys, piece))
    content = message.get("content")
    if content:
        deltas.extend({"content": piece} for piece in split_tokens(content))
    return deltas


def _empty_fields(message: dict[str, Any]) -> dict[str, str]:
    """The fields present but empty: sent once, so that the assembled answer has them."""
    keys = ("content", "reasoning_content", "reasoning")
    return {key: "" for key in keys if message.get(key) == ""}


async def until(due: float) -> None:
    """Sleep until ``time.monotonic()`` reaches ``due``."""
    delay = due - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _event(value: Any) -> bytes:
    return b"data: " + orjson.dumps(value) + b"\n\n"


async def pace_whole(arrived: float, tokens: int, ttft_s: float, token_s: float) -> Timeline:
    """Wait as long as decoding ``tokens`` takes; the timeline the engine would record."""
    ready = time.monotonic()
    first = ready + ttft_s
    gaps = (token_s,) * max(tokens - 1, 0)
    await until(first + token_s * len(gaps))
    return Timeline(arrived, first, gaps, time.monotonic())


async def stream_answer(
    request: web.Request,
    body: dict[str, Any],
    *,
    arrived: float,
    ttft_s: float,
    token_s: float,
    include_usage: bool,
    cut: str | None = None,
    observe: Callable[[Timeline], None] | None = None,
) -> web.StreamResponse:
    """Send ``body`` (a complete chat completion) as server-sent events, paced."""
    response = web.StreamResponse(
        status=200, headers={"Content-Type": EVENT_STREAM, "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    choice = body["choices"][0]
    message = choice["message"]
    deltas: list[dict[str, str]] = token_deltas(message) or [{}]
    deltas[-1].update(_empty_fields(message))
    head = {key: body[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    role = _event({**head, "choices": [_choice({"role": "assistant", "content": ""}, None)]})
    ready = time.monotonic()
    sent: list[float] = []
    for index, delta in enumerate(deltas):
        if cut is not None and index == len(deltas) // 2:
            return await _cut(request, response, cut)
        await until(ready + ttft_s + index * token_s)
        # Stamped when the token is out of the engine, before it is written, as vLLM and
        # SGLang stamp theirs: the engine's TTFT can then never exceed the client's.
        sent.append(time.monotonic())
        reason = choice["finish_reason"] if index == len(deltas) - 1 else None
        event = _event({**head, "choices": [_choice(delta, reason)]})
        await response.write(role + event if index == 0 else event)
    if observe is not None:
        gaps = tuple(after - before for before, after in itertools.pairwise(sent))
        observe(Timeline(arrived, sent[0], gaps, sent[-1]))
    if include_usage:
        await response.write(_event({**head, "choices": [], "usage": body["usage"]}))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _choice(delta: dict[str, str], reason: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}


async def _cut(request: web.Request, response: web.StreamResponse, how: str) -> web.StreamResponse:
    if how == CUT_EVENT:
        await response.write(b'data: {"id": "chatcmpl-cut", "choices": [{"ind\n\n')
        await response.write_eof()
    elif request.transport is not None:
        request.transport.close()  # the chunked body never ends: a cut connection
    return response
