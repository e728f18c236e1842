"""An API key read from a file, read again whenever the file changes.

A judge pod behind the judge gateway holds no key: it sends its projected ServiceAccount
token, which the kubelet writes into a file and replaces at 80 % of its lifetime (an atomic
swap of a symbolic link). :class:`KeyFile` therefore looks at the file (``os.stat``, which
follows the link) before every request and reads it again when its modification time, size,
inode or device changed. Every value read is registered for redaction
(:mod:`kyai.evaluation._redact`) before it is used, so it never reaches a log line, an error
or a stored record.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from kyai.evaluation._redact import register_secret

__all__ = ["KeyFile", "KeyFileError"]


class KeyFileError(Exception):
    """The key file cannot be read, or holds no key; the message names the flag and path."""


class KeyFile:
    """The key in ``path`` (stripped of surrounding white space), as of the last change."""

    def __init__(self, path: str | os.PathLike[str], *, flag: str) -> None:
        self.path = Path(path)
        self.flag = flag
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int, int] | None = None
        self._key: str | None = None
        #: How many times the file was read (a change seen), for tests and diagnostics.
        self.reads = 0

    def __repr__(self) -> str:  # never the key
        return f"KeyFile({str(self.path)!r}, flag={self.flag!r})"

    def key(self) -> str:
        """The key; the file is read again only when it changed (KeyFileError if unreadable)."""
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise self._error(exc.strerror or type(exc).__name__) from None
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_dev)
        with self._lock:
            if signature == self._seen and self._key is not None:
                return self._key
            try:
                text = self.path.read_text(encoding="utf-8")
            except OSError as exc:
                raise self._error(exc.strerror or type(exc).__name__) from None
            except UnicodeDecodeError:
                raise self._error("it is not UTF-8 text") from None
            key = text.strip()
            if not key:
                raise self._error("it is empty")
            register_secret(key)
            self._key, self._seen = key, signature
            self.reads += 1
            return key

    def _error(self, why: str) -> KeyFileError:
        return KeyFileError(f"{self.flag}: cannot read the API key from {self.path}: {why}")
