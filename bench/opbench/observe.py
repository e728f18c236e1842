"""What the operator bench watches: each run's timeline from two watches, latencies."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from opbench.objects import LABEL_RUN
from opbench.procs import BenchError
from opbench.retry import RETRIES


@dataclass
class RunTimes:
    """Client-side monotonic times of one run's milestones (None: not seen)."""

    created: float | None = None
    generation_job: float | None = None
    generation_complete: float | None = None
    judging: float | None = None
    judge_job: float | None = None
    judge_complete: float | None = None
    succeeded: float | None = None
    failed: float | None = None
    phases: list[str] = field(default_factory=list)
    status_writes: int = 0
    message: str = ""
    avg_score: float | None = None

    @property
    def done(self) -> bool:
        return self.succeeded is not None or self.failed is not None


@dataclass
class Observed:
    """Everything the watches recorded."""

    runs: dict[str, RunTimes]
    job_added: Counter[str] = field(default_factory=Counter)
    job_deleted: Counter[str] = field(default_factory=Counter)
    job_failed: dict[str, str] = field(default_factory=dict)
    job_events: int = 0
    run_events: int = 0

    def run(self, name: str) -> RunTimes:
        return self.runs.setdefault(name, RunTimes())

    def on_job(self, kind: str, job: dict[str, Any], now: float) -> None:
        self.job_events += 1
        meta = job["metadata"]
        name: str = meta["name"]
        owner = (meta.get("labels") or {}).get(LABEL_RUN)
        if owner is None:
            return
        times = self.run(owner)
        generation = name.endswith("-generate")
        if kind == "ADDED":
            self.job_added[name] += 1
            if generation and times.generation_job is None:
                times.generation_job = now
            if not generation and times.judge_job is None:
                times.judge_job = now
        elif kind == "DELETED":
            self.job_deleted[name] += 1
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Complete":
                if generation and times.generation_complete is None:
                    times.generation_complete = now
                if not generation and times.judge_complete is None:
                    times.judge_complete = now
            elif condition.get("type") == "Failed" and name not in self.job_failed:
                self.job_failed[name] = str(condition.get("message") or condition.get("reason"))

    def on_run(self, kind: str, run: dict[str, Any], now: float) -> None:
        self.run_events += 1
        times = self.run(run["metadata"]["name"])
        if kind == "MODIFIED":
            times.status_writes += 1
        status = run.get("status") or {}
        phase = status.get("phase")
        if phase and (not times.phases or times.phases[-1] != phase):
            times.phases.append(phase)
        times.message = str(status.get("message") or "")
        if isinstance(status.get("avgScore"), int | float):
            times.avg_score = float(status["avgScore"])
        if phase == "Judging" and times.judging is None:
            times.judging = now
        elif phase == "Succeeded" and times.succeeded is None:
            times.succeeded = now
        elif phase == "Failed" and times.failed is None:
            times.failed = now


@dataclass
class Cursor:
    """Where a watch is: the last resourceVersion it saw (an event's or a bookmark's)."""

    resource_version: str


async def watch(
    http: httpx.AsyncClient,
    path: str,
    resource_version: str,
    on_event: Callable[[str, dict[str, Any], float], None],
) -> None:
    """Follow a collection from ``resource_version``; reconnect where it left off, also after
    a reset connection (as client-go's reflector re-watches).

    The position moves with each line read, so a stream that breaks resumes after the last
    event delivered (not where that stream began: its events would come a second time).
    """
    params = {"watch": "true", "allowWatchBookmarks": "true"}
    cursor = Cursor(resource_version)
    while True:
        params["resourceVersion"] = cursor.resource_version
        try:
            await _follow(http, path, params, cursor, on_event)
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError):
            RETRIES["watch-reconnect"] += 1
            await asyncio.sleep(0.5)


async def _follow(
    http: httpx.AsyncClient,
    path: str,
    params: dict[str, str],
    cursor: Cursor,
    on_event: Callable[[str, dict[str, Any], float], None],
) -> None:
    """One watch request; ``cursor`` follows the last resource version seen."""
    async with http.stream(
        "GET", path, params=params, timeout=httpx.Timeout(None, connect=10.0)
    ) as response:
        response.raise_for_status()
        pending = b""
        # Bytes split on newlines and parsed by orjson: this process shares the two cores
        # with the operator, and httpx's line decoding cost a third of its CPU.
        async for chunk in response.aiter_bytes():
            received = time.monotonic()
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    raise BenchError(f"The watch of {path} failed: {obj.get('message')}")
                cursor.resource_version = obj["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    on_event(kind, obj, received)


# -- figures -------------------------------------------------------------------------------


@dataclass
class Latency:
    """Distribution of one latency, in seconds."""

    label: str
    n: int
    p50: float | None
    p95: float | None
    max: float | None


def latency(label: str, pairs: Iterator[tuple[float | None, float | None]]) -> Latency:
    values = sorted(end - start for start, end in pairs if start is not None and end is not None)
    if not values:
        return Latency(label, 0, None, None, None)
    if len(values) == 1:
        return Latency(label, 1, values[0], values[0], values[0])
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return Latency(label, len(values), cuts[49], cuts[94], values[-1])
