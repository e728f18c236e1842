"""What a reconcile step returns: when it wants to be looked at again.

As controller-runtime's ``Result{RequeueAfter}``: a step never schedules callbacks on the
side; it says when it wants another look (a Job's start grace running out, a deadline, a
stall coming due) and the scheduler (:mod:`kyai.controllers.scheduling`) arranges it. The
periodic resync still looks at every unfinished run that needs it, whatever a step said.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Result:
    """A reconcile's wish: ``requeue_after`` seconds from now, or None (events will do)."""

    requeue_after: float | None = None

    def sooner(self, other: Result) -> Result:
        """The earlier of two wishes (no wish loses to any)."""
        if self.requeue_after is None:
            return other
        if other.requeue_after is None:
            return self
        return self if self.requeue_after <= other.requeue_after else other


#: Nothing to look at again: events (or the periodic resync) move the object on.
DONE = Result()


def after(seconds: float) -> Result:
    """A look ``seconds`` from now (at least a tenth of a second)."""
    return Result(max(seconds, 0.1))
