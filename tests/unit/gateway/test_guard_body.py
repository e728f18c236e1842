"""What the gateway reads from streams and redacts from tracebacks, at its edges (issue 36's
mutation pass)."""

from __future__ import annotations

import json
import logging

from kyai.gateway import REDACTED, RedactingFilter, Redactor, Refusal, RefusedError, StreamUsage
from kyai.gateway._body import MAX_EVENT_BYTES

KEY = "sk-live-0123456789abcdef"
USAGE = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}


def test_usage_is_found_in_an_event_without_a_space_after_data() -> None:
    usage = StreamUsage()
    usage.feed(b'data:{"choices":[],"usage":' + json.dumps(USAGE).encode() + b"}\n\n")
    usage.close()
    assert usage.usage == USAGE


def test_an_event_of_exactly_the_limit_is_kept_and_a_longer_one_dropped() -> None:
    event = b'data: {"usage":' + json.dumps(USAGE).encode() + b"}"

    def found(size: int) -> object:
        line = event + b" " * (size - len(event))  # JSON allows trailing blanks
        assert len(line) == size
        usage = StreamUsage()
        usage.feed(line)  # no newline yet: the whole event waits as the partial line
        usage.feed(b"\n\n")
        usage.close()
        return usage.usage

    assert found(MAX_EVENT_BYTES) == USAGE
    assert found(MAX_EVENT_BYTES + 1) is None


def _logged(redactor: Redactor, exc_info: logging._SysExcInfoType) -> str:
    """The record of an error with ``exc_info``, filtered, then formatted as a handler does."""
    record = logging.LogRecord(
        "kyai.gateway", logging.ERROR, __file__, 1, "the judge failed", None, exc_info
    )
    assert RedactingFilter(redactor).filter(record)
    return logging.Formatter().format(record)


def test_a_logged_traceback_never_shows_the_key() -> None:
    redactor = Redactor()
    redactor.add(KEY)
    try:
        raise RuntimeError(f"upstream said: bad key {KEY}")
    except RuntimeError as exc:
        text = _logged(redactor, (RuntimeError, exc, exc.__traceback__))
    assert KEY not in text
    assert f"RuntimeError: upstream said: bad key {REDACTED}" in text
    assert "Traceback (most recent call last)" in text


def test_an_exception_never_raised_is_logged_without_the_key() -> None:
    # An exception object that was never raised: it has no traceback.
    redactor = Redactor()
    redactor.add(KEY)
    error = ValueError(f"key {KEY} refused")
    text = _logged(redactor, (ValueError, error, None))
    assert KEY not in text and f"ValueError: key {REDACTED} refused" in text


def test_a_refusal_raised_reads_as_its_message() -> None:
    refusal = Refusal(403, "NotAJudgeWorker", "the pod is not a judge worker")
    error = RefusedError(refusal)
    assert str(error) == "the pod is not a judge worker" and error.refusal is refusal
