"""Benchmark of the operator under load (``make bench-operator``).

N EvaluationRuns (default 100) over M endpoint Workloads (default 10) and one five-row
custom Snapshot, in ``kyai devcluster``, with ``kyai operator`` as a subprocess. The LLM
double (another subprocess) answers at once, so what is measured is the operator, the API
server and the simulated kubelet starting 2 x N worker pods, not a model. With
``--standin`` the workers are an instant stand-in that the devcluster runs inside its own
event loop (``bench/opbench/standin.py``: it reports what a real worker reports, through
the API with the pod's own token), so that the figures are the operator's, not those of
2 x N interpreter start-ups on the same two cores.

The runs arrive as an Argo CD sync sends them: client-go's rate limiter with Argo CD's
defaults (``ARGOCD_K8S_CLIENT_QPS`` 50, burst 100: the first 100 at once, then 50 a second;
``--create-qps``/``--create-burst``; ``--create-qps 0`` sends them as fast as the API server
takes them, which measures the operator's throughput rather than its latency).

Everything is observed from this process through two watches (jobs and evaluationruns in
the bench namespace), each event stamped when it is received:

* run created (the create call returned) -> its generation Job exists (ADDED);
* generation Job Complete -> the run's phase is Judging;
* judge Job Complete -> the run's phase is Succeeded;
* the total wall time for all runs and how many succeeded (the failures' messages);
* the operator's peak RSS (``VmHWM``) and CPU seconds (``utime + stime``), that process only.

Also checked, as evidence when the operator misbehaves: Jobs per run (exactly one
generation and one judge Job), Job re-creations, pods per Job (retries), phase orders,
the runs' scores, and ERROR/WARNING lines of the operator's log.

Context printed with them: the operator's run-queue wait (schedstat), runnable processes on
the host, the API server's latency for one GET a second, the devcluster's, this process's
and the workers' CPU, and how often each kopf handler ran (from the operator's log).

After the burst, ``--after-burst`` runs (default 20) are created one at a time, each once
the one before has finished, with the burst's runs still in the namespace: their latencies
are the operator's own with nothing queued. Printed with them: the burst's creates/s,
generation Jobs/s and runs finished/s.

The work directory (the pods' volumes and logs) goes on a tmpfs when there is one
(``--workdir-base``): what a kubelet writes is a node's work, and on this kind of VM a
directory made on disk costs 0.3 ms of the operator's two cores. ``--quick`` is 10 runs
over 2 Workloads. The bench stops by itself after ``--timeout`` seconds (default 600,
set-up included) and says so. Figures go to ``bench/out/`` as JSON (with every run's
timeline), next to the logs of the operator, the devcluster and the double.

``--leader-elect`` runs the operator as the chart does, two replicas electing a leader on a
Lease: the measured one holds it, a standby waits (issue 32: within 10 % of the figures
without).

Diagnosis: ``--access-log`` has the devcluster log every request and counts the operator's
by method, resource and status; ``--control-plane-nice -10`` gives the operator and the
devcluster CPU before the 2 x N worker processes (on one machine they share two cores;
in a real cluster they would not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from kyai._loop import loop_factory, tune_collector
from opbench.objects import (
    CAPITALS,
    EXPECTED_SCORE,
    GROUP_PATH,
    JUDGE_MODEL,
    LABEL_RUN,
    NAMESPACE,
    OUT,
    PHASE_ORDER,
    ROOT,
    WORKER_IMAGE,
    double_rules,
    run_body,
    run_name,
    snapshot_body,
    workload_body,
)
from opbench.observe import Observed, RunTimes, latency, watch
from opbench.procs import (
    BenchError,
    BenchTimeout,
    Child,
    Usage,
    host_speed,
    prioritise,
    runnable_processes,
    spawn,
    usage,
    wait_until,
)
from opbench.report import Result, handler_calls, render, summarize_access, summarize_log
from opbench.retry import MAX_RETRIES, RETRIES, RetryingTransport

#: The instant stand-in the devcluster runs in place of the worker image's entrypoint
#: (``--standin``: in its own event loop, no process per worker pod).
STANDIN = "opbench.standin:run"
BENCH_DIR = Path(__file__).resolve().parent


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path, stamp: str) -> None:
        self.args = args
        self.workdir = workdir
        self.stamp = stamp
        self.deadline: float = time.monotonic() + args.timeout
        self.children: list[Child] = []
        self.observed = Observed(runs={run_name(i): RunTimes() for i in range(args.runs)})
        self.late: dict[str, RunTimes] = {}  # the runs created one by one after the burst
        self.last_create: float | None = None
        self.operator: Child | None = None
        self.devcluster: Child | None = None
        self.baseline: Usage | None = None
        self.runnable: list[int] = []
        self.api_create_s: list[float] = []  # the runs' create calls
        self.api_get_s: list[float] = []  # a GET of one run, once a second
        self.first_create: float | None = None
        self.final_usage: Usage | None = None
        self.final_jobs: list[dict[str, Any]] = []
        self.final_pods: list[dict[str, Any]] = []
        self.double_url = ""
        self.speed_before = self.speed_after = 0.0
        self.own_cpu_s = 0.0  # this process's CPU while the runs ran

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def profiled(self, name: str) -> list[str]:
        """``-m cProfile -o ...`` for ``--profile``: the process's profile in bench/out/."""
        if not self.args.profile:
            return []
        OUT.mkdir(parents=True, exist_ok=True)
        return ["-m", "cProfile", "-o", str(OUT / f"bench-operator-{self.stamp}-{name}.prof")]

    # set-up (synchronous: subprocesses and kubectl)

    def start_double(self) -> str:
        rules = self.workdir / "rules.json"
        rules.write_text(json.dumps(double_rules(self.args.workloads)))
        ready = self.workdir / "double.url"
        models = [arg for i in range(self.args.workloads) for arg in ("--model", f"cand-{i}")]
        child = spawn(
            "LLM double",
            [sys.executable, "-m", "kyai_testing.llm_double", "--port", "0",
             *models, "--judge-model", JUDGE_MODEL, "--max-model-len", "4096",
             "--rules", str(rules), "--ready-file", str(ready)],
            self.workdir / "double.log",
            dict(os.environ),
        )  # fmt: skip
        self.children.append(child)
        wait_until("the LLM double", ready.exists, self.deadline, children=[child])
        wait_until("the LLM double's URL", lambda: ready.read_text().strip() != "", self.deadline)
        return ready.read_text().strip()

    def start_devcluster(self) -> tuple[str, Path]:
        kubeconfig = self.workdir / "kubeconfig"
        child = spawn(
            "devcluster",
            [sys.executable, *self.profiled("devcluster"), "-m", "kyai.cli", "devcluster",
             "--port", "0",
             "--kubeconfig", str(kubeconfig), "--workdir", str(self.workdir / "cluster"),
             "--local-image", WORKER_IMAGE, *(["--verbose"] if self.args.access_log else []),
             *(["--entrypoint-function", STANDIN] if self.args.standin else [])],
            self.workdir / "devcluster.log",
            {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(BENCH_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])},
        )  # fmt: skip
        self.children.append(child)
        self.devcluster = child
        prioritise(child, self.args.control_plane_nice)
        pattern = re.compile(r"serving at (http://\S+)")

        def serving() -> bool:
            return pattern.search(child.log.read_text(errors="replace")) is not None

        wait_until("the devcluster", serving, self.deadline, children=[child])
        found = pattern.search(child.log.read_text(errors="replace"))
        assert found is not None
        return found.group(1), kubeconfig

    def kubectl(self, kubeconfig: Path, *args: str) -> str:
        completed = subprocess.run(
            ["kubectl", *args],
            capture_output=True,
            text=True,
            timeout=max(5.0, min(60.0, self.remaining())),
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            check=False,
        )
        if completed.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args)} failed: {completed.stderr.strip()}")
        return completed.stdout

    def start_operator(self, kubeconfig: Path, standby: bool = False) -> Child:
        """The operator; with ``--leader-elect``, two: the measured one holds the Lease first,
        then a standby starts (as the chart runs them)."""
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "KYAI_WORKER_IMAGE": WORKER_IMAGE,
            "KYAI_METRICS_PORT": "0",
            "KYAI_HEALTH_PORT": "0",
        }
        name = "operator-standby" if standby else "operator"
        election = ["--leader-elect", "--leader-election-identity", name]
        child = spawn(
            name,
            [
                sys.executable,
                *([] if standby else self.profiled("operator")),
                "-m",
                "kyai.cli",
                "operator",
                "--all-namespaces",
                *(election if self.args.leader_elect else []),
            ],
            self.workdir / f"{name}.log",
            env,
        )
        self.children.append(child)
        prioritise(child, self.args.control_plane_nice)
        if standby:
            return child
        self.operator = child
        if self.args.leader_elect:
            self.wait_for_lease(child)
            self.start_operator(kubeconfig, standby=True)
        return child

    def wait_for_lease(self, child: Child) -> None:
        """Until the operator says it holds the Lease (its log)."""
        deadline = time.monotonic() + min(60.0, self.remaining())
        while time.monotonic() < deadline:
            if "Holding the Lease" in child.log.read_text(errors="replace"):
                return
            if child.process.poll() is not None:
                raise BenchError(f"the operator exited ({child.process.returncode}); see its log")
            time.sleep(0.2)
        raise BenchError("the operator did not take the Lease within 60 s")

    # the measured part (async: watches and API calls)

    async def create(self, http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
        """POST ``body``; the time the call returned. A reset after the request left is sent
        again, as an Argo CD sync re-sends what failed; a 409 then means the first landed."""
        started = time.monotonic()
        for attempt in range(MAX_RETRIES + 1):
            try:
                response = await http.post(path, json=body)
            except httpx.TransportError:
                if attempt == MAX_RETRIES:
                    raise
                RETRIES["create-resent"] += 1
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            break
        returned = time.monotonic()
        if body["kind"] == "EvaluationRun":
            self.api_create_s.append(returned - started)
        landed_before = response.status_code == 409 and attempt > 0  # the reset one created it
        if response.status_code >= 300 and not landed_before:
            raise BenchError(
                f"Creating {body['kind']} {body['metadata']['name']} failed: "
                f"HTTP {response.status_code}: {response.text[:500]}"
            )
        return returned

    async def wait_ready(self, http: httpx.AsyncClient, plural: str, count: int) -> None:
        assert self.operator is not None
        while True:
            self.operator.check_alive()
            response = await http.get(f"{GROUP_PATH}/namespaces/{NAMESPACE}/{plural}")
            response.raise_for_status()
            items = response.json()["items"]
            ready = [i for i in items if (i.get("status") or {}).get("phase") == "Ready"]
            if len(ready) == count:
                return
            if self.remaining() <= 0:
                phases = {
                    i["metadata"]["name"]: (i.get("status") or {}).get("message") for i in items
                }
                raise BenchTimeout(f"The {plural} did not become Ready: {phases}.")
            await asyncio.sleep(0.2)

    async def measure(self, url: str) -> None:
        args = self.args
        ns_path = f"{GROUP_PATH}/namespaces/{NAMESPACE}"
        limits = httpx.Limits(max_connections=50, max_keepalive_connections=50)
        transport = RetryingTransport(httpx.AsyncHTTPTransport(limits=limits))
        async with httpx.AsyncClient(
            base_url=url, timeout=30.0, transport=transport, headers={"User-Agent": "kyai-bench"}
        ) as http:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            await self.create(http, "/api/v1/namespaces", namespace)
            await self.create(http, f"{ns_path}/snapshots", snapshot_body())
            for index in range(args.workloads):
                await self.create(
                    http, f"{ns_path}/workloads", workload_body(index, self.double_url)
                )
            await self.wait_ready(http, "snapshots", 1)
            await self.wait_ready(http, "workloads", args.workloads)
            assert self.operator is not None
            await asyncio.sleep(1.0)  # let the operator settle after the set-up
            self.baseline = usage(self.operator.process.pid)
            own_start = resource.getrusage(resource.RUSAGE_SELF)

            watches = []
            for path, handler in (
                (f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", self.observed.on_job),
                (f"{ns_path}/evaluationruns", self.observed.on_run),
            ):
                listed = await http.get(path)
                listed.raise_for_status()
                version = listed.json()["metadata"]["resourceVersion"]
                watches.append(asyncio.create_task(watch(http, path, version, handler)))
            try:
                await self.run_all(http, watches)
            finally:
                for task in watches:
                    task.cancel()
                for task in watches:
                    with suppress(asyncio.CancelledError, Exception):
                        await task
                self.final_usage = usage(self.operator.process.pid)
                own_end = resource.getrusage(resource.RUSAGE_SELF)
                self.own_cpu_s = (own_end.ru_utime + own_end.ru_stime) - (
                    own_start.ru_utime + own_start.ru_stime
                )
                with suppress(httpx.HTTPError, KeyError):
                    jobs = await http.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
                    self.final_jobs = jobs.json()["items"]
                    pods = await http.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
                    self.final_pods = pods.json()["items"]

    async def run_all(self, http: httpx.AsyncClient, watches: list[asyncio.Task[None]]) -> None:
        args = self.args
        limit = asyncio.Semaphore(args.create_concurrency)
        bucket = TokenBucket(args.create_qps, args.create_burst)
        path = f"{GROUP_PATH}/namespaces/{NAMESPACE}/evaluationruns"

        async def create_run(index: int) -> None:
            async with limit:
                await bucket.take()
                body = run_body(index, args.workloads, self.double_url)
                self.observed.run(run_name(index)).created = await self.create(http, path, body)

        self.first_create = time.monotonic()
        print(f"creating {args.runs} EvaluationRuns ...", flush=True)
        await guarded(asyncio.gather(*(create_run(i) for i in range(args.runs))), watches)
        self.last_create = time.monotonic()
        last_report = last_sample = time.monotonic()
        while not all(times.done for times in self.observed.runs.values()):
            assert self.operator is not None and self.devcluster is not None
            self.operator.check_alive()
            self.devcluster.check_alive()
            if self.remaining() <= 0:
                raise BenchTimeout(
                    f"The bench's time budget of {args.timeout:.0f} s is used up with "
                    f"{sum(not t.done for t in self.observed.runs.values())} runs unfinished."
                )
            if time.monotonic() - last_sample >= 1:
                last_sample = time.monotonic()
                self.runnable.append(runnable_processes())
                probe = await http.get(f"{path}/{run_name(0)}")
                probe.raise_for_status()
                self.api_get_s.append(time.monotonic() - last_sample)
            if time.monotonic() - last_report >= 15:
                print(self.progress(), flush=True)
                last_report = time.monotonic()
            await guarded(asyncio.sleep(0.2), watches)
        print(self.progress(), flush=True)
        if args.after_burst:
            print(f"then {args.after_burst} runs one at a time ...", flush=True)
        for index in range(args.runs, args.runs + args.after_burst):
            body = run_body(index, args.workloads, self.double_url)
            name = f"late-{index:04d}"
            body["metadata"]["name"] = name
            times = self.late[name] = self.observed.run(name)
            times.created = await self.create(http, path, body)
            while not times.done:
                assert self.operator is not None
                self.operator.check_alive()
                if self.remaining() <= 0:
                    raise BenchTimeout(f"The time budget is used up waiting for {name}.")
                await guarded(asyncio.sleep(0.05), watches)

    def progress(self) -> str:
        phases = Counter(
            (t.phases[-1] if t.phases else "none") for t in self.observed.runs.values()
        )
        elapsed = time.monotonic() - (self.first_create or time.monotonic())
        shown = ", ".join(f"{phase} {count}" for phase, count in sorted(phases.items()))
        jobs = sum(self.observed.job_added.values())
        return f"  t={elapsed:6.1f}s  runs: {shown}; Jobs created: {jobs}"

    def execute(self) -> Result:
        timed_out: str | None = None
        self.speed_before = host_speed()
        try:
            self.double_url = self.start_double()
            url, kubeconfig = self.start_devcluster()
            self.kubectl(kubeconfig, "apply", "-f", str(ROOT / "crds"))
            self.kubectl(
                kubeconfig, "wait", "--for=condition=Established", "crd", "--all",
                "--timeout=30s",
            )  # fmt: skip
            self.start_operator(kubeconfig)
            # The loop and collector settings of the operator and the devcluster.
            tune_collector()
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self.measure(url))
        except BenchTimeout as exc:
            timed_out = str(exc)
        finally:
            self.speed_after = host_speed()
            devcluster_usage = None
            if self.devcluster is not None and self.devcluster.process.poll() is None:
                devcluster_usage = usage(self.devcluster.process.pid)
            for child in reversed(self.children):
                child.stop()
            self.save_logs()
        return self.result(timed_out, devcluster_usage)

    def save_logs(self) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        for child in self.children:
            if child.log.exists():
                shutil.copy(child.log, OUT / f"bench-operator-{self.stamp}-{child.log.name}")

    def result(self, timed_out: str | None, devcluster: Usage | None) -> Result:
        runs = {name: t for name, t in self.observed.runs.items() if name not in self.late}
        values = list(runs.values())
        late = list(self.late.values())
        latencies = [
            latency(
                "run created -> generation Job exists",
                ((t.created, t.generation_job) for t in values),
            ),
            latency(
                "generation Job Complete -> run Judging",
                ((t.generation_complete, t.judging) for t in values),
            ),
            latency(
                "judge Job Complete -> run Succeeded",
                ((t.judge_complete, t.succeeded) for t in values),
            ),
            latency(
                "(context) run Judging -> judge Job exists",
                ((t.judging, t.judge_job) for t in values),
            ),
            latency(
                "(context) generation Job: exists -> Complete",
                ((t.generation_job, t.generation_complete) for t in values),
            ),
            latency(
                "(context) judge Job: exists -> Complete",
                ((t.judge_job, t.judge_complete) for t in values),
            ),
            latency(
                "(context) run created -> Succeeded", ((t.created, t.succeeded) for t in values)
            ),
            latency("(context) API server: create a run", ((0.0, d) for d in self.api_create_s)),
            latency("(context) API server: GET a run (1/s)", ((0.0, d) for d in self.api_get_s)),
            latency(
                "after the burst: run created -> generation Job",
                ((t.created, t.generation_job) for t in late),
            ),
            latency(
                "after the burst: gen. Job Complete -> Judging",
                ((t.generation_complete, t.judging) for t in late),
            ),
            latency(
                "after the burst: judge Job Complete -> Succeeded",
                ((t.judge_complete, t.succeeded) for t in late),
            ),
            latency(
                "after the burst: run created -> Succeeded",
                ((t.created, t.succeeded) for t in late),
            ),
        ]
        finished = [t.succeeded or t.failed for t in values if t.done]
        wall = (
            max(f for f in finished if f is not None) - self.first_create
            if finished and self.first_create is not None and len(finished) == len(values)
            else None
        )
        failed = {name: t.message for name, t in self.observed.runs.items() if t.failed is not None}
        unfinished = {
            name: f"phases {' -> '.join(t.phases) or '(none)'}; {t.message}"
            for name, t in runs.items()
            if not t.done
        }
        for job, message in self.observed.job_failed.items():
            failed.setdefault(job, f"Job failed: {message}")

        operator: dict[str, float] = {}
        end, start = self.final_usage, self.baseline
        if end is not None and start is not None:
            operator = {
                "peak_rss_mib": end.peak_rss_mib,
                "rss_at_end_mib": end.rss_mib,
                "cpu_s": end.cpu_s,
                "cpu_during_runs_s": end.cpu_s - start.cpu_s,
            }
            if end.runqueue_wait_s is not None and start.runqueue_wait_s is not None:
                operator["runqueue_wait_during_runs_s"] = (
                    end.runqueue_wait_s - start.runqueue_wait_s
                )
        log_text = ""
        if self.operator is not None and self.operator.log.exists():
            log_text = self.operator.log.read_text(errors="replace")
        log_counts, log_messages = summarize_log(log_text)
        writes = sorted(t.status_writes for t in values)
        context: dict[str, Any] = {
            **self.throughput(values),
            "after_burst_succeeded": sum(t.succeeded is not None for t in late),
            "after_burst_runs": len(late),
            "jobs": len(self.final_jobs),
            "worker_pods": len(self.final_pods),
            "job_events": self.observed.job_events,
            "run_events": self.observed.run_events,
            "status_writes_p50": writes[len(writes) // 2] if writes else 0,
            "status_writes_max": writes[-1] if writes else 0,
            "runnable_processes_mean": statistics.fmean(self.runnable) if self.runnable else 0,
            "runnable_processes_max": max(self.runnable, default=0),
            "log_messages": log_messages,
            "handler_calls": handler_calls(log_text),
            **log_counts,
        }
        if self.args.access_log and self.devcluster is not None:
            text = self.devcluster.log.read_text(errors="replace")
            context["access"] = summarize_access(text, len(runs))
        context["host_speed_s"] = [self.speed_before, self.speed_after]
        context["bench_cpu_s"] = round(self.own_cpu_s, 2)
        context["client_retries"] = dict(RETRIES)
        if devcluster is not None:
            context["devcluster_cpu_s"] = devcluster.cpu_s
            context["workers_cpu_s"] = devcluster.children_cpu_s
            context["devcluster_peak_rss_mib"] = devcluster.peak_rss_mib
        return Result(
            runs=len(runs),
            workloads=self.args.workloads,
            rows=len(CAPITALS),
            cpus=os.cpu_count() or 0,
            latencies=latencies,
            wall_s=wall,
            succeeded=sum(t.succeeded is not None for t in values),
            failed=failed,
            unfinished=unfinished,
            operator=operator,
            context=context,
            anomalies=self.anomalies(),
            timed_out=timed_out,
            timelines=self.timelines(),
        )

    def throughput(self, values: list[RunTimes]) -> dict[str, float]:
        """The burst's rates: creates/s (the bench), generation Jobs/s, runs finished/s."""
        out: dict[str, float] = {}
        if self.first_create is None:
            return out

        def rate(times: list[float | None]) -> float | None:
            seen = [t for t in times if t is not None]
            assert self.first_create is not None
            span = max(seen, default=self.first_create) - self.first_create
            return len(seen) / span if seen and span > 0 else None

        for key, times in (
            ("creates_per_s", [t.created for t in values]),
            ("generation_jobs_per_s", [t.generation_job for t in values]),
            ("runs_finished_per_s", [t.succeeded or t.failed for t in values]),
        ):
            value = rate(times)
            if value is not None:
                out[key] = round(value, 2)
        return out

    def timelines(self) -> dict[str, dict[str, Any]]:
        """Each run's milestones in seconds after the first create call (for the JSON)."""
        origin = self.first_create or 0.0
        out: dict[str, dict[str, Any]] = {}
        for name, times in self.observed.runs.items():
            row: dict[str, Any] = {}
            for key, value in asdict(times).items():
                if isinstance(value, float) and key != "avg_score":
                    row[key] = round(value - origin, 4)
                else:
                    row[key] = value
            out[name] = row
        return out

    def anomalies(self) -> list[str]:
        found: list[str] = []
        observed = self.observed
        recreated = {name: n for name, n in observed.job_added.items() if n > 1}
        if recreated:
            found.append(f"Jobs created more than once: {recreated}")
        if observed.job_deleted:
            found.append(f"Jobs deleted during the bench: {dict(observed.job_deleted)}")
        per_run = Counter(
            (job["metadata"].get("labels") or {}).get(LABEL_RUN) for job in self.final_jobs
        )
        odd = {run: n for run, n in per_run.items() if n != 2}
        if odd:
            found.append(f"runs without exactly two Jobs at the end: {odd}")
        pods_per_job = Counter(
            ref["name"]
            for pod in self.final_pods
            for ref in pod["metadata"].get("ownerReferences") or []
            if ref.get("kind") == "Job"
        )
        retried = {job: n for job, n in pods_per_job.items() if n > 1}
        if retried:
            found.append(f"Jobs that needed more than one pod (retries): {retried}")
        for name, times in observed.runs.items():
            positions = [PHASE_ORDER.index(p) for p in times.phases if p in PHASE_ORDER]
            if positions != sorted(positions) or len(set(positions)) != len(positions):
                found.append(f"{name} went through phases {' -> '.join(times.phases)}")
            if times.succeeded is not None and times.avg_score != EXPECTED_SCORE:
                found.append(
                    f"{name} succeeded with avgScore {times.avg_score}, not {EXPECTED_SCORE}"
                )
        return found


class TokenBucket:
    """client-go's client-side rate limit (``rest.Config`` QPS and Burst): ``burst`` calls at
    once, then ``qps`` a second. ``qps`` 0: no limit."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self.tokens = float(self.burst)
        self.stamp = time.monotonic()

    async def take(self) -> None:
        if self.qps <= 0:
            return
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.qps)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.qps)


async def guarded(awaitable: Awaitable[Any], watches: Sequence[asyncio.Task[None]]) -> Any:
    """Await, but fail as soon as a watch has died (its timings would be missing)."""
    for task in watches:
        if task.done():
            error = task.exception()
            raise BenchError(f"A watch stopped: {error!r}.")
    return await awaitable


@contextmanager
def workdir(keep: bool, base: str | None) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kyai-bench-operator-", dir=base))
    try:
        yield path
    finally:
        if keep:
            print(f"work directory kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def default_workdir_base() -> str | None:
    """/dev/shm when it is a writable directory, else the system's temporary directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100, help="EvaluationRuns (default 100)")
    parser.add_argument("--workloads", type=int, default=10, help="Workloads (default 10)")
    parser.add_argument("--quick", action="store_true", help="10 runs over 2 Workloads")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="time budget, set-up included (600 s)"
    )
    parser.add_argument(
        "--create-concurrency", type=int, default=10, help="create calls in flight (10)"
    )
    parser.add_argument(
        "--create-qps",
        type=float,
        default=50.0,
        help="client-side rate limit of the creates, as client-go's QPS: Argo CD's default "
        "(ARGOCD_K8S_CLIENT_QPS) is 50 (default 50; 0: as fast as the API server takes them)",
    )
    parser.add_argument(
        "--create-burst",
        type=int,
        default=100,
        help="creates allowed at once before --create-qps applies, as client-go's Burst "
        "(Argo CD's default: twice its QPS; default 100)",
    )
    parser.add_argument(
        "--standin",
        action="store_true",
        help="workers replaced by an instant stand-in (bench/opbench/standin.py): the figures "
        "are the operator's, not those of 2 x N worker processes",
    )
    parser.add_argument(
        "--after-burst",
        type=int,
        default=20,
        help="runs created one at a time once the burst has finished (20; 0: none)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="diagnosis: run the operator and the devcluster under cProfile (about twice the "
        "CPU); the profiles go to bench/out/ (python -m pstats)",
    )
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        help="two operators with leader election on a Lease, as the chart runs them: the "
        "measured one holds it, the other stands by (compare with the figures without)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--workdir-base",
        default=default_workdir_base(),
        help="where the work directory (the devcluster's pod volumes and logs) goes: a tmpfs "
        "when there is one (a kubelet's file work is a node's, not the operator's; on this "
        "kind of VM a mkdir on disk costs 0.3 ms, on tmpfs 4 us) (default: %(default)s)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="diagnosis: the devcluster logs every request (costs CPU; counts in the JSON)",
    )
    parser.add_argument(
        "--control-plane-nice",
        type=int,
        default=0,
        help=(
            "diagnosis: scheduling niceness of the operator's and the devcluster's autogroups, "
            "e.g. -10 to give them CPU before the worker processes (negative needs root)"
        ),
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.workloads = 10, 2
    if args.runs < 1 or args.workloads < 1 or args.create_concurrency < 1:
        parser.error("--runs, --workloads and --create-concurrency must be at least 1")
    if args.create_qps < 0 or args.create_burst < 1:
        parser.error("--create-qps must be 0 or more and --create-burst at least 1")
    if args.after_burst < 0:
        parser.error("--after-burst must be 0 or more")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with workdir(args.keep, args.workdir_base) as path:
        bench = Bench(args, path, stamp)
        try:
            result = bench.execute()
        except BenchError as exc:
            print(f"bench-operator: {exc}", file=sys.stderr)
            return 1
    print()
    print(render(result))
    if result.context.get("log_messages"):
        print("operator log, most frequent ERROR/WARNING messages:")
        for message in result.context["log_messages"]:
            print(f"  {message}")
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"bench-operator-{stamp}.json"
    document = {"args": vars(args), **asdict(result)}
    target.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nfigures: {target.relative_to(ROOT)}; logs: bench/out/bench-operator-{stamp}-*.log")
    ok = (
        not result.timed_out
        and result.succeeded == result.runs
        and result.context.get("after_burst_succeeded") == args.after_burst
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
