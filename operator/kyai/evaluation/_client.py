"""An async client for OpenAI-compatible chat servers (vLLM, SGLang, TensorRT-LLM, llama.cpp).

It retries what is worth retrying (429, 5xx, timeouts, connection errors, and a 200 whose
JSON body was cut short on the way) with exponential
backoff and jitter, honouring ``Retry-After``; it shrinks ``max_tokens`` when the server
answers that the request overflows the context window; and it turns everything else into a
:class:`ChatError` with a bounded ``kind`` that the caller records and scores as 0.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

import aiohttp
import httpx

from kyai import _json
from kyai.evaluation._budget import estimate_prompt_tokens
from kyai.evaluation._redact import redact, register_secret

#: Error kinds (bounded: they become metric labels and summary keys).
HTTP_ERROR = "http_error"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
CONTEXT_OVERFLOW = "context_overflow"
INVALID_RESPONSE = "invalid_response"

#: HTTP statuses retried with backoff.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

#: How many times one request may shrink its budget after context-length errors.
MAX_SHRINKS = 8


class ChatError(Exception):
    """A request that failed for good: ``kind`` says how, ``message`` says why."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        max_tokens: int | None = None,
    ) -> None:
        message = redact(message)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.attempts = attempts
        self.max_tokens = max_tokens


class EndpointUnreachableError(Exception):
    """The server could not be reached at all (before any row was sent)."""


class EndpointConfigError(Exception):
    """The server answers, but so that no request can succeed (unknown model, 404, HTML, 401)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried."""

    max_retries: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (retry - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


class ChatResult(NamedTuple):
    """One successful chat completion, with its raw fields kept verbatim.

    A named tuple rather than a frozen dataclass: as immutable, and built in a fifth of the
    time (one is built per row).
    """

    content: str | None
    reasoning_content: str | None
    reasoning: str | None
    finish_reason: str | None
    usage: Mapping[str, Any] | None
    response_id: str | None
    model: str | None
    latency_ms: float
    elapsed_ms: float
    attempts: int
    max_tokens: int | None


@dataclass(frozen=True)
class Overflow:
    """What a context-length error told: the window, the prompt's size, an output cap.

    ``prompt_is_lower_bound`` is set when the server only knows that the prompt has *at
    least* ``prompt_tokens`` tokens (current vLLM truncates the prompt while counting it).
    """

    window: int | None
    prompt_tokens: int | None
    output_cap: int | None = None
    prompt_is_lower_bound: bool = False


# The wordings below are those of vLLM (current, 0.6-0.11 and <=0.5), SGLang, llama.cpp's
# llama-server, llama-cpp-python and OpenAI; kyai.testing's double reproduces each of them.
_WINDOW_PATTERNS = (
    re.compile(r"maximum context length (?:is|of) (\d+)", re.IGNORECASE),
    re.compile(r"max_model_len=(?:max_total_tokens=)?(\d+)", re.IGNORECASE),
    re.compile(r"context (?:length|size) \((\d+) tokens?\)", re.IGNORECASE),
    re.compile(r"context (?:length|size|window)(?: is| of)? (\d+)", re.IGNORECASE),
)
_LOWER_BOUND_PATTERN = re.compile(r"at least (\d+) input tokens", re.IGNORECASE)
_PROMPT_PATTERNS = (
    re.compile(r"\((\d+) in the messages", re.IGNORECASE),
    re.compile(r"requested (\d+) tokens in the messages", re.IGNORECASE),
    re.compile(r"(\d+) tokens from the input", re.IGNORECASE),
    re.compile(r"has (\d+) input tokens", re.IGNORECASE),
    re.compile(r"input \((\d+) tokens?\)", re.IGNORECASE),
    re.compile(r"request \((\d+) tokens?\) exceeds", re.IGNORECASE),
    re.compile(r"(\d+) input tokens", re.IGNORECASE),
)
_CAP_PATTERN = re.compile(r"at most (\d+) completion tokens", re.IGNORECASE)
_OVERFLOW_MARKERS = (
    "max_tokens is too large",
    "context length",
    "context_length",
    "context window",
    "context size",
    "exceed_context_size",
    "maximum context",
    "max_tokens' or 'max_completion_tokens' is too large",
    "cannot be greater than max_model_len",
)


def _first_int(patterns: Sequence[re.Pattern[str]], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def _error_payload(body: Any) -> Mapping[str, Any]:
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            return inner
        return body
    return {}


def _error_message(body: Any, text: str) -> str:
    message = _error_payload(body).get("message")
    if isinstance(message, str) and message:
        return message
    return text.strip()[:500] or "(empty body)"


def parse_overflow(status: int, body: Any, text: str) -> Overflow | None:
    """Recognise a context-length error from vLLM, SGLang, llama.cpp and kin.

    Returns ``None`` when the answer is some other error.
    """
    if status not in (400, 413, 422):
        return None
    payload = _error_payload(body)
    message = _error_message(body, text)
    haystack = " ".join(
        str(part) for part in (message, payload.get("type"), payload.get("code")) if part
    )
    if not any(marker in haystack.lower() for marker in _OVERFLOW_MARKERS):
        return None
    window = _first_int(_WINDOW_PATTERNS, message)
    lower_bound = _LOWER_BOUND_PATTERN.search(message)
    prompt = int(lower_bound.group(1)) if lower_bound else _first_int(_PROMPT_PATTERNS, message)
    n_ctx = payload.get("n_ctx")
    n_prompt = payload.get("n_prompt_tokens")
    if isinstance(n_ctx, int) and not isinstance(n_ctx, bool):
        window = n_ctx
    if isinstance(n_prompt, int) and not isinstance(n_prompt, bool):
        prompt = n_prompt
    cap_match = _CAP_PATTERN.search(message)
    return Overflow(
        window,
        prompt,
        int(cap_match.group(1)) if cap_match else None,
        prompt_is_lower_bound=lower_bound is not None and prompt == int(lower_bound.group(1)),
    )


def _retry_after(response: _Reply) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def normalise_base_url(url: str) -> str:
    """``http://host:8000``, ``…/v1`` and ``…/v1/`` all become ``http://host:8000/v1``."""
    base = url.strip().rstrip("/")
    if base.endswith("/chat/completions"):
        base = base[: -len("/chat/completions")]
    if not base.endswith("/v1"):
        base += "/v1"
    return base


@dataclass
class _Attempt:
    attempts: int = 0
    retries: int = 0
    shrinks: int = 0
    started: float = field(default_factory=time.perf_counter)


class InvalidEndpointError(EndpointUnreachableError, ValueError):
    """An endpoint URL that cannot be an HTTP server's address (``foo``, ``http://``, ``ftp://x``).

    Bad input on the command line (exit 2); to callers that probe a server (the Workload
    controller) it is a server that cannot be reached, as before the URL was checked.
    """


def check_endpoint(url: str) -> str:
    """``url`` normalised to its ``/v1`` base; raise :class:`InvalidEndpointError` if malformed."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise InvalidEndpointError(f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidEndpointError(
            f"{url!r} is not an http:// or https:// URL (for example http://127.0.0.1:8000/v1)"
        )
    if not parts.hostname:
        raise InvalidEndpointError(f"{url!r} names no host (for example http://127.0.0.1:8000/v1)")
    if port == 0:
        raise InvalidEndpointError(f"{url!r} names port 0")
    if parts.query or parts.fragment:
        raise InvalidEndpointError(f"{url!r} has a query or fragment; give the base URL only")
    return normalise_base_url(text)


@dataclass(frozen=True)
class _Reply:
    """One HTTP answer, read whole: status, headers (case-insensitive), body bytes."""

    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return _json.loads(self.content)


class _TransportFailure(Exception):
    """No complete HTTP answer: ``kind`` is TIMEOUT or CONNECTION_ERROR."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class _Backend(Protocol):
    async def request(self, method: str, path: str, body: bytes | None) -> _Reply: ...

    async def aclose(self) -> None: ...


class _AiohttpBackend:
    """The default transport: aiohttp, whose pool keeps up at concurrency 256."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], timeout_s: float, max_connections: int
    ) -> None:
        self._base = base_url
        self._headers = {**headers, "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_s, connect=min(timeout_s, 30.0), sock_connect=min(timeout_s, 30.0)
        )
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0),
                headers=self._headers,
                timeout=self._timeout,
                # Proxy variables are honoured when set (as httpx did); otherwise aiohttp is
                # spared a look-up in a thread for every request.
                trust_env=_proxy_configured(),
            )
        return self._session

    async def request(self, method: str, path: str, body: bytes | None) -> _Reply:
        session = self._open()
        try:
            async with session.request(
                method, self._base + path, data=body, allow_redirects=False
            ) as response:
                content = await response.read()
                return _Reply(response.status, response.headers, content)
        except TimeoutError as exc:
            raise _TransportFailure(TIMEOUT, f"timed out ({type(exc).__name__})") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _TransportFailure(
                CONNECTION_ERROR, f"{type(exc).__name__}: {str(exc) or 'connection failed'}"
            ) from exc

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _proxy_configured() -> bool:
    names = ("http_proxy", "https_proxy", "all_proxy")
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in names)


class _HttpxBackend:
    """An httpx client as the transport (tests hand in an ``httpx.MockTransport``)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def request(self, method: str, path: str, body: bytes | None) -> _Reply:
        headers = {"Content-Type": "application/json"} if body is not None else None
        try:
            response = await self.client.request(method, path, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise _TransportFailure(TIMEOUT, f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise _TransportFailure(
                CONNECTION_ERROR, f"{type(exc).__name__}: {str(exc) or 'connection failed'}"
            ) from exc
        return _Reply(response.status_code, response.headers, response.content)

    async def aclose(self) -> None:
        await self.client.aclose()


def _looks_like_json(reply: _Reply) -> bool:
    """Whether a body that did not parse was meant to be JSON (so it was cut short)."""
    content_type = reply.headers.get("content-type", "").lower()
    head = reply.content.lstrip()[:1]
    return "json" in content_type or head in (b"{", b"[")


class ChatClient:
    """A client for one OpenAI-compatible server.

    Requests go through aiohttp; ``transport`` (an httpx transport, as tests use) switches
    to httpx instead. Either way the retry, time-out and error semantics are the same.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        max_connections: int = 16,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = check_endpoint(base_url)
        self.retry = retry or RetryPolicy()
        register_secret(api_key)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self._http: httpx.AsyncClient | None = None
        self._backend: _Backend
        if transport is not None:
            self._backend = _HttpxBackend(self._httpx_client(transport))
        else:
            self._backend = _AiohttpBackend(
                self.base_url, self._headers, timeout_s, max_connections
            )

    def _httpx_client(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                headers=self._headers,
                timeout=httpx.Timeout(
                    self._timeout_s, connect=min(self._timeout_s, 30.0), pool=None
                ),
                limits=httpx.Limits(
                    max_connections=self._max_connections,
                    max_keepalive_connections=self._max_connections,
                ),
                transport=transport,
            )
        return self._http

    @property
    def http(self) -> httpx.AsyncClient:
        """An httpx client (base URL and credentials set) for other routes (embeddings)."""
        return self._httpx_client(None)

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pools."""
        await self._backend.aclose()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def list_models(self) -> list[dict[str, Any]]:
        """The server's ``/v1/models`` cards; ``[]`` when it does not serve that route.

        Raises :class:`EndpointUnreachableError` when the server cannot be reached.
        """
        state = _Attempt()
        while True:
            state.attempts += 1
            try:
                response = await self._backend.request("GET", "/models", None)
            except _TransportFailure as exc:
                if state.retries < self.retry.max_retries:
                    state.retries += 1
                    await asyncio.sleep(self.retry.delay(state.retries, None))
                    continue
                raise EndpointUnreachableError(
                    redact(
                        f"Cannot reach {self.base_url}/models after {state.attempts} attempts: "
                        f"{exc.detail}."
                    )
                ) from None
            if response.status in RETRYABLE_STATUSES and state.retries < self.retry.max_retries:
                state.retries += 1
                await asyncio.sleep(self.retry.delay(state.retries, _retry_after(response)))
                continue
            if response.status in (401, 403):
                raise EndpointUnreachableError(
                    f"{self.base_url}/models refused the credentials (HTTP {response.status})."
                )
            if response.status != 200:
                return []
            try:
                body = response.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                if _looks_like_json(response) and state.retries < self.retry.max_retries:
                    state.retries += 1  # cut short on the way: ask again
                    await asyncio.sleep(self.retry.delay(state.retries, None))
                    continue
                return []
            data = body.get("data") if isinstance(body, dict) else None
            return (
                [card for card in data if isinstance(card, dict)] if isinstance(data, list) else []
            )

    async def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None,
        extra: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """Send one chat completion request; retry, shrink or raise :class:`ChatError`."""
        state = _Attempt()
        budget = max_tokens
        while True:
            state.attempts += 1
            body: dict[str, Any] = {"model": model, "messages": list(messages), **(extra or {})}
            if budget is not None:
                body["max_tokens"] = budget
            sent = time.perf_counter()
            status: int | None = None
            retry_after: float | None = None
            try:
                response = await self._backend.request(
                    "POST", "/chat/completions", _json.dumps_body(body)
                )
            except _TransportFailure as exc:
                kind, detail = exc.kind, exc.detail
            else:
                latency = time.perf_counter() - sent
                status = response.status
                if status == 200:
                    try:
                        payload_200: Any = response.json()
                    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                        kind = INVALID_RESPONSE
                        detail = (
                            f"The server's answer is not valid JSON ({type(exc).__name__}): "
                            f"{response.text[:200]!r}"
                        )
                        if not _looks_like_json(response):  # HTML or text: a wrong server
                            raise ChatError(
                                kind,
                                detail,
                                status=status,
                                attempts=state.attempts,
                                max_tokens=budget,
                            ) from None
                        # A JSON body cut short (a proxy, a crashing worker): ask again.
                    else:
                        return self._result(payload_200, response, state, latency, budget)
                else:
                    text = response.text
                    try:
                        payload: Any = response.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        payload = None
                    overflow = parse_overflow(status, payload, text)
                    if overflow is not None:
                        budget = self._shrink(
                            overflow,
                            budget,
                            state,
                            _error_message(payload, text),
                            estimate_prompt_tokens(messages),
                        )
                        continue
                    kind = HTTP_ERROR
                    detail = f"HTTP {status}: {_error_message(payload, text)}"
                    retry_after = _retry_after(response)
                    if status not in RETRYABLE_STATUSES:
                        raise ChatError(
                            kind, detail, status=status, attempts=state.attempts, max_tokens=budget
                        )
            if state.retries >= self.retry.max_retries:
                raise ChatError(
                    kind,
                    f"{detail} (gave up after {state.attempts} attempts)",
                    status=status,
                    attempts=state.attempts,
                    max_tokens=budget,
                )
            state.retries += 1
            await asyncio.sleep(self.retry.delay(state.retries, retry_after))

    def _shrink(
        self,
        overflow: Overflow,
        budget: int | None,
        state: _Attempt,
        message: str,
        estimate: int,
    ) -> int:
        """The next, smaller budget after a context-length error, or raise when none fits."""
        window, prompt = overflow.window, overflow.prompt_tokens

        def fail(reason: str) -> ChatError:
            return ChatError(
                CONTEXT_OVERFLOW,
                f"{reason} Server said: {message}",
                status=400,
                attempts=state.attempts,
                max_tokens=budget,
            )

        if budget is None:
            raise fail("The prompt alone does not fit the context window.")
        if window is not None and prompt is not None and prompt >= window:
            raise fail(
                f"The prompt alone ({prompt} tokens) does not fit the {window}-token window."
            )
        state.shrinks += 1
        if state.shrinks > MAX_SHRINKS:
            raise fail(f"The request still overflowed after {MAX_SHRINKS} smaller budgets.")
        if overflow.output_cap is not None:
            new_budget = overflow.output_cap
        elif window is not None and prompt is not None and not overflow.prompt_is_lower_bound:
            new_budget = window - prompt
        elif window is not None:
            # The prompt's size is unknown or only bounded below: our own estimate (which
            # errs on the large side) fills in.
            new_budget = window - max(estimate, prompt or 0)
        else:
            new_budget = budget // 2
        if new_budget >= budget:  # the numbers do not explain the refusal: halve instead
            new_budget = budget // 2
        if new_budget < 1:
            raise fail("No output budget is left once the prompt is in the context window.")
        return new_budget

    @staticmethod
    def _result(
        body: Any, response: _Reply, state: _Attempt, latency: float, budget: int | None
    ) -> ChatResult:
        try:
            choice = body["choices"][0]
            message = choice.get("message") or {}
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ChatError(
                INVALID_RESPONSE,
                f"The server's answer is not a chat completion ({type(exc).__name__}): "
                f"{response.text[:200]!r}",
                status=response.status,
                attempts=state.attempts,
                max_tokens=budget,
            ) from exc

        content = message.get("content")
        reasoning_content = message.get("reasoning_content")
        reasoning = message.get("reasoning")
        usage = body.get("usage")
        response_id = body.get("id")
        served = body.get("model")
        return ChatResult(
            content=content if isinstance(content, str) else None,
            reasoning_content=reasoning_content if isinstance(reasoning_content, str) else None,
            reasoning=reasoning if isinstance(reasoning, str) else None,
            finish_reason=choice.get("finish_reason"),
            usage=usage if isinstance(usage, dict) else None,
            response_id=response_id if isinstance(response_id, str) else None,
            model=served if isinstance(served, str) else None,
            latency_ms=latency * 1000.0,
            elapsed_ms=(time.perf_counter() - state.started) * 1000.0,
            attempts=state.attempts,
            max_tokens=budget,
        )
