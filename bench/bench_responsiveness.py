"""How fast the things happen that the tests only check with generous safety nets.

The tests assert the behaviour (a watch ends at its timeoutSeconds, a stop ends open watches,
a malformed URL never reaches the network, requests are served concurrently); the figures
live here:

- ``kyai devcluster``'s stop with open watches, in seconds (the test's net: 20 s);
- a watch with ``timeoutSeconds=1``: when its stream ends (the test's net: 10 s);
- ``kyai run`` with a malformed ``--judge-endpoint``: time to exit 2 (the test's net: 10 s);
- the LLM double: six chat requests at 0.2 s latency each, sent at once (wall seconds).

    .venv/bin/python bench/bench_responsiveness.py [--repeat 5] [--watches 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx

from kyai.cli import main as kyai_main
from kyai_devcluster import DevCluster
from kyai_testing import LLMDouble

CM = "/api/v1/namespaces/default/configmaps"


async def _watch(session: aiohttp.ClientSession, url: str, params: dict[str, str]) -> None:
    async with session.get(url + CM, params={"watch": "true", **params}) as response:
        async for _ in response.content:
            pass


async def stop_with_watches(watches: int) -> float:
    """Seconds ``DevCluster.stop`` takes with ``watches`` open watches."""
    with tempfile.TemporaryDirectory() as workdir:
        cluster = DevCluster(workdir=Path(workdir))
        await cluster.start()
        async with aiohttp.ClientSession() as session:
            readers = [
                asyncio.create_task(_watch(session, cluster.url, {})) for _ in range(watches)
            ]
            while cluster.store.watch_count < watches:
                await asyncio.sleep(0.01)
            started = time.perf_counter()
            await cluster.stop()
            took = time.perf_counter() - started
            await asyncio.gather(*readers, return_exceptions=True)
        return took


async def watch_timeout() -> float:
    """Seconds until a ``timeoutSeconds=1`` watch's stream ends."""
    with tempfile.TemporaryDirectory() as workdir:
        cluster = DevCluster(workdir=Path(workdir))
        await cluster.start()
        try:
            async with aiohttp.ClientSession() as session:
                started = time.perf_counter()
                await _watch(session, cluster.url, {"timeoutSeconds": "1"})
                return time.perf_counter() - started
        finally:
            await cluster.stop()


def malformed_exit(workdir: Path) -> float:
    """Seconds ``kyai run`` takes to refuse a malformed ``--judge-endpoint``."""
    workdir.mkdir(parents=True, exist_ok=True)
    dataset = workdir / "rows.jsonl"
    dataset.write_text(json.dumps({"instruction": "q?", "ground_truth_response": "a"}) + "\n")
    args = [
        "run", "--endpoint", "http://127.0.0.1:9/v1", "--model", "cand",
        "--dataset", str(dataset), "--output", str(workdir / "out"),
        "--judge-endpoint", "localhost:8000", "--judge-model", "judge",
    ]  # fmt: skip
    started = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):
        code = kyai_main(args)
    took = time.perf_counter() - started
    if code != 2:
        raise SystemExit(f"kyai run exited {code}, not 2")
    return took


async def double_concurrency() -> float:
    """Wall seconds of six requests sent at once to a double answering each in 0.2 s."""
    with LLMDouble(latency_s=0.2).start_in_thread() as double:
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"model": "candidate", "messages": [{"role": "user", "content": "q"}]}
            started = time.perf_counter()
            await asyncio.gather(
                *(client.post(f"{double.base_url}/chat/completions", json=body) for _ in range(6))
            )
            return time.perf_counter() - started


def figures(name: str, samples: list[float]) -> None:
    print(
        f"{name:<44} median {statistics.median(samples):7.3f} s  "
        f"max {max(samples):7.3f} s  ({len(samples)} runs)"
    )


async def _repeat(times: int, measure: Callable[[], Awaitable[float]]) -> list[float]:
    return [await measure() for _ in range(times)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement (5)")
    parser.add_argument("--watches", type=int, default=10, help="open watches at stop (10)")
    args = parser.parse_args()
    with open("/proc/loadavg") as load:
        print(f"load average: {' '.join(load.read().split()[:3])}")
    figures(
        f"devcluster stop, {args.watches} watches open",
        asyncio.run(_repeat(args.repeat, lambda: stop_with_watches(args.watches))),
    )
    figures("watch timeoutSeconds=1 ends after", asyncio.run(_repeat(args.repeat, watch_timeout)))
    with tempfile.TemporaryDirectory() as workdir:
        figures(
            "kyai run, malformed --judge-endpoint: exit 2",
            [malformed_exit(Path(workdir) / str(i)) for i in range(args.repeat)],
        )
    figures(
        "double: 6 concurrent requests at 0.2 s",
        asyncio.run(_repeat(args.repeat, double_concurrency)),
    )


if __name__ == "__main__":
    main()
