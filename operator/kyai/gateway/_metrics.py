"""The gateway's Prometheus families, on a registry of its own.

* ``kyai_judge_gateway_requests_total{namespace,code}``: every request answered, by the
  caller's namespace (``unknown`` when no token was authenticated) and HTTP status;
* ``kyai_judge_gateway_tokens_total{namespace,kind}``: the judge's ``usage``
  (``kind="prompt"``: ``prompt_tokens``, ``kind="completion"``: ``completion_tokens``), for
  charging each namespace back;
* ``kyai_judge_gateway_upstream_refusals_total{code}``: requests the default judge refused
  for the platform's key (its 401 or 403; the caller got a 502);
* ``kyai_judge_gateway_upstream_checks_total{code}``: answers of the admin port's
  ``GET /upstream/v1/models`` check, by HTTP status (a shared answer counted for each caller);
* ``kyai_judge_gateway_token_reviews_total{result}``: TokenReviews sent (``accepted``,
  ``refused``, ``error``); the cache keeps it far below the requests;
* ``kyai_judge_gateway_in_flight_requests{namespace}``: requests being served upstream;
* ``kyai_judge_gateway_overhead_seconds``: what the gateway adds to a forwarded request (its
  whole time minus the upstream's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

#: The exposition's content type.
CONTENT_TYPE = CONTENT_TYPE_LATEST

#: Buckets of the overhead histogram (seconds): the target is a few milliseconds.
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _InFlight(Collector):
    """``kyai_judge_gateway_in_flight_requests``, read from the limiters at scrape time."""

    def __init__(self, source: Callable[[], Mapping[str, int]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kyai_judge_gateway_in_flight_requests",
            "Requests of a namespace being served by the default judge now.",
            labels=["namespace"],
        )
        for namespace, count in sorted(self.source().items()):
            family.add_metric([namespace], count)
        yield family


class GatewayMetrics:
    """The families above; :meth:`exposition` renders them.

    The children of the labelled families are kept once made: a request costs dictionary
    lookups, not ``labels()`` calls.
    """

    def __init__(self, in_flight: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kyai_judge_gateway_requests",
            "Requests the judge gateway answered, by the caller's namespace and HTTP status.",
            ["namespace", "code"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "kyai_judge_gateway_tokens",
            "Tokens the default judge reported (usage), by the caller's namespace and kind.",
            ["namespace", "kind"],
            registry=self.registry,
        )
        self.reviews = Counter(
            "kyai_judge_gateway_token_reviews",
            "TokenReviews the gateway sent, by result (accepted, refused, error).",
            ["result"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "kyai_judge_gateway_upstream_refusals",
            "Requests the default judge refused for the platform's API key (HTTP 401 or 403 "
            "upstream; the caller got a 502 UpstreamRefusedKey), by the judge's status.",
            ["code"],
            registry=self.registry,
        )
        self.checks = Counter(
            "kyai_judge_gateway_upstream_checks",
            "Answers of the admin port's GET /upstream/v1/models (the default judge's model "
            "list, checked before a run; one answer is shared by the callers of a few "
            "seconds), by HTTP status.",
            ["code"],
            registry=self.registry,
        )
        if in_flight is not None:
            self.registry.register(_InFlight(in_flight))
        self.overhead = Histogram(
            "kyai_judge_gateway_overhead_seconds",
            "Time the gateway adds to a forwarded request (its whole time minus the upstream's).",
            buckets=OVERHEAD_BUCKETS,
            registry=self.registry,
        )

        self._answered: dict[tuple[str, int], Any] = {}
        self._tokens: dict[tuple[str, str], Any] = {}

    def answered(self, namespace: str, code: int) -> None:
        """Count one answered request."""
        child = self._answered.get((namespace, code))
        if child is None:
            child = self.requests.labels(namespace=namespace, code=str(code))
            self._answered[namespace, code] = child
        child.inc()

    def refused_key(self, code: int) -> None:
        """Count one request the default judge refused for the platform's key."""
        self.refusals.labels(code=str(code)).inc()

    def checked(self, code: int) -> None:
        """Count one answer of the admin port's check of the default judge."""
        self.checks.labels(code=str(code)).inc()

    def usage(self, namespace: str, usage: Mapping[str, Any] | None) -> None:
        """Add a response's ``usage`` (prompt and completion tokens) to the namespace."""
        if not isinstance(usage, Mapping):
            return
        for kind, key in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                child = self._tokens.get((namespace, kind))
                if child is None:
                    child = self.tokens.labels(namespace=namespace, kind=kind)
                    self._tokens[namespace, kind] = child
                child.inc(value)

    def review(self, result: str) -> None:
        """Count one TokenReview."""
        self.reviews.labels(result=result).inc()

    def exposition(self) -> bytes:
        """The families in Prometheus' text format."""
        return generate_latest(self.registry)
