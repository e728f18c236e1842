"""``status.serving``: how fast the candidate answered while the run measured how well.

The generation phase's figures as ``summary.json``'s ``serving`` block holds them, defined as
``vllm bench serve`` defines them (docs/explanation/serving-figures.md), flattened into the status:
each distribution (TTFT, TPOT, ITL, E2E; over the answers, failed requests left out) as
``<figure><Statistic>Ms`` (``ttftP50Ms``, ``e2eP99Ms`` …), the phase's throughput, its GPU
count and GPU-seconds, and, when the operator serves the model and its engine exports
Prometheus metrics, the engine's own histograms over the same phase (``serving.server``).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kyai.api._base import KyaiModel

__all__ = ["DISTRIBUTIONS", "STATISTICS", "ServerServing", "ServingStatus"]

#: The distributions kept, as ``summary.json`` names them (``ttft_ms`` …).
DISTRIBUTIONS = ("ttft", "tpot", "itl", "e2e")
#: Their statistics.
STATISTICS = ("mean", "p50", "p90", "p99")


class _Distributions(KyaiModel):
    """TTFT, TPOT, ITL and E2E, each its mean and 50th, 90th and 99th percentile (ms).

    (The E2E fields are aliased by hand: the camelCase generator spells ``e2e_p50_ms``
    ``e2EP50Ms``.)
    """

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    ttft_mean_ms: float | None = None
    """Mean time to first token (ms)."""
    ttft_p50_ms: float | None = None
    """Median time to first token (ms)."""
    ttft_p90_ms: float | None = None
    """90th percentile of the time to first token (ms)."""
    ttft_p99_ms: float | None = None
    """99th percentile of the time to first token (ms)."""
    tpot_mean_ms: float | None = None
    """Mean time per output token after the first (ms)."""
    tpot_p50_ms: float | None = None
    """Median time per output token (ms)."""
    tpot_p90_ms: float | None = None
    """90th percentile of the time per output token (ms)."""
    tpot_p99_ms: float | None = None
    """99th percentile of the time per output token (ms)."""
    itl_mean_ms: float | None = None
    """Mean inter-token latency (ms)."""
    itl_p50_ms: float | None = None
    """Median inter-token latency (ms)."""
    itl_p90_ms: float | None = None
    """90th percentile of the inter-token latency (ms)."""
    itl_p99_ms: float | None = None
    """99th percentile of the inter-token latency (ms)."""
    e2e_mean_ms: float | None = Field(default=None, alias="e2eMeanMs")
    """Mean end-to-end request latency (ms)."""
    e2e_p50_ms: float | None = Field(default=None, alias="e2eP50Ms")
    """Median end-to-end request latency (ms)."""
    e2e_p90_ms: float | None = Field(default=None, alias="e2eP90Ms")
    """90th percentile of the end-to-end request latency (ms)."""
    e2e_p99_ms: float | None = Field(default=None, alias="e2eP99Ms")
    """99th percentile of the end-to-end request latency (ms)."""


class ServerServing(_Distributions):
    """The engine's own histograms over the generation phase.

    Its /metrics read before and after the phase; percentiles estimated from the buckets as
    PromQL's histogram_quantile does (means are exact).
    """

    url: str | None = None
    """The metrics URL read."""
    requests: int | None = Field(default=None, ge=0)
    """Requests the engine finished meanwhile (its E2E histogram's count)."""
    output_tokens: int | None = Field(default=None, ge=0)
    """Tokens the engine generated meanwhile."""
    output_tokens_per_second: float | None = None
    """Those over the client's phase wall time."""


class ServingStatus(_Distributions):
    """The generation phase's serving figures, measured by the client (the worker)."""

    streamed: bool | None = None
    """Whether every answer came as a stream (TTFT, TPOT and ITL exist only then)."""
    requests: int | None = Field(default=None, ge=0)
    """Answers received."""
    failed: int | None = Field(default=None, ge=0)
    """Rows whose request failed (left out of the distributions)."""
    concurrency: int | None = Field(default=None, ge=0)
    """Requests kept in flight."""
    wall_seconds: float | None = None
    """From the first request sent to the last answer received (s)."""
    output_tokens: int | None = Field(default=None, ge=0)
    """Output tokens of every answer."""
    output_tokens_per_second: float | None = None
    """Output tokens over the wall time."""
    requests_per_second: float | None = None
    """Answers over the wall time."""
    gpus: int | None = Field(default=None, ge=0)
    """GPUs serving the candidate (a served Workload's GPUs per replica × replicas)."""
    gpu_seconds: float | None = None
    """GPUs × the wall time (s)."""
    server: ServerServing | None = None
    """The engine's own figures (served Workloads whose engine exports Prometheus metrics)."""
