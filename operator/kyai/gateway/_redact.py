"""Keeping the judge's key and callers' tokens out of answers and logs.

An upstream may echo the request's ``Authorization`` header in an error body (raw, or base64
encoded as part of a larger string); the gateway's answers pass :meth:`Redactor.bytes` so the
key never reaches a caller. Log records pass :class:`RedactingFilter`: the key, anything
after ``Bearer`` and anything shaped like a JWT become ``[REDACTED]``.
"""

from __future__ import annotations

import base64
import logging
import math
import re

#: What a secret is replaced with.
REDACTED = "[REDACTED]"

#: Shorter secrets are not redacted (they would mangle ordinary text).
MIN_SECRET_LENGTH = 6

_BEARER = re.compile(r"(?i)(bearer\s+)\S+")
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")


def _encoded_cores(secret: bytes) -> set[str]:
    """The base64 text of ``secret`` that is the same whatever bytes surround it."""
    cores: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret).decode("ascii")
        core = encoded[math.ceil(8 * offset / 6) : (8 * (offset + len(secret))) // 6]
        if len(core) >= MIN_SECRET_LENGTH:
            cores.update((core, core.replace("+", "-").replace("/", "_")))
    return cores


class Redactor:
    """Replaces every secret it was given, raw or base64-encoded."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._needles: tuple[str, ...] = ()
        self._byte_needles: tuple[bytes, ...] = ()

    def add(self, secret: str | None) -> None:
        """Redact ``secret`` from now on (a rotated key's old value stays redacted too)."""
        if not secret or len(secret) < MIN_SECRET_LENGTH or secret in self._secrets:
            return
        self._secrets.add(secret)
        needles = {*self._needles, secret, *_encoded_cores(secret.encode("utf-8"))}
        self._needles = tuple(sorted(needles, key=len, reverse=True))
        self._byte_needles = tuple(needle.encode("utf-8") for needle in self._needles)

    def text(self, text: str) -> str:
        """``text`` without the secrets."""
        for needle in self._needles:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    def bytes(self, data: bytes) -> bytes:
        """UTF-8 ``data`` without the secrets."""
        for needle in self._byte_needles:
            if needle in data:
                data = data.replace(needle, REDACTED.encode("ascii"))
        return data


class RedactingFilter(logging.Filter):
    """Redacts the secrets of a :class:`Redactor`, bearer credentials and JWTs from records."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def clean(self, text: str) -> str:
        """``text`` as it may be logged."""
        text = _BEARER.sub(lambda match: match.group(1) + REDACTED, text)
        return self.redactor.text(_JWT.sub(REDACTED, text))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self.clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
            record.exc_text = self.clean(logging.Formatter().formatException(record.exc_info))
        return True
