"""What the judge gateway adds to a judge request: through it vs straight to the judge.

    .venv/bin/python bench/bench_gateway.py [--concurrency 64] [--requests 10] [--rounds 3]
                                            [--latency-ms 1000] [--jitter 0.5]

Three processes, as in a cluster: a judge stand-in (a minimal OpenAI-compatible server that
answers every chat request after a latency drawn uniformly within ``--latency-ms`` ±
``--jitter``, with a fixed completion, its usage and the time it took), the gateway
(``python -m kyai.gateway``, i.e. ``kyai judge-gateway``, with its API key file and a
kubeconfig) and this client, which also serves the TokenReview and pod read the gateway makes
(once: the token cache is warmed before measuring). ``--concurrency`` clients each send
``--requests`` requests one after another, straight to the judge and then through the
gateway, for ``--rounds`` alternating rounds.

Printed for both paths: p50/p95 latency and throughput, and p50/p95 of the latency minus the
judge's own time (the judge stand-in's drawn latency would otherwise drown a few
milliseconds in its spread); their difference is what the gateway adds (target: at most 5 ms
at p50 with 64 concurrent requests). Then the mean of the gateway's own overhead histogram
(``kyai_judge_gateway_overhead_seconds``), its CPU time per request, and the load average
before and after. ``--jitter 0`` keeps the clients in lockstep: every request of a round
reaches the gateway at the same instant, its worst case."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kyai._loop import loop_factory
from kyai.gateway import DEFAULT_AUDIENCE

MODEL = "judge-model"
KEY = "sk-bench-0123456789abcdef"
REVIEWER = "bench-gateway-token"
NAMESPACE, POD, UID, ACCOUNT = "team-a", "run-1-judge-abcde", "4f1c-uid", "run-1-worker"

ANSWER = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": '{"score": 1, "reasoning": "ok"}'},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 412, "completion_tokens": 12, "total_tokens": 424},
}
BODY = {
    "model": MODEL,
    "messages": [
        {"role": "system", "content": "You are a strict grader. " * 20},
        {"role": "user", "content": "Question, reference answer and response. " * 60},
    ],
    "max_tokens": 256,
    "temperature": 0,
}


# -- the judge stand-in (its own process) ---------------------------------------------------


def serve_upstream(port: int, latency_s: float, jitter: float) -> None:
    draw = random.Random(24)

    async def chat(request: web.Request) -> web.Response:
        started = time.perf_counter()
        if request.headers.get("Authorization") != f"Bearer {KEY}":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        await request.read()
        await asyncio.sleep(latency_s * (1 + jitter * (2 * draw.random() - 1)))
        # The time the judge itself took: the client subtracts it from what it measured.
        answer = {**ANSWER, "judge_seconds": time.perf_counter() - started}
        return web.Response(body=json.dumps(answer).encode(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=None)


# -- the API server stand-in (in this process) ------------------------------------------------


def token() -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    claims = {"aud": [DEFAULT_AUDIENCE], "exp": int(time.time()) + 3600, "sub": "bench"}
    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


async def start_api(caller_token: str) -> tuple[web.AppRunner, int]:
    async def review(request: web.Request) -> web.Response:
        spec = (await request.json())["spec"]
        ok = spec["token"] == caller_token and request.headers["Authorization"].endswith(REVIEWER)
        extra = {
            "authentication.kubernetes.io/pod-name": [POD],
            "authentication.kubernetes.io/pod-uid": [UID],
        }
        user = {"username": f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}", "extra": extra}
        status = (
            {"authenticated": True, "user": user, "audiences": spec["audiences"]}
            if ok
            else {"user": {}, "error": "[invalid bearer token]"}
        )
        return web.json_response({"spec": spec, "status": status}, status=201)

    async def pod(_: web.Request) -> web.Response:
        labels = {"kyai.io/evaluation-run": "run-1", "app.kubernetes.io/component": "judge"}
        return web.json_response(
            {
                "metadata": {"name": POD, "namespace": NAMESPACE, "uid": UID, "labels": labels},
                "spec": {"serviceAccountName": ACCOUNT},
            }
        )

    app = web.Application()
    app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", review)
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", pod)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


# -- measuring ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def wait_ready(session: aiohttp.ClientSession, url: str, method: str = "GET") -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            async with session.request(method, url) as reply:
                if reply.status < 500:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit(f"{url} did not answer within 60 s")


async def measure(
    session: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    clients: int,
    each: int,
    residuals: list[float],
) -> tuple[list[float], float]:
    body = json.dumps(BODY).encode()
    latencies: list[float] = []

    async def client() -> None:
        for _ in range(each):
            started = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as reply:
                answer = await reply.read()
                if reply.status != 200:
                    raise SystemExit(f"{url} answered {reply.status}")
            elapsed = time.perf_counter() - started
            latencies.append(elapsed)
            residuals.append(elapsed - json.loads(answer)["judge_seconds"])

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return latencies, time.perf_counter() - started


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


@dataclass
class Phase:
    """What one path measured: latencies, latencies minus the judge's own time, seconds."""

    latencies: list[float] = field(default_factory=list)
    residuals: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def line(self, label: str) -> str:
        ms = [value * 1000 for value in self.latencies]
        rest = [value * 1000 for value in self.residuals]
        return (
            f"  {label:<8} n={len(ms):<5} p50 {quantile(ms, 0.5):8.2f} ms  p95 "
            f"{quantile(ms, 0.95):8.2f} ms  {len(ms) / self.seconds:6.1f} req/s   without the "
            f"judge's time: p50 {quantile(rest, 0.5):6.2f} ms  p95 {quantile(rest, 0.95):6.2f} ms"
        )


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def overhead_histogram(text: str) -> str:
    count = total = 0.0
    for line in text.splitlines():
        if line.startswith("kyai_judge_gateway_overhead_seconds_count"):
            count = float(line.split()[-1])
        if line.startswith("kyai_judge_gateway_overhead_seconds_sum"):
            total = float(line.split()[-1])
    return f"mean {1000 * total / count:.2f} ms over {count:.0f} requests" if count else "empty"


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    caller = token()
    api, api_port = await start_api(caller)
    upstream_port, port, metrics_port = free_port(), free_port(), free_port()
    key_file = workdir / "api-key"
    key_file.write_text(KEY)
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{api_port}"}}],
                "users": [{"name": "u", "user": {"token": REVIEWER}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KYAI_GATEWAY_")}
    env.update(KYAI_GATEWAY_CONCURRENCY="1024", KYAI_GATEWAY_REQUESTS_PER_SECOND="100000",
               KYAI_GATEWAY_BURST="100000")  # fmt: skip
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(upstream_port),
         "--latency-ms", str(args.latency_ms), "--jitter", str(args.jitter)],
    )  # fmt: skip
    profile = ["-m", "cProfile", "-o", args.profile] if args.profile else []
    gateway = subprocess.Popen(
        [sys.executable, *profile, "-m", "kyai.gateway", "--upstream-url",
         f"http://127.0.0.1:{upstream_port}/v1", "--model", MODEL, "--api-key-file",
         str(key_file), "--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1",
         "--port", str(port), "--metrics-port", str(metrics_port)],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            direct = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
            through = f"http://127.0.0.1:{port}/v1/chat/completions"
            await wait_ready(session, direct, "POST")
            await wait_ready(session, f"http://127.0.0.1:{metrics_port}/readyz")
            key = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
            own = {"Authorization": f"Bearer {caller}", "Content-Type": "application/json"}
            # Warm up both paths (connections, the gateway's token cache).
            for url, headers in ((direct, key), (through, own)):
                await measure(session, url, headers, args.concurrency, 2, [])
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            phases = {"direct": Phase(), "gateway": Phase()}
            user = system = 0.0
            for _ in range(args.rounds):
                for label, url, headers in (("direct", direct, key), ("gateway", through, own)):
                    phase = phases[label]
                    before = cpu_seconds(gateway.pid)
                    values, seconds = await measure(
                        session, url, headers, args.concurrency, args.requests, phase.residuals
                    )
                    if label == "gateway":
                        after = cpu_seconds(gateway.pid)
                        user += after[0] - before[0]
                        system += after[1] - before[1]
                    phase.latencies += values
                    phase.seconds += seconds
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as reply:
                metrics = await reply.text()
        print(
            f"{args.concurrency} concurrent clients x {args.requests} requests x "
            f"{args.rounds} rounds; judge stand-in latency {args.latency_ms:g} ms "
            f"± {100 * args.jitter:g} % (uniform)"
        )
        for label, phase in phases.items():
            print(phase.line(label))
        for q in (0.5, 0.95):
            added = 1000 * (
                quantile(phases["gateway"].residuals, q) - quantile(phases["direct"].residuals, q)
            )
            target = " (target: at most 5 ms)" if q == 0.5 else ""
            print(f"  the gateway adds at p{int(q * 100)}: {added:+.2f} ms{target}")
        print(f"  the gateway's own overhead histogram: {overhead_histogram(metrics)}")
        count = len(phases["gateway"].latencies)
        print(
            f"  the gateway's CPU per request: {1e6 * user / count:.0f} us user + "
            f"{1e6 * system / count:.0f} us system"
        )
        print(f"load average after: {load}")
    finally:
        for process in (gateway, upstream):
            process.terminate()
            process.wait(10)
        await api.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=10, help="per client and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=1000.0)
    parser.add_argument(
        "--jitter", type=float, default=0.5, help="latency spread: uniform within ±this share"
    )
    parser.add_argument("--profile", metavar="FILE", help="run the gateway under cProfile")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.latency_ms / 1000, args.jitter)
        return
    with (
        tempfile.TemporaryDirectory() as workdir,
        asyncio.Runner(loop_factory=loop_factory()) as runner,
    ):
        runner.run(bench(args, Path(workdir)))


if __name__ == "__main__":
    main()
