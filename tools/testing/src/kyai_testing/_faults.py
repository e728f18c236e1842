"""Fault injection for the LLM double: what a flaky server, proxy or network does to a request."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from kyai_testing._model import DoubleConfigError

#: Answer 429 Too Many Requests (no Retry-After).
FAULT_429 = "429"
#: Answer 500 Internal Server Error.
FAULT_500 = "500"
#: Answer 503 Service Unavailable.
FAULT_503 = "503"
#: Close the connection without answering.
FAULT_CLOSE = "close"
#: Reset the connection (TCP RST) without answering.
FAULT_RESET = "reset"
#: Wait ``stall_s`` before answering (longer than the client's request timeout).
FAULT_STALL = "stall"
#: Send a 200 whose body is shorter than its Content-Length, then close.
FAULT_SHORT_BODY = "short_body"
#: Send a complete 200 whose JSON is cut short (Content-Length matches the cut body).
FAULT_CUT_JSON = "cut_json"

#: Every fault kind, in documentation order.
FAULT_KINDS: tuple[str, ...] = (
    FAULT_429,
    FAULT_500,
    FAULT_503,
    FAULT_CLOSE,
    FAULT_RESET,
    FAULT_STALL,
    FAULT_SHORT_BODY,
    FAULT_CUT_JSON,
)

#: The fault kinds answered with an error status.
STATUS_FAULTS: frozenset[str] = frozenset({FAULT_429, FAULT_500, FAULT_503})


@dataclass(frozen=True)
class Faults:
    """Seeded fault injection: ``rate`` of the chat requests (of ``models``, or all) fail.

    Whether a request fails, and how, is a function of the seed, the request's body and how
    many identical bodies came before it, so that a run faults the same requests whatever
    the order in which concurrent requests arrive.
    """

    rate: float
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    stall_s: float = 3.0
    models: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise DoubleConfigError(f"Faults.rate={self.rate} must be within [0, 1].")
        unknown = sorted(set(self.kinds) - set(FAULT_KINDS))
        if unknown or not self.kinds:
            raise DoubleConfigError(
                f"Faults.kinds must be a non-empty subset of {list(FAULT_KINDS)}; got {unknown}."
            )
        if self.stall_s < 0:
            raise DoubleConfigError(f"Faults.stall_s={self.stall_s} must not be negative.")

    def pick(self, body: bytes, occurrence: int, model: str | None) -> str | None:
        """The fault for the ``occurrence``-th request with this ``body``, or None."""
        if self.models is not None and model not in self.models:
            return None
        digest = hashlib.sha256(f"{self.seed}:{occurrence}:".encode() + body).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.rate:
            return None
        return self.kinds[int.from_bytes(digest[8:16], "big") % len(self.kinds)]
