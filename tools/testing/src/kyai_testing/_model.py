"""The double's vocabulary: served models, scripted rules, requests, and its tokenizer."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kyai_testing._servers import OVERFLOW_STYLES, OverflowStyle

#: Characters per token of the double's tokenizer.
CHARS_PER_TOKEN = 4

#: The answer of a rule that was given no ``content``.
DEFAULT_CONTENT = "OK"


class DoubleConfigError(ValueError):
    """A model spec or rule handed to the double is inconsistent."""


def text_of(content: Any) -> str:
    """The text of a message ``content``: a string, or the ``text`` of its content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") for part in content if isinstance(part, Mapping)]
        return "".join(str(part) for part in parts)
    return str(content)


def count_text_tokens(text: str) -> int:
    """The double's token count of one text: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def count_prompt_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """The double's deterministic tokenizer: ``sum(ceil(len(content) / 4))`` over messages.

    Public so that tests can compute the numbers the double will report and enforce.
    """
    return sum(count_text_tokens(text_of(message.get("content"))) for message in messages)


@dataclass(frozen=True)
class ModelSpec:
    """One model the double serves, and how its server behaves at the context limit."""

    name: str
    #: Context window enforced on prompt + ``max_tokens``; None = unlimited.
    max_model_len: int | None = 4096
    #: Put ``max_model_len`` on the ``/v1/models`` card (vLLM and SGLang do; TRT-LLM and
    #: llama.cpp don't).
    report_max_model_len: bool = True
    #: Whose wording and JSON shape the context-length 400 (and other errors) take.
    overflow_style: OverflowStyle = "vllm"
    #: llama.cpp behaviour: silently clamp an oversized ``max_tokens``; 400 only when the
    #: prompt alone does not fit.
    clamp_max_tokens: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise DoubleConfigError("A served model needs a non-empty name.")
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise DoubleConfigError(
                f"Model {self.name!r} has max_model_len={self.max_model_len}; "
                "it must be positive or None."
            )
        if self.overflow_style not in OVERFLOW_STYLES:
            raise DoubleConfigError(
                f"Model {self.name!r} has unknown overflow_style {self.overflow_style!r}; "
                f"use one of {', '.join(OVERFLOW_STYLES)}."
            )


@dataclass(frozen=True)
class ChatRequest:
    """A parsed ``POST /v1/chat/completions`` as rules and content callables see it."""

    model: str
    messages: list[dict[str, Any]]
    #: ``max_completion_tokens`` if given, else ``max_tokens`` (vLLM's precedence).
    max_tokens: int | None
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def last_user_message(self) -> str:
        """The text of the last ``user`` message ("" if there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return text_of(message.get("content"))
        return ""

    @property
    def system_message(self) -> str:
        """The text of the first ``system`` message ("" if there is none)."""
        for message in self.messages:
            if message.get("role") == "system":
                return text_of(message.get("content"))
        return ""

    @property
    def prompt_tokens(self) -> int:
        """The prompt's size by the double's tokenizer."""
        return count_prompt_tokens(self.messages)


Matcher = str | Callable[[ChatRequest], bool]
Content = str | Callable[[ChatRequest], str]


@dataclass
class Rule:
    """A scripted answer; the first rule that matches a request answers it.

    With ``status`` (or ``drop_connection``) the rule fails the first ``times`` requests it
    matches (all of them when ``times`` is None) and then answers normally: with its own
    ``content`` when one was given, or else by letting the request fall through to the rules
    after it (and to the default "OK" when none matches).
    """

    #: Substring of the LAST user message ("" matches all), or a predicate.
    match: Matcher = ""
    #: Only requests for this model.
    model: str | None = None
    #: The answer text, or a callable computing it from the request.
    content: Content = DEFAULT_CONTENT
    #: Returned as ``message.reasoning_content`` (vLLM/SGLang reasoning parsers).
    reasoning_content: str | None = None
    #: Returned as ``message.reasoning`` (newer vLLM).
    reasoning: str | None = None
    #: Answer this HTTP error status (in the model's server's error shape) ...
    status: int | None = None
    #: ... for the first ``times`` matching requests, then answer normally; None = always.
    times: int | None = None
    #: ``Retry-After`` header (seconds) on those error answers.
    retry_after: float | None = None
    #: Extra latency for this rule, on top of the double's ``latency_s``.
    delay_s: float = 0.0
    #: ``finish_reason`` of a normal answer (the double sets "length" when it truncates).
    finish_reason: str = "stop"
    #: Close the socket without answering (a connection error for the client); obeys ``times``.
    drop_connection: bool = False
    #: Message of the error answer (default: the status's reason phrase).
    error_message: str | None = None
    #: ``type`` of the error answer (default: what the model's server would put there).
    error_type: str | None = None
    #: How many error (or dropped) answers the rule has given so far.
    failures: int = field(default=0, init=False, compare=False)

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise DoubleConfigError(
                f"Rule status {self.status} is not an HTTP error status (400-599)."
            )
        if self.times is not None and self.times < 0:
            raise DoubleConfigError(f"Rule times={self.times} must be zero or more, or None.")
        if self.delay_s < 0:
            raise DoubleConfigError(f"Rule delay_s={self.delay_s} must not be negative.")

    @property
    def fails(self) -> bool:
        """Whether the rule is scripted to fail at all (an error status or a dropped socket)."""
        return self.status is not None or self.drop_connection

    @property
    def exhausted(self) -> bool:
        """Whether a failing rule has used up its ``times``."""
        return self.fails and self.times is not None and self.failures >= self.times

    def matches(self, request: ChatRequest) -> bool:
        """Whether this rule applies to ``request`` (model and match, ignoring ``times``)."""
        if self.model is not None and self.model != request.model:
            return False
        if callable(self.match):
            return bool(self.match(request))
        return self.match in request.last_user_message

    def answer_text(self, request: ChatRequest) -> str:
        """The content of a normal answer to ``request``."""
        return self.content(request) if callable(self.content) else self.content


@dataclass
class RecordedRequest:
    """One chat request the double received, and how it was answered."""

    model: str | None
    messages: list[dict[str, Any]]
    max_tokens: int | None
    body: dict[str, Any]
    headers: dict[str, str]
    #: ``time.monotonic()`` when the request arrived and when its answer was sent.
    started: float
    finished: float | None = None
    #: The HTTP status answered; None while in flight or when the connection was dropped.
    status: int | None = None
    #: The JSON body answered (None when dropped).
    response: dict[str, Any] | None = None
    #: Index of the rule that answered, None for the default answer or a validation error.
    rule: int | None = None
    #: The fault injected into this request (a ``kyai_testing._faults`` kind), if any.
    fault: str | None = None
    #: Whether the answer was sent as a stream of server-sent events.
    streamed: bool = False

    @property
    def duration(self) -> float | None:
        """Seconds between arrival and answer."""
        return None if self.finished is None else self.finished - self.started

    @property
    def dropped(self) -> bool:
        """Whether the double closed the connection instead of answering."""
        return self.finished is not None and self.status is None

    @property
    def last_user_message(self) -> str:
        """The text of the last ``user`` message ("" if there is none)."""
        for message in reversed(self.messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return text_of(message.get("content"))
        return ""
