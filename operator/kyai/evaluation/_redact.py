"""Redaction of the secrets the engine holds (API keys, the HuggingFace token).

Every string the engine stores (JSONL records, JSON documents) or prints (log lines, error
messages) passes :func:`redact`. A secret is replaced wherever it appears raw or base64-encoded
(standard and URL-safe alphabets, at any byte alignment, so that ``Bearer <key>`` or
``user:<key>`` encoded whole is caught too).
"""

from __future__ import annotations

import base64
import logging
import math
import threading

#: What a secret is replaced with.
REDACTED = "[REDACTED]"

#: Secrets shorter than this are not redacted (they would mangle ordinary text).
MIN_SECRET_LENGTH = 6

_lock = threading.Lock()
_secrets: set[str] = set()
_needles: tuple[str, ...] = ()
_byte_needles: tuple[bytes, ...] = ()
_REDACTED_BYTES = REDACTED.encode("ascii")


def _encoded_cores(secret: bytes) -> set[str]:
    """The base64 text of ``secret`` that is the same whatever bytes surround it."""
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret).decode("ascii")
        start = math.ceil(8 * offset / 6)
        end = (8 * (offset + len(secret))) // 6
        core = encoded[start:end]
        if len(core) >= MIN_SECRET_LENGTH:
            cores.add(core)
            cores.add(core.replace("+", "-").replace("/", "_"))
    return cores


def register_secret(secret: str | None) -> None:
    """Redact ``secret`` (raw and base64) from everything stored or printed from now on."""
    global _needles, _byte_needles
    if not secret or len(secret) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if secret in _secrets:
            return
        _secrets.add(secret)
        needles = set(_needles)
        needles.add(secret)
        needles.update(_encoded_cores(secret.encode("utf-8")))
        # Longest first, so that a longer needle is not broken by a shorter one inside it.
        _needles = tuple(sorted(needles, key=len, reverse=True))
        _byte_needles = tuple(needle.encode("utf-8") for needle in _needles)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by :data:`REDACTED`."""
    for needle in _needles:
        if needle in text:
            text = text.replace(needle, REDACTED)
    return text


def redact_bytes(data: bytes) -> bytes:
    """UTF-8 ``data`` with every registered secret replaced, as :func:`redact` does on text."""
    for needle in _byte_needles:
        if needle in data:
            data = data.replace(needle, _REDACTED_BYTES)
    return data


def forget_secrets() -> None:
    """Forget every registered secret (for tests)."""
    global _needles, _byte_needles
    with _lock:
        _secrets.clear()
        _needles = ()
        _byte_needles = ()


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _needles:
            message = record.getMessage()
            cleaned = redact(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
            if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True
