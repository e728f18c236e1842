"""The serving metrics an engine exposes on ``/metrics``: vLLM's or SGLang's names and buckets.

Real ``prometheus_client`` histograms and counters in a registry of their own (one per
double or stand-in, never the global one), observed once per answered chat request:

``vllm`` (vLLM 0.11, ``vllm/v1/metrics/loggers.py``; labels ``model_name`` and ``engine``)
    ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds`` (one
    observation per gap between tokens), ``vllm:time_per_output_token_seconds`` (its
    deprecated twin, still shown in 0.11), ``vllm:request_time_per_output_token_seconds``
    (one per request), ``vllm:e2e_request_latency_seconds``, the counters
    ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total`` and
    ``vllm:request_success_total{finished_reason}``.
``sglang`` (SGLang's ``TokenizerMetricsCollector``, ``python/sglang/srt/metrics/collector.py``,
read on a main branch newer than 0.5.3; label ``model_name``)
    ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds``,
    ``sglang:e2e_request_latency_seconds``, the counters ``sglang:prompt_tokens_total``,
    ``sglang:generation_tokens_total`` and ``sglang:num_requests_total``.

The bucket boundaries are the engines' own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

MetricsFamily: TypeAlias = Literal["vllm", "sglang"]

#: The media type of Prometheus's text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

VLLM_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
VLLM_TOKEN_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
VLLM_REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
SGLANG_TTFT_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400,
)  # fmt: skip
SGLANG_ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
SGLANG_E2E_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200,
    1800, 2400,
)  # fmt: skip


class EngineMetrics:
    """One server's serving metrics, named and bucketed as ``family``'s engine names them."""

    def __init__(self, family: MetricsFamily) -> None:
        self.family = family
        self.registry = CollectorRegistry()
        prefix = f"{family}:"
        labels = ["model_name", "engine"] if family == "vllm" else ["model_name"]
        self._vllm = family == "vllm"

        def histogram(name: str, text: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(prefix + name, text, labels, buckets=buckets, registry=self.registry)

        def counter(name: str, text: str, extra: Sequence[str] = ()) -> Counter:
            return Counter(prefix + name, text, [*labels, *extra], registry=self.registry)

        ttft, itl, e2e = (
            (VLLM_TTFT_BUCKETS, VLLM_TOKEN_BUCKETS, VLLM_REQUEST_BUCKETS)
            if self._vllm
            else (SGLANG_TTFT_BUCKETS, SGLANG_ITL_BUCKETS, SGLANG_E2E_BUCKETS)
        )
        self.ttft = histogram("time_to_first_token_seconds", "Time to first token.", ttft)
        self.itl = histogram("inter_token_latency_seconds", "Inter-token latency.", itl)
        self.e2e = histogram("e2e_request_latency_seconds", "E2E request latency.", e2e)
        self.prompt_tokens = counter("prompt_tokens", "Prefill tokens processed.")
        self.generation_tokens = counter("generation_tokens", "Generation tokens processed.")
        self.tpot: Histogram | None = None
        self.request_tpot: Histogram | None = None
        self.success: Counter | None = None
        self.requests: Counter | None = None
        if self._vllm:
            self.tpot = histogram(
                "time_per_output_token_seconds",
                "Time per output token. DEPRECATED: use vllm:inter_token_latency_seconds.",
                VLLM_TOKEN_BUCKETS,
            )
            self.request_tpot = histogram(
                "request_time_per_output_token_seconds",
                "Time per output token of each request.",
                VLLM_TOKEN_BUCKETS,
            )
            self.success = counter("request_success", "Successful requests.", ["finished_reason"])
        else:
            self.requests = counter("num_requests", "Requests processed.")

    def _labels(self, model: str) -> list[str]:
        return [model, "0"] if self._vllm else [model]

    def prepare(self, model: str) -> None:
        """Create ``model``'s series at zero, as the engines do at start-up."""
        labels = self._labels(model)
        for metric in (self.ttft, self.itl, self.e2e, self.prompt_tokens, self.generation_tokens):
            metric.labels(*labels)
        for optional in (self.tpot, self.request_tpot, self.requests):
            if optional is not None:
                optional.labels(*labels)

    def observe(
        self,
        model: str,
        *,
        prompt_tokens: int,
        output_tokens: int,
        ttft_s: float,
        gaps_s: Sequence[float],
        e2e_s: float,
        finish_reason: str | None,
    ) -> None:
        """Record one answered request."""
        labels = self._labels(model)
        self.ttft.labels(*labels).observe(ttft_s)
        itl = self.itl.labels(*labels)
        tpot = self.tpot.labels(*labels) if self.tpot is not None else None
        for gap in gaps_s:
            itl.observe(gap)
            if tpot is not None:
                tpot.observe(gap)
        if self.request_tpot is not None and output_tokens > 1:
            self.request_tpot.labels(*labels).observe((e2e_s - ttft_s) / (output_tokens - 1))
        self.e2e.labels(*labels).observe(e2e_s)
        self.prompt_tokens.labels(*labels).inc(prompt_tokens)
        self.generation_tokens.labels(*labels).inc(output_tokens)
        if self.success is not None:
            self.success.labels(*labels, finish_reason or "stop").inc()
        if self.requests is not None:
            self.requests.labels(*labels).inc()

    def exposition(self) -> bytes:
        """The metrics in Prometheus's text format."""
        return generate_latest(self.registry)
