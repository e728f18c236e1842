"""Serving figures of the generation phase, defined as ``vllm bench serve`` defines them.

Per answer (fields of each generation record; None on a record whose request failed), with
``t0`` the ``time.perf_counter()`` at which the request was sent and ``t1 .. tn`` those of its
``n`` choice chunks (events whose ``choices`` is not empty, each timed on its own as it is
taken out of the read that brought it, :mod:`kyai.evaluation._stream`):

- ``ttft_ms`` = ``t1 - t0``; ``latency_ms`` (E2E) = ``tn - t0`` (the usage chunk and
  ``[DONE]`` are not choice chunks);
- ``itl_ms_mean``: the mean of the ``n - 1`` gaps ``t(k+1) - tk``;
- ``output_tokens``: the server's ``usage.completion_tokens``, or, when a streamed answer came
  without usage, the number of chunks carrying text (``output_tokens_source`` says which:
  ``usage`` or ``chunks``);
- ``tpot_ms`` = ``(E2E - TTFT) / (output_tokens - 1)`` (None below two tokens);
- ``streamed``: whether the answer came as a stream (TTFT, TPOT and ITL exist only then).

Per phase (``serving`` in ``run.json``'s ``generation`` and in ``summary.json``), over the
answers one ``kyai generate`` invocation received: ``requests`` (answers) and ``failed``
(rows whose request failed), ``concurrency``, ``wall_seconds`` (from the first request sent to
the last answer), the distributions ``ttft_ms``, ``tpot_ms`` and ``e2e_ms`` over the answers
and ``itl_ms`` over every gap of every answer (as vllm pools them), each ``{mean, p50, p90,
p99}`` with percentiles interpolated linearly between the closest ranks (numpy's default,
which vllm uses), ``output_tokens`` (their sum), ``output_tokens_per_second`` and
``requests_per_second`` (each over ``wall_seconds``), and ``streamed`` (every answer was).
With the GPU count (``--gpus``), ``gpu_seconds`` = GPUs x ``wall_seconds``; with the engine's
metrics (``--server-metrics``), ``server``: see :mod:`kyai.evaluation._servermetrics`.
"""

from __future__ import annotations

import argparse
import math
import statistics
from array import array
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kyai._argtypes import positive_int

if TYPE_CHECKING:
    from kyai.evaluation._client import ChatResult

#: The timing fields of a generation record (all None when its request failed).
TIMING_FIELDS = (
    "streamed",
    "ttft_ms",
    "tpot_ms",
    "itl_ms_mean",
    "output_tokens",
    "output_tokens_source",
)

#: The percentiles of every distribution.
PERCENTILES = (50, 90, 99)

#: A record's timing fields when its request failed.
NO_TIMING: Mapping[str, Any] = dict.fromkeys(TIMING_FIELDS)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def timing_fields(result: ChatResult) -> dict[str, Any]:
    """The timing fields of the record of a successful answer."""
    usage = result.usage
    tokens = usage.get("completion_tokens") if usage is not None else None
    source: str | None = "usage"
    if not isinstance(tokens, int) or isinstance(tokens, bool):
        tokens, source = (result.text_chunks, "chunks") if result.streamed else (None, None)
    ttft = result.ttft_ms
    tpot = None
    if ttft is not None and tokens is not None and tokens > 1:
        tpot = (result.latency_ms - ttft) / (tokens - 1)
    gaps = result.itl_ms
    return {
        "streamed": result.streamed,
        "ttft_ms": _round(ttft),
        "tpot_ms": _round(tpot),
        "itl_ms_mean": _round(math.fsum(gaps) / len(gaps)) if gaps else None,
        "output_tokens": tokens,
        "output_tokens_source": source,
    }


def distribution(values: Iterable[float]) -> dict[str, float | None]:
    """``{mean, p50, p90, p99}`` of ``values`` (all None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    if len(ordered) == 1:
        cuts = [ordered[0]] * 99
    else:
        cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    figures: dict[str, float | None] = {"mean": _round(math.fsum(ordered) / len(ordered))}
    figures.update({f"p{p}": _round(cuts[p - 1]) for p in PERCENTILES})
    return figures


def _rate(amount: float, seconds: float) -> float | None:
    return round(amount / seconds, 3) if seconds > 0 else None


class ServingRecorder:
    """The per-answer timings of one generation phase, gathered as the answers arrive.

    Every inter-token gap is kept (8 bytes each) so that the ITL percentiles are exact.
    """

    def __init__(self) -> None:
        self.requests = 0
        self.failed = 0
        self.streamed = 0
        self.output_tokens = 0
        self.ttft_ms: list[float] = []
        self.tpot_ms: list[float] = []
        self.e2e_ms: list[float] = []
        self.itl_ms = array("d")

    def observe(self, result: ChatResult, fields: Mapping[str, Any]) -> None:
        """Take one answer and its record's timing fields (:func:`timing_fields`)."""
        self.requests += 1
        self.streamed += result.streamed
        self.e2e_ms.append(result.latency_ms)
        if result.ttft_ms is not None:
            self.ttft_ms.append(result.ttft_ms)
        if fields["tpot_ms"] is not None:
            self.tpot_ms.append(fields["tpot_ms"])
        self.itl_ms.extend(result.itl_ms)
        self.output_tokens += fields["output_tokens"] or 0

    def fail(self) -> None:
        """Count a row whose request failed."""
        self.failed += 1

    def block(self, *, wall_s: float, concurrency: int, gpus: int | None = None) -> dict[str, Any]:
        """The phase's ``serving`` block (without ``server``, which the scrapes give)."""
        block: dict[str, Any] = {
            "streamed": self.requests > 0 and self.streamed == self.requests,
            "requests": self.requests,
            "failed": self.failed,
            "concurrency": concurrency,
            "wall_seconds": round(wall_s, 3),
            "ttft_ms": distribution(self.ttft_ms),
            "tpot_ms": distribution(self.tpot_ms),
            "itl_ms": distribution(self.itl_ms),
            "e2e_ms": distribution(self.e2e_ms),
            "output_tokens": self.output_tokens,
            "output_tokens_per_second": _rate(self.output_tokens, wall_s),
            "requests_per_second": _rate(self.requests, wall_s),
        }
        if gpus is not None:
            block["gpus"] = gpus
            block["gpu_seconds"] = round(gpus * wall_s, 3)
        return block


def _p50(block: Mapping[str, Any], figure: str) -> str:
    value = (block.get(figure) or {}).get("p50")
    return "n/a" if value is None else f"{value:.1f}"


def serving_note(serving: Mapping[str, Any] | None) -> str:
    """``ttft_p50_ms=… output_tokens_per_s=…`` for the result lines ("n/a" when unknown).

    When the engine's metrics were read (``server``), the client's ITL p50 and the engine's
    follow side by side: ``itl_p50_ms=… engine_itl_p50_ms=…``.
    """
    serving = serving or {}
    rate = serving.get("output_tokens_per_second")
    note = (
        f"ttft_p50_ms={_p50(serving, 'ttft_ms')} "
        f"output_tokens_per_s={'n/a' if rate is None else f'{rate:.1f}'}"
    )
    server = serving.get("server")
    if isinstance(server, Mapping):
        note += f" itl_p50_ms={_p50(serving, 'itl_ms')} engine_itl_p50_ms={_p50(server, 'itl_ms')}"
    return note


def _metrics_url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http:// or https:// URL (for example http://127.0.0.1:8000/metrics)"
        )
    return text.strip()


def add_serving_flags(parser: argparse.ArgumentParser) -> None:
    """``--no-stream``, ``--server-metrics`` and ``--gpus`` (``kyai generate`` and ``run``)."""
    group = parser.add_argument_group("serving figures")
    group.add_argument(
        "--no-stream",
        action="store_true",
        help="ask for whole answers instead of streams (then no time to first token, time "
        "per output token or inter-token latency is measured)",
    )
    group.add_argument(
        "--server-metrics",
        type=_metrics_url,
        metavar="URL",
        help="the engine's Prometheus /metrics (vLLM, SGLang), read before and after "
        "generation: its own TTFT, ITL and E2E histograms go beside the client's figures",
    )
    group.add_argument(
        "--gpus",
        type=positive_int,
        metavar="N",
        help="GPUs serving the candidate: adds gpu_seconds (N x the generation wall time)",
    )
