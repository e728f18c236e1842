"""Early stop: the first rows all failing the same non-retryable way is a configuration error.

A server answering 404, 401/403, HTML or "unknown model" to every request (or the judge
gateway's 502 ``UpstreamRefusedKey``: the default judge refused the platform's key) cannot have
answered a single question: scoring that run 0 would hide a wrong URL, model name or key. The
first :data:`EARLY_ROWS` requests that finish (all of them when fewer are sent) are watched;
when they all failed with the same non-retryable error, the phase stops with
:class:`~kyai.evaluation._client.EndpointConfigError` (exit 3), keeping what was stored.
"""

from __future__ import annotations

from kyai.constants import GATEWAY_REFUSED_KEY
from kyai.evaluation._client import (
    HTTP_ERROR,
    INVALID_RESPONSE,
    RETRYABLE_STATUSES,
    ChatError,
    EndpointConfigError,
)

#: How many finished requests decide whether the phase can work at all.
EARLY_ROWS = 8


def _signature(error: ChatError | None) -> tuple[str, int | None] | None:
    """How a request failed, when it is a failure no retry can cure; None otherwise."""
    if error is None:
        return None
    if error.kind == HTTP_ERROR and error.code == GATEWAY_REFUSED_KEY:
        return (error.kind, error.status)  # a 502, but the platform's key: no retry cures it
    if error.kind == HTTP_ERROR and error.status is not None:
        return None if error.status in RETRYABLE_STATUSES else (error.kind, error.status)
    if error.kind == INVALID_RESPONSE:
        return (error.kind, error.status)
    return None


class EarlyStop:
    """Watches the first requests of a phase (``side`` is "candidate" or "judge")."""

    def __init__(self, side: str, endpoint: str, model: str, planned: int) -> None:
        self.side = side
        self.endpoint = endpoint
        self.model = model
        self.needed = min(EARLY_ROWS, planned)
        self.decided = self.needed == 0
        self._seen: list[tuple[str, int | None]] = []
        self._first: ChatError | None = None

    def observe(self, error: ChatError | None) -> None:
        """Count one finished request; raise when the first ones all failed alike."""
        if self.decided:
            return
        signature = _signature(error)
        if signature is None or (self._seen and signature != self._seen[0]):
            self.decided = True
            return
        self._seen.append(signature)
        if self._first is None:
            self._first = error
        if len(self._seen) >= self.needed:
            self.decided = True
            assert self._first is not None
            status = f"HTTP {self._first.status}" if self._first.status else "no status"
            if self._first.code == GATEWAY_REFUSED_KEY:
                raise EndpointConfigError(
                    f"the first {len(self._seen)} {self.side} requests to {self.endpoint} "
                    f"were all refused by the platform's judge gateway ({status}): "
                    f"{self._first.message} This is the platform's configuration, not this "
                    "run's: nothing in the run can fix it; stopped early, what was stored is "
                    "kept. Run it again once the platform team has fixed the key."
                )
            raise EndpointConfigError(
                f"the first {len(self._seen)} {self.side} requests to {self.endpoint} "
                f"(model {self.model!r}) all failed the same way ({self._first.kind}, {status}): "
                f"{self._first.message} This is a configuration error (wrong URL, model name "
                "or API key?), not a score; stopped early. What was stored is kept."
            )
