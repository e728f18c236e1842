"""Files whose contents change under a running process: the judge's key, the gateway's token.

The kubelet updates a mounted Secret (a rotated key) and a projected ServiceAccount token (at
80 % of its lifetime) by swapping a symlink: the path stays, the file behind it changes.
:class:`WatchedFile` looks at the file at most every ``check_seconds`` and reads it again
when its identity (device, inode, size, modification time) changed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


class FileUnreadableError(Exception):
    """A watched file is missing, unreadable or empty; the message names the file."""


class WatchedFile:
    """The stripped text of a file, re-read when the file changes."""

    def __init__(
        self,
        path: str,
        *,
        what: str,
        check_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.what = what
        self.check_seconds = check_seconds
        self._clock = clock
        self._checked: float | None = None
        self._identity: tuple[int, int, int, int] | None = None
        self._text: str | None = None
        self._error: str | None = None

    def read(self) -> str:
        """The file's text without surrounding whitespace (FileUnreadableError)."""
        now = self._clock()
        if self._checked is None or now - self._checked >= self.check_seconds:
            self._checked = now
            self._refresh()
        if self._error is not None:
            raise FileUnreadableError(self._error)
        assert self._text is not None
        return self._text

    def _refresh(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            self._fail(f"{self.what} file {self.path} cannot be read: {exc.strerror}")
            return
        identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if identity == self._identity and self._error is None:
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            self._fail(f"{self.what} file {self.path} cannot be read: {reason}")
            return
        if not text:
            self._fail(f"{self.what} file {self.path} is empty")
            return
        self._identity, self._text, self._error = identity, text, None

    def _fail(self, message: str) -> None:
        self._identity, self._text, self._error = None, None, message
