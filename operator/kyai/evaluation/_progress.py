"""Progress of a phase: a bar on a terminal, periodic plain lines elsewhere (in a Job).

A phase whose requests are being retried says so: what failed, the attempt and the next wait
(``kyai generate: candidate unreachable: connection refused; attempt 3 of 6, next in 4 s``),
on a line of its own (above the bar on a terminal), and in every update it gives its listener
(``message``, which a worker reports in its run's ``status.progress``) until a row succeeds
or the phase ends. ``echo=False`` (``--quiet``) prints nothing; the listener still hears all.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

    from kyai.evaluation._client import RetryNote


@dataclass(frozen=True)
class ProgressUpdate:
    """A snapshot of a phase's progress, given to listeners."""

    phase: str
    done: int
    total: int
    errors: int
    elapsed_s: float
    #: What is being retried (a retry note's text) while it is, else None.
    message: str | None = None


ProgressListener = Callable[[ProgressUpdate], None]


class Progress:
    """Counts finished rows of one phase and reports them, and the retries of its requests."""

    def __init__(
        self,
        phase: str,
        *,
        total: int,
        done: int = 0,
        stream: TextIO | None = None,
        interval_s: float = 10.0,
        listener: ProgressListener | None = None,
        echo: bool = True,
        side: str | None = None,
    ) -> None:
        self.phase = phase
        #: Whose requests these are ("candidate", "judge"), as the retry lines name it.
        self.side = side or phase
        self.total = total
        self.done = done
        self.errors = 0
        #: The latest retry note's text while requests are being retried, else None.
        self.message: str | None = None
        self._stream = stream if stream is not None else sys.stderr
        self._echo = echo
        self._interval = interval_s
        self._listener = listener
        self._started = time.monotonic()
        self._last_line = self._started
        self._said_attempt = 0
        self._last_note = float("-inf")
        self._bar: tqdm[Any] | None = None
        if not echo:
            return
        if self._stream.isatty():
            from tqdm import tqdm  # a bar only on a terminal: logs and Jobs never load it

            self._bar = tqdm(
                total=total, initial=done, desc=phase, unit="row", file=self._stream, leave=True
            )
        else:
            self._line()

    def advance(self, *, error: bool = False) -> None:
        """Count one finished row (one that succeeded ends the retrying said so far)."""
        self.done += 1
        self.errors += int(error)
        if not error:
            self.message = None
            self._said_attempt = 0
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(errors=self.errors, refresh=False)
        elif self._echo and time.monotonic() - self._last_line >= self._interval:
            self._line()
        if self._listener is not None:
            self._listener(self.snapshot())

    def retrying(self, note: RetryNote) -> None:
        """A request failed and is asked again after a wait: say it, and tell the listener.

        Concurrent requests failing alike say one line per attempt number: a line is printed
        for an attempt later than any said since the last success, else at most once per
        interval.
        """
        self.message = note.text(self.side)
        now = time.monotonic()
        if self._echo and (
            note.attempt > self._said_attempt or now - self._last_note >= self._interval
        ):
            self._said_attempt = max(self._said_attempt, note.attempt)
            self._last_note = now
            self._print(f"kyai {self.phase}: {self.message}")
        if self._listener is not None:
            self._listener(self.snapshot())

    def snapshot(self) -> ProgressUpdate:
        """The current counts."""
        return ProgressUpdate(
            self.phase,
            self.done,
            self.total,
            self.errors,
            time.monotonic() - self._started,
            self.message,
        )

    def close(self) -> None:
        """Report the final counts; what was being retried is over."""
        if self.message is not None:
            self.message = None
            if self._listener is not None:
                self._listener(self.snapshot())
        if self._bar is not None:
            self._bar.close()
        elif self._echo:
            self._line()

    def _print(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self._stream)
        else:
            print(text, file=self._stream, flush=True)

    def _line(self) -> None:
        self._last_line = time.monotonic()
        update = self.snapshot()
        self._print(
            f"kyai {update.phase}: {update.done}/{update.total} rows, {update.errors} errors, "
            f"{update.elapsed_s:.1f}s"
        )
