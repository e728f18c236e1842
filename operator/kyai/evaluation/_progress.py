"""Progress of a phase: a bar on a terminal, periodic plain lines elsewhere (in a Job)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm


@dataclass(frozen=True)
class ProgressUpdate:
    """A snapshot of a phase's progress, given to listeners."""

    phase: str
    done: int
    total: int
    errors: int
    elapsed_s: float


ProgressListener = Callable[[ProgressUpdate], None]


class Progress:
    """Counts finished rows of one phase and reports them."""

    def __init__(
        self,
        phase: str,
        *,
        total: int,
        done: int = 0,
        stream: TextIO | None = None,
        interval_s: float = 10.0,
        listener: ProgressListener | None = None,
    ) -> None:
        self.phase = phase
        self.total = total
        self.done = done
        self.errors = 0
        self._stream = stream if stream is not None else sys.stderr
        self._interval = interval_s
        self._listener = listener
        self._started = time.monotonic()
        self._last_line = self._started
        self._bar: tqdm[Any] | None = None
        if self._stream.isatty():
            from tqdm import tqdm  # a bar only on a terminal: logs and Jobs never load it

            self._bar = tqdm(
                total=total, initial=done, desc=phase, unit="row", file=self._stream, leave=True
            )
        else:
            self._line()

    def advance(self, *, error: bool = False) -> None:
        """Count one finished row."""
        self.done += 1
        self.errors += int(error)
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(errors=self.errors, refresh=False)
        elif time.monotonic() - self._last_line >= self._interval:
            self._line()
        if self._listener is not None:
            self._listener(self.snapshot())

    def snapshot(self) -> ProgressUpdate:
        """The current counts."""
        return ProgressUpdate(
            self.phase, self.done, self.total, self.errors, time.monotonic() - self._started
        )

    def close(self) -> None:
        """Report the final counts."""
        if self._bar is not None:
            self._bar.close()
        else:
            self._line()

    def _line(self) -> None:
        self._last_line = time.monotonic()
        update = self.snapshot()
        print(
            f"kyai {update.phase}: {update.done}/{update.total} rows, {update.errors} errors, "
            f"{update.elapsed_s:.1f}s",
            file=self._stream,
            flush=True,
        )
