"""The OpenAI-compatible test double: an aiohttp server on loopback with scripted answers."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import web

from kyai_testing._faults import (
    FAULT_ABORT,
    FAULT_CLOSE,
    FAULT_CUT_JSON,
    FAULT_DONE_EARLY,
    FAULT_EOF_EARLY,
    FAULT_NO_FINISH,
    FAULT_RESET,
    FAULT_SHORT_BODY,
    FAULT_STALL,
    STATUS_FAULTS,
    Faults,
)
from kyai_testing._metrics import CONTENT_TYPE, EngineMetrics, MetricsFamily
from kyai_testing._model import (
    CHARS_PER_TOKEN,
    DEFAULT_CONTENT,
    ChatRequest,
    DoubleConfigError,
    ModelSpec,
    RecordedRequest,
    Rule,
    count_prompt_tokens,
    count_text_tokens,
)
from kyai_testing._servers import (
    OWNED_BY,
    Answer,
    OverflowStyle,
    error_answer,
    model_not_found_answer,
    prompt_overflow_answer,
    status_phrase,
    total_overflow_answer,
    unauthorized_answer,
)
from kyai_testing._streaming import (
    CUT_ABORT,
    CUT_CONNECTION,
    CUT_DONE,
    CUT_EOF,
    CUT_EVENT,
    CUT_NO_FINISH,
    Timeline,
    pace_whole,
    stream_answer,
)

#: Message of the 400 answered to ``"stream": true`` in the ``refuse`` stream mode.
STREAMING_NOT_SUPPORTED = "streaming not supported by the double"

#: How the double answers ``"stream": true``: with server-sent events (as engines do), with a
#: 400 naming ``stream`` (as some gateways do) or with plain JSON (ignoring the field).
STREAM_MODES = ("stream", "refuse", "ignore")

#: Largest request body accepted (long prompts are the point of some tests).
MAX_BODY_BYTES = 256 * 1024 * 1024

#: Seconds the server waits for in-flight requests when it stops.
SHUTDOWN_TIMEOUT_S = 1.0

#: Seconds to wait for the background thread's server to start or stop.
THREAD_TIMEOUT_S = 30.0


class DoubleNotRunningError(RuntimeError):
    """The double's address was asked for before it started or after it stopped."""


@dataclass
class _Reply:
    """What the chat handler decided to send; ``drop`` closes the socket instead."""

    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    rule: int | None = None
    drop: bool = False
    #: The request's prompt size, for an answer (``usage``'s own figure).
    prompt_tokens: int = 0


def _reply(answer: Answer, *, rule: int | None = None) -> _Reply:
    status, body = answer
    return _Reply(status=status, body=body, rule=rule)


def _fit(text: str, budget: int) -> tuple[str, int, bool]:
    """``text`` cut to ``budget`` tokens: (text, tokens used, whether it was cut)."""
    tokens = count_text_tokens(text)
    if tokens <= budget:
        return text, tokens, False
    return text[: budget * CHARS_PER_TOKEN], budget, True


class LLMDouble:
    """An OpenAI-compatible chat server for tests: scripted answers, real error wording.

    Serves ``GET /health``, ``GET /v1/models``, ``POST /v1/chat/completions`` (streamed when
    asked, see :mod:`kyai_testing._streaming`; ``stream_mode`` ``refuse`` or ``ignore`` to
    imitate servers that do not stream) and ``GET /metrics`` (vLLM's or SGLang's serving
    histograms, :mod:`kyai_testing._metrics`) on ``host:port`` (port 0 picks a free one).
    Answers take ``latency_s`` (plus the rule's ``delay_s``), then ``ttft_s`` to the first
    token and ``token_s`` per further token (``events_per_write`` > 1: that many token events
    in each write of a stream). Use it as an async context manager inside a
    test's event loop, or through :meth:`start_in_thread` for code that runs elsewhere (a
    ``kyai`` subprocess, a synchronous test).

    Every chat request is recorded in :attr:`requests`; :attr:`max_in_flight` is the
    highest number of chat requests served at the same time.
    """

    def __init__(
        self,
        *,
        models: Sequence[ModelSpec] = (ModelSpec("candidate"),),
        rules: Sequence[Rule] = (),
        latency_s: float = 0.0,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Faults | None = None,
        echo_headers: bool = False,
        ttft_s: float = 0.0,
        token_s: float = 0.0,
        stream_mode: str = "stream",
        metrics: MetricsFamily | None = None,
        interrupt_requests: bool = False,
        unauthorized_status: int = 401,
        events_per_write: int = 1,
    ) -> None:
        if not models:
            raise DoubleConfigError("The double needs at least one model to serve.")
        names = [model.name for model in models]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise DoubleConfigError(f"Model names must be unique; repeated: {duplicates}.")
        for name, value in (("latency_s", latency_s), ("ttft_s", ttft_s), ("token_s", token_s)):
            if value < 0:
                raise DoubleConfigError(f"{name}={value} must not be negative.")
        if events_per_write < 1:
            raise DoubleConfigError(f"events_per_write={events_per_write} must be at least 1.")
        if stream_mode not in STREAM_MODES:
            raise DoubleConfigError(
                f"stream_mode={stream_mode!r} is not one of {', '.join(STREAM_MODES)}."
            )
        self.models: dict[str, ModelSpec] = {model.name: model for model in models}
        self.rules: list[Rule] = list(rules)
        self.latency_s = latency_s
        self.api_key = api_key
        #: Seeded fault injection on chat requests (None: no faults).
        self.faults = faults
        #: Error answers echo the request's Authorization header (raw and base64), as some
        #: gateways do: for testing that a client never stores what it sent.
        self.echo_headers = echo_headers
        #: Seconds from an answer being ready to its first token, and between tokens.
        self.ttft_s = ttft_s
        self.token_s = token_s
        #: How ``"stream": true`` is answered (one of :data:`STREAM_MODES`).
        self.stream_mode = stream_mode
        #: Token events sent in one write: several reach the client in one read, as behind a
        #: buffering proxy (the engine's metrics still see every token when it is due).
        self.events_per_write = events_per_write
        #: Serve one chat request at a time and end a stream with ``[DONE]`` (no
        #: ``finish_reason``) as soon as a newer request waits, as llama-cpp-python's server
        #: does with ``interrupt_requests`` (its default): its two locks, the outer held by
        #: the request waiting for the model, the inner by the one being answered.
        self.interrupt_requests = interrupt_requests
        #: The status of an answer to a missing or wrong key: 401 as vLLM, SGLang and
        #: llama.cpp answer it, or 403 as some gateways and hosted APIs do.
        self.unauthorized_status = unauthorized_status
        self._outer_lock = asyncio.Lock()
        self._inner_lock = asyncio.Lock()
        #: How many streams were interrupted so.
        self.interrupted = 0
        #: The engine metrics served on ``/metrics`` (vLLM's names unless the first model
        #: speaks like SGLang, or ``metrics`` says).
        family: MetricsFamily = "sglang" if self.style == "sglang" else "vllm"
        self.metrics = EngineMetrics(metrics or family)
        for name in self.models:
            self.metrics.prepare(name)
        self._occurrences: dict[bytes, int] = {}
        self.host = host
        self._requested_port = port
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "stopped"
        return f"LLMDouble({where}, models={list(self.models)}, rules={len(self.rules)})"

    # -- addresses -----------------------------------------------------------------------

    @property
    def style(self) -> OverflowStyle:
        """The server family the double impersonates for model-independent answers."""
        return next(iter(self.models.values())).overflow_style

    @property
    def port(self) -> int:
        """The TCP port the double listens on."""
        if self._port is None:
            raise DoubleNotRunningError("The LLM double is not running; start it first.")
        return self._port

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``url + "/v1"``."""
        return f"{self.url}/v1"

    # -- records -------------------------------------------------------------------------

    def requests_for(self, model: str) -> list[RecordedRequest]:
        """The recorded chat requests addressed to ``model``."""
        return [record for record in self.requests if record.model == model]

    def reset(self) -> None:
        """Forget recorded requests, the in-flight maximum and the rules' failure counts."""
        self.requests.clear()
        self.max_in_flight = self.in_flight
        for rule in self.rules:
            rule.failures = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> LLMDouble:
        """Start serving in the running event loop; returns ``self``."""
        if self._runner is not None:
            raise RuntimeError("The LLM double is already running.")
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._list_models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self.metrics_handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self._requested_port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Stop serving (idempotent); in-flight requests get a short grace period."""
        runner, self._runner = self._runner, None
        self._port = None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> LLMDouble:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @contextmanager
    def start_in_thread(self) -> Iterator[LLMDouble]:
        """Serve from a background thread's event loop for the duration of a ``with`` block."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=_run_loop, args=(loop,), name="kyai-llm-double", daemon=True
        )
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(THREAD_TIMEOUT_S)
            try:
                yield self
            finally:
                asyncio.run_coroutine_threadsafe(self.stop(), loop).result(THREAD_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(THREAD_TIMEOUT_S)

    # -- handlers ------------------------------------------------------------------------

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics_handler(self, _: web.Request) -> web.Response:
        """``GET /metrics``: the serving metrics in Prometheus's text format."""
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    def _authorized(self, request: web.Request) -> bool:
        return self.api_key is None or (
            request.headers.get("Authorization") == f"Bearer {self.api_key}"
        )

    def _refusal(self) -> Answer:
        """The answer to a missing or wrong key (:attr:`unauthorized_status`)."""
        if self.unauthorized_status == 401:
            return unauthorized_answer(self.style)
        return error_answer(
            self.style, self.unauthorized_status, "The API key is not allowed to use this model."
        )

    async def _list_models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            status, body = self._refusal()
            return web.json_response(body, status=status)
        created = int(time.time())
        cards = []
        for spec in self.models.values():
            card: dict[str, Any] = {
                "id": spec.name,
                "object": "model",
                "created": created,
                "owned_by": OWNED_BY[spec.overflow_style],
                "root": spec.name,
                "parent": None,
            }
            if spec.report_max_model_len and spec.max_model_len is not None:
                card["max_model_len"] = spec.max_model_len
            cards.append(card)
        return web.json_response({"object": "list", "data": cards})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        record = RecordedRequest(
            model=None,
            messages=[],
            max_tokens=None,
            body={},
            headers=dict(request.headers),
            started=time.monotonic(),
        )
        self.requests.append(record)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if not self.interrupt_requests:
                return await self._serve_chat(request, record)
            async with self._outer_lock:
                await self._inner_lock.acquire()
            try:
                return await self._serve_chat(request, record)
            finally:
                self._inner_lock.release()
        finally:
            self.in_flight -= 1
            record.finished = time.monotonic()

    def _newer_request_waits(self) -> bool:
        """llama-cpp-python's test: a newer request holds the outer lock, waiting."""
        if self._outer_lock.locked():
            self.interrupted += 1
            return True
        return False

    async def _serve_chat(
        self, request: web.Request, record: RecordedRequest
    ) -> web.StreamResponse:
        """Answer one chat request: a fault, or the answer (streamed or whole)."""
        fault = await self._fault(request, record)
        record.fault = fault
        if fault in STATUS_FAULTS:
            status = int(fault or 0)
            reply = _reply(error_answer(self.style, status, status_phrase(status)))
        elif fault in (FAULT_CLOSE, FAULT_RESET):
            reply = _Reply(status=0, drop=True)
        else:
            if fault == FAULT_STALL and self.faults is not None:
                await asyncio.sleep(self.faults.stall_s)
            reply = await self._answer_chat(request, record)
        record.rule = reply.rule
        return await self._send(request, record, reply, fault)

    async def _send(
        self, request: web.Request, record: RecordedRequest, reply: _Reply, fault: str | None
    ) -> web.StreamResponse:
        """Send the reply: dropped, as an error, streamed, or whole (after decoding time)."""
        transport = request.transport
        if reply.drop or transport is None:
            if transport is not None:
                if fault == FAULT_RESET:
                    _reset(transport)
                else:
                    transport.close()
            return web.Response(status=500)  # never sent: the socket is closed
        if self.echo_headers and reply.status >= 400:
            _echo(reply.body, request.headers.get("Authorization", ""))
        record.status = reply.status
        record.response = reply.body
        if reply.status != 200:
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        if record.body.get("stream") and self.stream_mode == "stream":
            record.streamed = True
            cuts = {
                FAULT_SHORT_BODY: CUT_CONNECTION,
                FAULT_CUT_JSON: CUT_EVENT,
                FAULT_DONE_EARLY: CUT_DONE,
                FAULT_EOF_EARLY: CUT_EOF,
                FAULT_NO_FINISH: CUT_NO_FINISH,
                FAULT_ABORT: CUT_ABORT,
            }
            options = record.body.get("stream_options")
            return await stream_answer(
                request,
                reply.body,
                arrived=record.started,
                ttft_s=self.ttft_s,
                token_s=self.token_s,
                include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
                cut=cuts.get(fault or ""),
                observe=lambda timeline: self._observe(reply, timeline),
                interrupted=self._newer_request_waits if self.interrupt_requests else None,
                events_per_write=self.events_per_write,
            )
        tokens = int(reply.body["usage"]["completion_tokens"])
        timeline = await pace_whole(record.started, tokens, self.ttft_s, self.token_s)
        if fault in (FAULT_SHORT_BODY, FAULT_CUT_JSON):
            return await _damaged(request, reply.body, fault)
        self._observe(reply, timeline)
        return web.json_response(reply.body, status=reply.status, headers=reply.headers)

    def _observe(self, reply: _Reply, timeline: Timeline) -> None:
        body = reply.body
        self.metrics.observe(
            str(body["model"]),
            prompt_tokens=reply.prompt_tokens,
            output_tokens=int(body["usage"]["completion_tokens"]),
            ttft_s=timeline.first - timeline.arrived,
            gaps_s=timeline.gaps,
            e2e_s=timeline.last - timeline.arrived,
            finish_reason=body["choices"][0]["finish_reason"],
        )

    async def _fault(self, request: web.Request, record: RecordedRequest) -> str | None:
        """The fault to inject into this chat request, if any (see :class:`Faults`)."""
        if self.faults is None or self.faults.rate == 0:
            return None
        raw = await request.read()
        occurrence = self._occurrences.get(raw, 0)
        self._occurrences[raw] = occurrence + 1
        try:
            model = json.loads(raw).get("model")
        except (ValueError, AttributeError):
            model = None
        if isinstance(model, str):
            record.model = model
        return self.faults.pick(raw, occurrence, model if isinstance(model, str) else None)

    async def _answer_chat(self, request: web.Request, record: RecordedRequest) -> _Reply:
        style = self.style
        if not self._authorized(request):
            return _reply(self._refusal())
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return _reply(error_answer(style, 400, f"The request body is not valid JSON: {exc}."))
        if not isinstance(body, dict):
            return _reply(error_answer(style, 400, "The request body must be a JSON object."))
        record.body = body
        messages = body.get("messages")
        model = body.get("model") or next(iter(self.models))
        record.model = str(model)
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _reply(error_answer(style, 400, "'messages' must be a list of objects."))
        record.messages = messages
        param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else None
        param = param or "max_tokens"
        max_tokens = body.get(param)
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
        ):
            return _reply(error_answer(style, 400, f"'{param}' must be an integer."))
        record.max_tokens = max_tokens
        if max_tokens is not None and max_tokens < 1:
            text = f"max_tokens must be at least 1, got {max_tokens}."
            return _reply(error_answer(style, 400, text))
        if body.get("stream") and self.stream_mode == "refuse":
            return _reply(error_answer(style, 400, STREAMING_NOT_SUPPORTED, param="stream"))
        spec = self.models.get(record.model)
        if spec is None:
            return _reply(model_not_found_answer(style, record.model))
        chat = ChatRequest(
            model=spec.name,
            messages=messages,
            max_tokens=max_tokens,
            body=body,
            headers=record.headers,
        )
        prompt_tokens = count_prompt_tokens(messages)
        window = spec.max_model_len
        limit = max_tokens
        if window is not None:
            if prompt_tokens >= window:
                return _reply(
                    prompt_overflow_answer(
                        spec.overflow_style,
                        prompt_tokens=prompt_tokens,
                        max_model_len=window,
                        max_tokens=max_tokens,
                        max_tokens_param=param,
                    )
                )
            if max_tokens is not None and prompt_tokens + max_tokens > window:
                # vLLM clamps max_tokens to the rest of the window, but never above it.
                over = spec.overflow_style == "vllm" and max_tokens > window
                if not spec.clamp_max_tokens or over:
                    return _reply(
                        total_overflow_answer(
                            spec.overflow_style,
                            prompt_tokens=prompt_tokens,
                            max_model_len=window,
                            max_tokens=max_tokens,
                            max_tokens_param=param,
                        )
                    )
            limit = window - prompt_tokens if limit is None else min(limit, window - prompt_tokens)
        return await self._scripted(chat, spec, prompt_tokens=prompt_tokens, limit=limit)

    def _pick(self, chat: ChatRequest) -> tuple[int | None, Rule, bool]:
        """The answering rule: (index or None for the default, rule, whether it fails now)."""
        for index, rule in enumerate(self.rules):
            if not rule.matches(chat):
                continue
            if rule.fails and not rule.exhausted:
                rule.failures += 1
                return index, rule, True
            if rule.fails and rule.content == DEFAULT_CONTENT and rule.reasoning_content is None:
                continue  # an exhausted error-only rule lets later rules answer
            return index, rule, False
        return None, Rule(), False

    async def _scripted(
        self, chat: ChatRequest, spec: ModelSpec, *, prompt_tokens: int, limit: int | None
    ) -> _Reply:
        style = spec.overflow_style
        try:
            index, rule, failing = self._pick(chat)
        except Exception as exc:
            return _reply(error_answer(style, 500, f"A rule's match predicate raised {exc!r}."))
        delay = self.latency_s + rule.delay_s
        if delay > 0:
            await asyncio.sleep(delay)
        if failing:
            if rule.drop_connection:
                return _Reply(status=0, drop=True, rule=index)
            assert rule.status is not None
            error_text = rule.error_message or status_phrase(rule.status)
            reply = _reply(
                error_answer(style, rule.status, error_text, error_type=rule.error_type),
                rule=index,
            )
            if rule.retry_after is not None:
                reply.headers["Retry-After"] = f"{rule.retry_after:g}"
            return reply
        try:
            content: str | None = rule.answer_text(chat)
        except Exception as exc:
            return _reply(
                error_answer(style, 500, f"A rule's content callable raised {exc!r}."), rule=index
            )
        reasoning_content, reasoning = rule.reasoning_content, rule.reasoning
        finish_reason = rule.finish_reason
        used = 0
        budget = limit
        truncated = False
        thinking = reasoning_content if reasoning_content is not None else reasoning
        if thinking is not None:
            if budget is None:
                used += count_text_tokens(thinking)
            else:
                thinking, spent, cut = _fit(thinking, budget)
                used, budget, truncated = used + spent, budget - spent, truncated or cut
            if reasoning_content is not None:
                reasoning_content = thinking
            if reasoning is not None:
                reasoning = thinking
        assert content is not None
        if budget is None:
            used += count_text_tokens(content)
        elif budget == 0 and content:
            content, truncated = None, True  # the reasoning took the whole budget
        else:
            content, spent, cut = _fit(content, budget)
            used, truncated = used + spent, truncated or cut
        if truncated:
            finish_reason = "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning_content is not None:
            message["reasoning_content"] = reasoning_content
        if reasoning is not None:
            message["reasoning"] = reasoning
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": used,
                "total_tokens": prompt_tokens + used,
            },
        }
        return _Reply(status=200, body=body, rule=index, prompt_tokens=prompt_tokens)


async def _damaged(request: web.Request, body: dict[str, Any], fault: str) -> web.StreamResponse:
    """A whole answer damaged on the way: cut JSON, or a body shorter than announced."""
    data = json.dumps(body).encode("utf-8")
    cut = data[: len(data) // 2]
    if fault == FAULT_CUT_JSON:
        return web.Response(body=cut, status=200, content_type="application/json")
    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    response.content_length = len(data)
    await response.prepare(request)
    await response.write(cut)
    if request.transport is not None:
        request.transport.close()
    return response


def _reset(transport: asyncio.BaseTransport) -> None:
    """Close a connection with a TCP RST (SO_LINGER 0) instead of a FIN."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    if isinstance(transport, asyncio.Transport):
        transport.abort()
    else:
        transport.close()


def _echo(body: dict[str, Any], authorization: str) -> None:
    """Put the request's Authorization header into an error body's message, like a gateway."""
    raw = authorization.encode("utf-8")
    echoed = (
        f" [request headers: Authorization: {authorization}; "
        f"b64={base64.b64encode(raw).decode()}; b64url={base64.urlsafe_b64encode(raw).decode()}]"
    )
    inner = body.get("error")
    target = inner if isinstance(inner, dict) else body
    message = target.get("message")
    target["message"] = (message if isinstance(message, str) else "error") + echoed
    body["echoed_headers"] = {"Authorization": authorization}


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Run ``loop`` until stopped, then shut it down cleanly (for :meth:`start_in_thread`)."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
