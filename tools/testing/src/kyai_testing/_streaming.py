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

``events_per_write`` > 1 sends the token events in groups, each group in one write when its
last token is due (the role chunk with the first group): what a client sees when several
events reach it in one read (a proxy that buffers, a client whose event loop was busy). The
engine's timeline still stamps every token when it is due, so the engine's figures stay
those of the pacing while the client's show the batching.

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

#: How a streamed answer is damaged on the way, half-way through its tokens: cut mid-body
#: (the connection dropped); ended cleanly after an event cut inside its JSON; ended with
#: ``[DONE]`` and no ``finish_reason``; ended cleanly without either; ended by vLLM's
#: ``finish_reason: "abort"``. ``CUT_NO_FINISH`` sends every token but no ``finish_reason``.
CUT_CONNECTION = "connection"
CUT_EVENT = "event"
CUT_DONE = "done"
CUT_EOF = "eof"
CUT_ABORT = "abort"
CUT_NO_FINISH = "no_finish"


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
    interrupted: Callable[[], bool] | None = None,
    events_per_write: int = 1,
) -> web.StreamResponse:
    """Send ``body`` (a complete chat completion) as server-sent events, paced.

    ``cut`` damages the stream (one of the ``CUT_*`` kinds). ``interrupted`` is asked after
    each event is written, as llama-cpp-python's server asks whether a newer request waits
    (``interrupt_requests``): when it says so the stream ends at once with ``data: [DONE]``
    and no ``finish_reason`` (each event is then written on its own). ``events_per_write``
    token events go out in one write (see the module's docstring).
    """
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
    pending = b""  # events held back for the next write (events_per_write > 1)
    for index, delta in enumerate(deltas):
        if cut in _CUTS_HALF_WAY and index == len(deltas) // 2:
            if pending:
                await response.write(pending)
            return await _cut(request, response, cut or "", head)
        await until(ready + ttft_s + index * token_s)
        # Stamped when the token is out of the engine, before it is written, as vLLM and
        # SGLang stamp theirs: the engine's TTFT can then never exceed the client's.
        sent.append(time.monotonic())
        last = index == len(deltas) - 1
        reason = choice["finish_reason"] if last and cut != CUT_NO_FINISH else None
        event = _event({**head, "choices": [_choice(delta, reason)]})
        if interrupted is None:
            pending += role + event if index == 0 else event
            if last or (index + 1) % events_per_write == 0:
                await response.write(pending)
                pending = b""
            continue
        # llama-cpp-python writes its role chunk on its own and looks for a newer request
        # after every chunk: often its interrupted streams carry no token at all.
        for piece in (role, event) if index == 0 else (event,):
            await response.write(piece)
            if interrupted():
                return await _cut(request, response, CUT_DONE, head)
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


#: The cuts that end a stream half-way through its tokens.
_CUTS_HALF_WAY = frozenset({CUT_CONNECTION, CUT_EVENT, CUT_DONE, CUT_EOF, CUT_ABORT})


async def _cut(
    request: web.Request, response: web.StreamResponse, how: str, head: dict[str, Any]
) -> web.StreamResponse:
    if how == CUT_CONNECTION:
        if request.transport is not None:
            request.transport.close()  # the chunked body never ends: a cut connection
        return response
    if how == CUT_EVENT:
        await response.write(b'data: {"id": "chatcmpl-cut", "choices": [{"ind\n\n')
    elif how == CUT_ABORT:
        await response.write(_event({**head, "choices": [_choice({}, "abort")]}))
        await response.write(b"data: [DONE]\n\n")
    elif how == CUT_DONE:
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()  # CUT_EOF: the body simply ends
    return response
