"""An async client for OpenAI-compatible chat servers (vLLM, SGLang, TensorRT-LLM, llama.cpp).

It retries what is worth retrying (429, 5xx, timeouts, connection errors, and a 200 whose
JSON body was cut short on the way) with exponential
backoff and jitter, honouring ``Retry-After``; it shrinks ``max_tokens`` when the server
answers that the request overflows the context window; and it turns everything else into a
:class:`ChatError` with a bounded ``kind`` that the caller records and scores as 0.

Asked to, it streams (server-sent events, :mod:`kyai.evaluation._stream`) and times the
answer; the same rules hold for streams. A stream that ends before a chunk said how the
answer finished (``[DONE]`` or the end of the body without a ``finish_reason``, or a
``finish_reason`` such as vLLM's ``abort``) is retried as a connection error is, its partial
answer dropped; when the retries run out the request fails as ``stream_incomplete``. A
whole answer that holds neither content nor reasoning, or that the server says it did not
complete, is retried and then fails as ``invalid_response``: no answer is ever taken for an
empty one that the server did not finish.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias
from urllib.parse import urlsplit

from kyai import _json
from kyai.constants import GATEWAY_REFUSED_KEY
from kyai.evaluation._aiohttp_backend import AiohttpBackend
from kyai.evaluation._budget import estimate_prompt_tokens
from kyai.evaluation._keyfile import KeyFile, KeyFileError
from kyai.evaluation._redact import redact, register_secret
from kyai.evaluation._stream import (
    INCOMPLETE_FINISH_REASONS,
    STREAM_FIELDS,
    SseAssembler,
    StreamCutError,
    StreamErrorEvent,
    refuses_streaming,
)
from kyai.evaluation._transport import (
    CONNECTION_ERROR,
    TIMEOUT,
    Backend,
    Reply,
    TransportFailure,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: Error kinds (bounded: they become metric labels and summary keys); with the transport's
#: ``timeout`` and ``connection_error`` (:mod:`kyai.evaluation._transport`).
HTTP_ERROR = "http_error"
CONTEXT_OVERFLOW = "context_overflow"
INVALID_RESPONSE = "invalid_response"
#: The API key's file (``--judge-api-key-file``) could not be read for a request.
CREDENTIALS_ERROR = "credentials_error"
#: Every attempt's stream ended before a chunk said how the answer finished.
STREAM_INCOMPLETE = "stream_incomplete"

#: What a ``stream_incomplete`` error advises.
STREAM_INCOMPLETE_HINT = (
    "A server that ends a stream when a newer request arrives (llama-cpp-python's "
    "interrupt_requests, its default) needs --concurrency 1 or --no-stream "
    "(spec.generation.concurrency: 1 or spec.generation.stream: false on an EvaluationRun); "
    "a proxy or load balancer that cuts long streams needs a longer time-out."
)

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
        code: str | None = None,
    ) -> None:
        message = redact(message)
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        #: The error answer's own ``error.code``, when it gave a string one.
        self.code = code
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


def wait_text(seconds: float) -> str:
    """A wait as the retry lines say it: ``4 s``, ``0.6 s``."""
    return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1f} s"


@dataclass(frozen=True)
class RetryNote:
    """A request about to be sent again: what failed, which attempt, how long until the next.

    ``what`` follows the side it is said of: ``unreachable: connection refused``,
    ``answered HTTP 503: Service Unavailable``.
    """

    what: str
    attempt: int
    attempts: int
    delay_s: float

    def text(self, side: str) -> str:
        """``candidate unreachable: connection refused; attempt 3 of 6, next in 4 s``."""
        return (
            f"{side} {self.what}; attempt {self.attempt} of {self.attempts}, "
            f"next in {wait_text(self.delay_s)}"
        )


#: Called with each retry of a client's requests (:attr:`ChatClient.on_retry`).
RetryListener = Callable[[RetryNote], None]

#: The longest server message a retry note quotes.
_NOTE_CHARS = 160


def _clip(text: str) -> str:
    """A server's words for a retry note: secrets redacted (before cutting), one line, short."""
    text = " ".join(redact(text).split())
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 1] + "…"


def failure_what(kind: str, detail: str, reason: str | None = None) -> str:
    """What failed, as a retry note says it after the side's name."""
    if kind == CONNECTION_ERROR:
        return f"unreachable: {reason or _clip(detail)}"
    if kind == TIMEOUT:
        return f"timed out: {reason or _clip(detail)}"
    if kind == HTTP_ERROR and detail.startswith("HTTP "):
        return f"answered {_clip(detail)}"
    if kind == CREDENTIALS_ERROR:
        return f"key unreadable: {_clip(detail)}"
    return f"failed ({kind}): {_clip(detail)}"


class ChatResult(NamedTuple):
    """One successful chat completion, with its raw fields kept verbatim.

    A named tuple rather than a frozen dataclass: as immutable, and built in a fifth of the
    time (one is built per row). ``latency_ms`` (E2E) runs from sending the (last) request
    to its last choice chunk when streamed, to the whole answer otherwise; a streamed answer
    also has ``ttft_ms`` (to its first choice chunk), ``itl_ms`` (the gaps between its
    successive choice chunks, each event timed on its own) and ``text_chunks`` (how many
    chunks carried text), as ``vllm bench serve`` counts them (:mod:`._stream`).
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
    streamed: bool = False
    ttft_ms: float | None = None
    itl_ms: Sequence[float] = ()
    text_chunks: int = 0


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
# llama-server, llama-cpp-python and OpenAI; kyai_testing's double reproduces each of them.
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


def _refused_key(response: Reply) -> str | None:
    """The judge gateway's message when its answer says the judge refused the platform's key."""
    if response.status == 200 or not _looks_like_json(response):
        return None
    try:
        payload = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if _error_code(payload) != GATEWAY_REFUSED_KEY:
        return None
    return f"HTTP {response.status}: {_error_message(payload, response.text)}."


def _error_code(body: Any) -> str | None:
    code = _error_payload(body).get("code")
    return code if isinstance(code, str) and code else None


def _error_message(body: Any, text: str) -> str:
    message = _error_payload(body).get("message")
    if isinstance(message, str) and message:
        return message
    if isinstance(body, Mapping) and isinstance(body.get("error"), str) and body["error"]:
        return str(body["error"])  # vLLM's api-key middleware: {"error": "Unauthorized"}
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


def _retry_after(response: Reply) -> float | None:
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


@dataclass(frozen=True)
class ModelsAnswer:
    """What one ``GET /models`` came to.

    ``cards``: the models listed (``[]`` when the route answers but lists nothing usable: a
    404, an HTML page), None when no usable answer came. ``status`` is None when no HTTP
    answer came at all (``kind`` then says how: a transport failure, an unreadable key file).
    ``detail`` is the server's (or the transport's) own words, ``reason`` a transport
    failure in a few words. ``key_refused``: 401, 403, or the judge gateway saying the judge
    refused the platform's key (``gateway_refused``); ``retryable``: worth asking again.
    """

    cards: list[dict[str, Any]] | None = None
    status: int | None = None
    detail: str = ""
    reason: str | None = None
    kind: str | None = None
    retryable: bool = False
    retry_after: float | None = None
    key_refused: bool = False
    gateway_refused: bool = False

    @property
    def what(self) -> str:
        """What failed, as a retry note says it (:class:`RetryNote`)."""
        if self.status is None:
            return failure_what(self.kind or CONNECTION_ERROR, self.detail, self.reason)
        return f"answered {_clip(self.detail)}"


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


def _looks_like_json(reply: Reply) -> bool:
    """Whether a body that did not parse was meant to be JSON (so it was cut short)."""
    content_type = reply.headers.get("content-type", "").lower()
    head = reply.content.lstrip()[:1]
    return "json" in content_type or head in (b"{", b"[")


@dataclass(frozen=True)
class _Failure:
    """An attempt that failed: retried with backoff when ``retryable``, else final."""

    kind: str
    detail: str
    status: int | None = None
    retry_after: float | None = None
    retryable: bool = True
    code: str | None = None
    #: A transport failure in a few words ("connection refused"), for the retry notes.
    reason: str | None = None


@dataclass(frozen=True)
class _Shrink:
    """A context-length refusal: ask again with a smaller budget."""

    overflow: Overflow
    message: str


@dataclass(frozen=True)
class _Refused:
    """The server refused streaming: ask again without it."""

    message: str


_Step: TypeAlias = _Failure | _Shrink | _Refused


def _unfinished(result: ChatResult) -> str | None:
    """Why a whole answer cannot be taken as the model's answer, or None when it can."""
    if result.finish_reason in INCOMPLETE_FINISH_REASONS:
        return (
            f"The server ended the answer with finish_reason {result.finish_reason!r}: it did "
            "not complete it."
        )
    if result.content is None and result.reasoning_content is None and result.reasoning is None:
        return (
            "The server's answer holds no content and no reasoning "
            f"(finish_reason {result.finish_reason!r})."
        )
    return None


def _final(failure: _Failure, attempts: int, budget: int | None) -> ChatError:
    """The error that ends a request: a failure not worth retrying, or the last retry's."""
    detail = failure.detail
    if failure.retryable:
        detail += f" (gave up after {attempts} attempts)"
    return ChatError(
        failure.kind,
        detail,
        status=failure.status,
        attempts=attempts,
        max_tokens=budget,
        code=failure.code,
    )


class ChatClient:
    """A client for one OpenAI-compatible server.

    Requests go through aiohttp; ``transport`` (an httpx transport, as tests use) switches
    to httpx instead. Either way the retry, time-out and error semantics are the same.

    ``api_key`` is the key, or a :class:`KeyFile` whose key is read before each request (the
    file is read again when it changed: a rotated token takes effect at the next request). A
    key file that cannot be read fails that request (``credentials_error``, retried like a
    connection error), never the client.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | KeyFile | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        max_connections: int = 16,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = check_endpoint(base_url)
        self.retry = retry or RetryPolicy()
        self._key_file = api_key if isinstance(api_key, KeyFile) else None
        key = api_key if isinstance(api_key, str) else None
        register_secret(key)
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        #: Set once the server refused a streamed request: later ones are not streamed.
        self.stream_refused = False
        #: Told of every retry (what failed, the attempt, the wait) before its wait.
        self.on_retry: RetryListener | None = None
        self._http: httpx.AsyncClient | None = None
        self._backend: Backend
        if transport is not None:
            # Lazily: aiohttp processes never load httpx. The backend imports only what it
            # shares with this module (_transport), never this module: no import circle.
            from kyai.evaluation._httpx_backend import HttpxBackend

            self._backend = HttpxBackend(self._httpx_client(transport))
        else:
            self._backend = AiohttpBackend(self.base_url, self._headers, timeout_s, max_connections)

    def _httpx_client(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        from kyai.evaluation._httpx_backend import make_client

        if self._http is None:
            self._http = make_client(
                self.base_url,
                headers=self._headers,
                key_file=self._key_file,
                timeout_s=self._timeout_s,
                max_connections=self._max_connections,
                transport=transport,
            )
        return self._http

    def _auth(self) -> dict[str, str] | None:
        """A request's own headers: the key file's key (KeyFileError), else none."""
        if self._key_file is None:
            return None
        return {"Authorization": f"Bearer {self._key_file.key()}"}

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

    async def models_answer(self) -> ModelsAnswer:
        """One ``GET /models`` (no retry), and what it came to (:class:`ModelsAnswer`)."""
        try:
            response = await self._backend.request("GET", "/models", None, self._auth())
        except TransportFailure as exc:
            return ModelsAnswer(detail=exc.detail, reason=exc.reason, retryable=True, kind=exc.kind)
        except KeyFileError as exc:
            return ModelsAnswer(detail=str(exc), retryable=True, kind=CREDENTIALS_ERROR)
        status = response.status
        refused_key = _refused_key(response)
        if refused_key is not None:
            return ModelsAnswer(status=status, detail=refused_key.removesuffix("."),
                                key_refused=True, gateway_refused=True)  # fmt: skip
        if status != 200:
            try:
                payload: Any = response.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                payload = None
            detail = f"HTTP {status}: {_error_message(payload, response.text)}"
            return ModelsAnswer(
                status=status,
                detail=detail,
                retryable=status in RETRYABLE_STATUSES,
                retry_after=_retry_after(response),
                key_refused=status in (401, 403),
                cards=None if status in RETRYABLE_STATUSES or status in (401, 403) else [],
            )
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            if _looks_like_json(response):  # cut short on the way: ask again
                return ModelsAnswer(status=status, detail="HTTP 200: a model list cut short",
                                    retryable=True)  # fmt: skip
            return ModelsAnswer(status=status, cards=[])
        data = body.get("data") if isinstance(body, dict) else None
        cards = [card for card in data if isinstance(card, dict)] if isinstance(data, list) else []
        return ModelsAnswer(status=status, cards=cards)

    async def list_models(self) -> list[dict[str, Any]]:
        """The server's ``/v1/models`` cards; ``[]`` when it does not serve that route.

        Raises :class:`EndpointUnreachableError` when the server cannot be reached, and
        :class:`EndpointConfigError` at once when the judge gateway says the judge refused the
        platform's key (no retry can cure that).
        """
        attempts = retries = 0
        while True:
            attempts += 1
            answer = await self.models_answer()
            if answer.gateway_refused:
                raise EndpointConfigError(
                    f"{self.base_url}/models: {answer.detail}. This is the platform's "
                    "configuration, not this run's: nothing in the run can fix it."
                )
            if answer.retryable and retries < self.retry.max_retries:
                retries += 1
                delay = self.retry.delay(retries, answer.retry_after)
                self._note_retry(answer.what, retries, delay)
                await asyncio.sleep(delay)
                continue
            if answer.status is None:
                raise EndpointUnreachableError(
                    redact(
                        f"Cannot reach {self.base_url}/models after {attempts} attempts: "
                        f"{answer.detail}."
                    )
                )
            if answer.key_refused:
                raise EndpointUnreachableError(
                    f"{self.base_url}/models refused the credentials (HTTP {answer.status})."
                )
            return answer.cards or []

    def _note_retry(self, what: str, retry: int, delay: float) -> None:
        """Tell :attr:`on_retry` that attempt ``retry`` failed and the next is in ``delay`` s."""
        if self.on_retry is not None:
            self.on_retry(RetryNote(what, retry, 1 + self.retry.max_retries, delay))

    async def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None,
        extra: Mapping[str, Any] | None = None,
        stream: bool = False,
    ) -> ChatResult:
        """Send one chat completion request; retry, shrink or raise :class:`ChatError`.

        ``stream`` asks for server-sent events (with the usage chunk) and times them. A
        server that refuses streaming (a 400 naming ``stream``) is asked again without it, and
        this client streams no more (:attr:`stream_refused`); the refused request is not
        counted as an attempt. An answer in plain JSON to a streamed request is taken as it is.
        """
        state = _Attempt()
        budget = max_tokens
        while True:
            state.attempts += 1
            streaming = stream and not self.stream_refused
            body: dict[str, Any] = {"model": model, "messages": list(messages), **(extra or {})}
            if streaming:
                body.update(STREAM_FIELDS)
            if budget is not None:
                body["max_tokens"] = budget
            step = await self._attempt(body, state, budget, streaming)
            if isinstance(step, ChatResult):
                return step
            if isinstance(step, _Refused):
                self._refuse_streaming(step.message)
                state.attempts -= 1
                continue
            if isinstance(step, _Shrink):
                estimate = estimate_prompt_tokens(messages)
                budget = self._shrink(step.overflow, budget, state, step.message, estimate)
                continue
            if not step.retryable or state.retries >= self.retry.max_retries:
                raise _final(step, state.attempts, budget)
            state.retries += 1
            delay = self.retry.delay(state.retries, step.retry_after)
            self._note_retry(
                failure_what(step.kind, step.detail, step.reason), state.retries, delay
            )
            await asyncio.sleep(delay)

    def _refuse_streaming(self, message: str) -> None:
        if not self.stream_refused:
            self.stream_refused = True
            log.warning(
                "%s refused streaming (%s); generation goes on without streaming, so time to "
                "first token and inter-token latencies are not measured.",
                self.base_url,
                redact(message),
            )

    async def _attempt(
        self, body: dict[str, Any], state: _Attempt, budget: int | None, streaming: bool
    ) -> ChatResult | _Step:
        """Send one request and say what came of it."""
        data = _json.dumps_body(body)
        try:
            headers = self._auth()
        except KeyFileError as exc:
            return _Failure(CREDENTIALS_ERROR, str(exc))
        sent = time.perf_counter()
        try:
            if not streaming:
                response = await self._backend.request("POST", "/chat/completions", data, headers)
            else:
                events = SseAssembler()
                streamed = await self._backend.stream(
                    "/chat/completions", data, events.feed, headers
                )
                if streamed is None:
                    events.finish()
                    return self._streamed_result(events, state, sent, budget)
                response = streamed
        except TransportFailure as exc:
            return _Failure(exc.kind, exc.detail, reason=exc.reason)
        except StreamCutError as exc:
            if exc.malformed:
                return _Failure(INVALID_RESPONSE, f"The stream was cut short: {exc}")
            return _Failure(
                STREAM_INCOMPLETE, f"The stream ended early: {exc}. {STREAM_INCOMPLETE_HINT}"
            )
        except StreamErrorEvent as exc:
            retryable = exc.status is None or exc.status in RETRYABLE_STATUSES
            detail = f"Error inside the stream: {exc.message}"
            return _Failure(HTTP_ERROR, detail, status=exc.status, retryable=retryable)
        return self._judge_reply(response, state, time.perf_counter() - sent, budget, streaming)

    def _judge_reply(
        self,
        response: Reply,
        state: _Attempt,
        latency: float,
        budget: int | None,
        streaming: bool,
    ) -> ChatResult | _Step:
        """What a whole (not streamed) answer means: a result, a shrink, a refusal, a failure."""
        status = response.status
        if status == 200:
            try:
                payload_200: Any = response.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                detail = (
                    f"The server's answer is not valid JSON ({type(exc).__name__}): "
                    f"{response.text[:200]!r}"
                )
                # HTML or text: a wrong server; a JSON body cut short (a proxy, a crashing
                # worker): ask again.
                retryable = _looks_like_json(response)
                return _Failure(INVALID_RESPONSE, detail, status=status, retryable=retryable)
            result = self._result(payload_200, response, state, latency, budget)
            unfinished = _unfinished(result)
            if unfinished is not None:
                return _Failure(INVALID_RESPONSE, unfinished, status=status)
            return result
        text = response.text
        try:
            payload: Any = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            payload = None
        message = _error_message(payload, text)
        overflow = parse_overflow(status, payload, text)
        if overflow is not None:
            return _Shrink(overflow, message)
        if streaming and refuses_streaming(status, message):
            return _Refused(f"HTTP {status}: {message}")
        code = _error_code(payload)
        return _Failure(
            HTTP_ERROR,
            f"HTTP {status}: {message}",
            status=status,
            retry_after=_retry_after(response),
            # The judge gateway's 502 for a key the judge refused: asking again cannot help.
            retryable=status in RETRYABLE_STATUSES and code != GATEWAY_REFUSED_KEY,
            code=code,
        )

    @staticmethod
    def _streamed_result(
        events: SseAssembler, state: _Attempt, sent: float, budget: int | None
    ) -> ChatResult:
        """A finished stream's answer, timed as vllm bench times it (see :mod:`._stream`)."""
        first, last = events.first_choice, events.last_choice
        end = last if last is not None else time.perf_counter()
        content, reasoning_content, reasoning = events.joined()
        return ChatResult(
            content=content,
            reasoning_content=reasoning_content,
            reasoning=reasoning,
            finish_reason=events.finish_reason,
            usage=events.usage,
            response_id=events.response_id,
            model=events.model,
            latency_ms=(end - sent) * 1000.0,
            elapsed_ms=(time.perf_counter() - state.started) * 1000.0,
            attempts=state.attempts,
            max_tokens=budget,
            streamed=True,
            ttft_ms=None if first is None else (first - sent) * 1000.0,
            itl_ms=events.gaps_ms,
            text_chunks=events.text_chunks,
        )

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
        body: Any, response: Reply, state: _Attempt, latency: float, budget: int | None
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
