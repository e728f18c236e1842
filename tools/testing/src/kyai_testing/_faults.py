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

#: A streamed answer ends with ``data: [DONE]`` after half its chunks and no
#: ``finish_reason`` (as llama-cpp-python's interrupted streams and timing-out proxies end).
FAULT_DONE_EARLY = "done_early"
#: A streamed answer's body ends cleanly after half its chunks: no ``finish_reason``, no
#: ``[DONE]``.
FAULT_EOF_EARLY = "eof_early"
#: A streamed answer sends every chunk, its usage and ``[DONE]``, but no ``finish_reason``.
FAULT_NO_FINISH = "no_finish"
#: A streamed answer ends after half its chunks with vLLM's ``finish_reason: "abort"``.
FAULT_ABORT = "abort"

#: The fault kinds a request may get by default, in documentation order.
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
#: The faults of streamed answers only (asked for by name; a whole answer is sent intact).
STREAM_FAULT_KINDS: tuple[str, ...] = (
    FAULT_DONE_EARLY,
    FAULT_EOF_EARLY,
    FAULT_NO_FINISH,
    FAULT_ABORT,
)
#: Every fault kind.
ALL_FAULT_KINDS: tuple[str, ...] = FAULT_KINDS + STREAM_FAULT_KINDS

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
        unknown = sorted(set(self.kinds) - set(ALL_FAULT_KINDS))
        if unknown or not self.kinds:
            raise DoubleConfigError(
                f"Faults.kinds must be a non-empty subset of {list(ALL_FAULT_KINDS)}; "
                f"got {unknown}."
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
