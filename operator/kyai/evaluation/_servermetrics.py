"""The serving engine's own figures: its Prometheus histograms, scraped around a phase.

``kyai generate --server-metrics URL`` reads the engine's ``/metrics`` (Prometheus text,
parsed with ``prometheus_client.parser``) just before the first request and just after the
last answer, and stores the difference between the two scrapes beside the client's figures
as ``serving.server``, so that what the network and the client add (queueing in front of the
engine, proxies, the client's own load) shows as the difference between the two.

Families read (the first one present of each list; names from vLLM's
``vllm/v1/metrics/loggers.py`` and SGLang's ``python/sglang/srt/metrics/collector.py``):

=================  =======================================================================
``ttft_ms``        ``vllm:time_to_first_token_seconds``, ``sglang:time_to_first_token_seconds``
``itl_ms``         ``vllm:inter_token_latency_seconds`` (vLLM ≥ 0.11),
                   ``vllm:time_per_output_token_seconds`` (older vLLM: the same per-token
                   gaps), ``sglang:inter_token_latency_seconds``
``tpot_ms``        ``vllm:request_time_per_output_token_seconds`` (one value per request)
``e2e_ms``         ``vllm:e2e_request_latency_seconds``, ``sglang:e2e_request_latency_seconds``
``output_tokens``  ``vllm:generation_tokens_total``, ``sglang:generation_tokens_total``
=================  =======================================================================

Series are those whose ``model_name`` label is the model asked for (all series when none
is), summed over their other labels (vLLM's ``engine``, data-parallel ranks). A histogram's
difference is taken bucket by bucket; when a count went down (the engine restarted between
the scrapes) the second scrape alone is used, as Prometheus treats a counter reset. From the
difference: ``mean`` = sum / count (exact), and ``p50``/``p90``/``p99`` estimated from the
buckets exactly as PromQL's ``histogram_quantile`` does: the rank ``q x count`` is located
in its bucket and interpolated linearly between the bucket's bounds (the lowest bucket starts
at 0; a rank in the ``+Inf`` bucket gives the highest finite bound). So the percentiles are
only as fine as the engine's buckets (vLLM's TTFT buckets jump from 250 to 500 ms); compare
means with the client's figures. ``requests`` is the E2E histogram's count, ``output_tokens``
the counter's increase and ``output_tokens_per_second`` that over the client's phase wall
time. Everything the engine served meanwhile counts: other clients' requests too.

Metrics that cannot be read (unreachable, not Prometheus text, none of these families) give
a warning and no ``server`` block; the run goes on.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kyai.evaluation._redact import redact

log = logging.getLogger(__name__)

#: The histograms read, by figure: candidate family names, the first present wins.
HISTOGRAMS: Mapping[str, tuple[str, ...]] = {
    "ttft_ms": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl_ms": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
    ),
    "tpot_ms": ("vllm:request_time_per_output_token_seconds",),
    "e2e_ms": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"),
}

#: The generation-token counters, in order of preference.
TOKEN_COUNTERS = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")

#: Seconds one scrape may take.
SCRAPE_TIMEOUT_S = 10.0

_QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class HistogramState:
    """One histogram summed over its series: cumulative bucket counts by upper bound."""

    buckets: dict[float, float] = field(default_factory=dict)
    total: float = 0.0
    count: float = 0.0

    def minus(self, before: HistogramState | None) -> HistogramState:
        """The observations made since ``before`` (all of them after a reset)."""
        if before is None or self.count < before.count:
            return self
        if any(self.buckets.get(le, 0.0) < n for le, n in before.buckets.items()):
            return self
        return HistogramState(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.total - before.total,
            self.count - before.count,
        )


@dataclass
class Snapshot:
    """One scrape: the histograms and the token counter found, by figure."""

    histograms: dict[str, HistogramState]
    output_tokens: float | None
    families: list[str]


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """PromQL's ``histogram_quantile`` of cumulative ``buckets`` (upper bound -> count)."""
    bounds = sorted(buckets)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    counts = [buckets[le] for le in bounds]
    for index in range(1, len(counts)):  # cumulative counts never fall (as PromQL forces)
        counts[index] = max(counts[index], counts[index - 1])
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    position = next(i for i, count in enumerate(counts) if count >= rank)
    if position == len(bounds) - 1:
        return bounds[-2]
    if position == 0 and bounds[0] <= 0:
        return bounds[0]
    start = bounds[position - 1] if position > 0 else 0.0
    below = counts[position - 1] if position > 0 else 0.0
    in_bucket = counts[position] - below
    if in_bucket <= 0:
        return bounds[position]
    return start + (bounds[position] - start) * ((rank - below) / in_bucket)


def _figures(state: HistogramState) -> dict[str, float | None]:
    """``{mean, p50, p90, p99}`` in milliseconds of a histogram in seconds."""
    figures: dict[str, float | None] = {
        "mean": round(state.total / state.count * 1000.0, 3) if state.count > 0 else None
    }
    for q in _QUANTILES:
        value = histogram_quantile(q, state.buckets) if state.count > 0 else None
        figures[f"p{round(q * 100)}"] = None if value is None else round(value * 1000.0, 3)
    return figures


def parse_metrics(text: str, model: str) -> Snapshot:
    """The families this module reads, from Prometheus text (``ValueError`` if malformed)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, float(sample.value)))
    histograms: dict[str, HistogramState] = {}
    found: list[str] = []
    for key, names in HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_count" in samples), None)
        if name is not None:
            histograms[key] = _histogram(samples, name, model)
            found.append(name)
    counter = next((n for n in TOKEN_COUNTERS if n in samples), None)
    tokens = None
    if counter is not None:
        tokens = math.fsum(value for _, value in _of_model(samples[counter], model))
        found.append(counter)
    return Snapshot(histograms, tokens, found)


def _of_model(
    series: Sequence[tuple[dict[str, str], float]], model: str
) -> Sequence[tuple[dict[str, str], float]]:
    mine = [item for item in series if item[0].get("model_name") == model]
    return mine or series


def _histogram(
    samples: Mapping[str, list[tuple[dict[str, str], float]]], name: str, model: str
) -> HistogramState:
    state = HistogramState()
    for labels, value in _of_model(samples.get(f"{name}_bucket", []), model):
        bound = float(labels.get("le", "+Inf"))
        state.buckets[bound] = state.buckets.get(bound, 0.0) + value
    state.total = math.fsum(value for _, value in _of_model(samples.get(f"{name}_sum", []), model))
    state.count = math.fsum(
        value for _, value in _of_model(samples.get(f"{name}_count", []), model)
    )
    return state


async def scrape(url: str, model: str) -> Snapshot | None:
    """Read the engine's metrics; None (and a warning) when they cannot be read."""
    import httpx  # only with --server-metrics: never on plain `kyai generate`'s start-up

    try:
        async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S, follow_redirects=True) as http:
            response = await http.get(url)
        if response.status_code != 200:
            raise ValueError(f"HTTP {response.status_code}")
        return parse_metrics(response.text, model)
    except (httpx.HTTPError, ValueError, UnicodeDecodeError) as exc:
        _warn(f"The engine's metrics at {url} cannot be read ({type(exc).__name__}: {exc})")
        return None


def _warn(why: str) -> None:
    log.warning("%s", redact(f"{why}; the run goes on without the server-side figures."))


def server_block(
    url: str, before: Snapshot | None, after: Snapshot | None, wall_s: float
) -> dict[str, Any] | None:
    """``serving.server``: the difference between the two scrapes, or None without both."""
    if before is None or after is None:
        return None
    if not after.families:
        _warn(f"The engine's metrics at {url} hold none of vLLM's or SGLang's serving figures")
        return None
    # A family absent before (an engine creating its series on first use) counts from zero.
    block: dict[str, Any] = {"url": url, "families": after.families}
    for key in HISTOGRAMS:
        state = after.histograms.get(key)
        if state is not None:
            block[key] = _figures(state.minus(before.histograms.get(key)))
    e2e = after.histograms.get("e2e_ms")
    if e2e is not None:
        block["requests"] = round(e2e.minus(before.histograms.get("e2e_ms")).count)
    if after.output_tokens is not None:
        tokens = after.output_tokens
        if before.output_tokens is not None and before.output_tokens <= tokens:
            tokens -= before.output_tokens
        block["output_tokens"] = round(tokens)
        block["output_tokens_per_second"] = round(tokens / wall_s, 3) if wall_s > 0 else None
    return block
