"""Benchmark of the EvaluationSweep controller: a 30-cell sweep to Succeeded in the devcluster.

    .venv/bin/python bench/bench_sweep_operator.py [--workloads 10] [--snapshots 3]
        [--parallelism 10] [--timeout 600] [--keep]

``kyai devcluster`` with ``kyai operator`` as a subprocess (as ``bench/bench_operator.py``
runs them), ``--workloads`` endpoint Workloads (served by the LLM double, another
subprocess, so that they become Ready) and ``--snapshots`` 20-row Snapshots, then one
EvaluationSweep of every Workload × every Snapshot. The worker pods are an instant stand-in
the devcluster runs in its own event loop (``bench/sweep_standin.py``: no interpreter per
pod): it reports, through the run's status with the pod's own token, a score per Workload
(each Workload two questions worse than the one before) and one comparison key per Snapshot,
so the table's paired tests and tie-aware ranks are computed for real. What is measured is
the operator: its sweep reconciles, the runs' engine, the API server and the simulated
kubelet.

Printed: the time from the sweep's create to its first run, and to ``phase: Succeeded``;
the operator's peak RSS (``VmHWM``), RSS at the end and CPU seconds during the sweep; how
many reconciles of the sweep and of its runs it did (its ``/metrics``), how many status
writes the sweep got, the most runs unfinished at once (never above ``--parallelism``), the
runs made per cell (exactly one); and a check of the table: its ranks equal
:func:`kyai.stats.ranks` of the runs' scores, Snapshot by Snapshot. Figures go to
``bench/out/`` as JSON, next to the logs of the operator, the devcluster and the double.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from kyai import stats
from kyai._loop import loop_factory, tune_collector
from opbench.objects import GROUP_PATH, JUDGE_MODEL, OUT, ROOT, WORKER_IMAGE
from opbench.observe import watch
from opbench.procs import (
    BenchError,
    BenchTimeout,
    Child,
    Usage,
    host_speed,
    spawn,
    usage,
    wait_until,
)
from sweep_standin import QUESTIONS

BENCH_DIR = Path(__file__).resolve().parent
NAMESPACE = "bench-sweep"
SWEEP = "matrix"
STANDIN = "sweep_standin:run"
FINISHED = ("Succeeded", "Failed")


@dataclass
class Observed:
    """What the watches saw, stamped as received."""

    sweep_created: float | None = None
    first_run: float | None = None
    finished: float | None = None
    phase: str | None = None
    sweep_events: int = 0
    run_events: int = 0
    runs: dict[str, str | None] = field(default_factory=dict)
    uids: dict[str, set[str]] = field(default_factory=dict)
    most_unfinished: int = 0
    last_status: dict[str, Any] = field(default_factory=dict)

    def on_run(self, kind: str, obj: dict[str, Any], received: float) -> None:
        self.run_events += 1
        name = str(obj["metadata"]["name"])
        self.uids.setdefault(name, set()).add(str(obj["metadata"]["uid"]))
        if self.first_run is None:
            self.first_run = received
        if kind == "DELETED":
            self.runs.pop(name, None)
        else:
            self.runs[name] = (obj.get("status") or {}).get("phase")
        unfinished = sum(phase not in FINISHED for phase in self.runs.values())
        self.most_unfinished = max(self.most_unfinished, unfinished)

    def on_sweep(self, kind: str, obj: dict[str, Any], received: float) -> None:
        self.sweep_events += 1
        status = obj.get("status") or {}
        self.last_status = status
        self.phase = status.get("phase")
        if self.phase in FINISHED and self.finished is None:
            self.finished = received


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rows(snapshot: int) -> list[dict[str, str]]:
    return [
        {"instruction": f"Snapshot {snapshot}, question {i}: 2 + {i}?",
         "groundTruthResponse": str(2 + i), "externalRowId": f"q{i}"}
        for i in range(QUESTIONS)
    ]  # fmt: skip


def snapshot_body(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": f"snap-{index}", "namespace": NAMESPACE},
        "spec": {
            "source": {"rows": rows(index)},
            "prompts": {"generation": "Answer with a number.", "judge": "Score 1 if equal."},
        },
    }


def workload_body(index: int, double_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": f"wl-{index}", "namespace": NAMESPACE},
        "spec": {"framework": "vllm", "model": f"cand-{index}",
                 "endpoint": {"url": f"{double_url}/v1"}},
    }  # fmt: skip


def sweep_body(args: argparse.Namespace, double_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationSweep",
        "metadata": {"name": SWEEP, "namespace": NAMESPACE},
        "spec": {
            "workloads": [{"name": f"wl-{i}"} for i in range(args.workloads)],
            "snapshots": [{"name": f"snap-{j}"} for j in range(args.snapshots)],
            "run": {
                "judge": {"type": "llm",
                          "llm": {"endpoint": f"{double_url}/v1", "model": JUDGE_MODEL}},
                "generation": {"concurrency": 4},
            },
            "parallelism": args.parallelism,
        },
    }  # fmt: skip


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path, stamp: str) -> None:
        self.args = args
        self.workdir = workdir
        self.stamp = stamp
        self.deadline = time.monotonic() + args.timeout
        self.children: list[Child] = []
        self.operator: Child | None = None
        self.metrics_port = free_port()
        self.observed = Observed()
        self.baseline: Usage | None = None
        self.final: Usage | None = None
        self.metrics_text = ""
        self.runs: list[dict[str, Any]] = []

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    # -- set-up ------------------------------------------------------------------------------

    def start_double(self) -> str:
        ready = self.workdir / "double.url"
        models = [arg for i in range(self.args.workloads) for arg in ("--model", f"cand-{i}")]
        child = spawn(
            "LLM double",
            [sys.executable, "-m", "kyai_testing.llm_double", "--port", "0", *models,
             "--judge-model", JUDGE_MODEL, "--max-model-len", "4096",
             "--ready-file", str(ready)],
            self.workdir / "double.log",
            dict(os.environ),
        )  # fmt: skip
        self.children.append(child)
        wait_until("the LLM double", lambda: ready.exists() and ready.read_text().strip() != "",
                   self.deadline, children=[child])  # fmt: skip
        return ready.read_text().strip()

    def start_devcluster(self) -> tuple[str, Path]:
        kubeconfig = self.workdir / "kubeconfig"
        path = os.pathsep.join([str(BENCH_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
        child = spawn(
            "devcluster",
            [sys.executable, "-m", "kyai.cli", "devcluster", "--port", "0",
             "--kubeconfig", str(kubeconfig), "--workdir", str(self.workdir / "cluster"),
             "--local-image", WORKER_IMAGE, "--entrypoint-function", STANDIN],
            self.workdir / "devcluster.log",
            {**os.environ, "PYTHONPATH": path},
        )  # fmt: skip
        self.children.append(child)
        pattern = re.compile(r"serving at (http://\S+)")

        def serving() -> bool:
            return pattern.search(child.log.read_text(errors="replace")) is not None

        wait_until("the devcluster", serving, self.deadline, children=[child])
        found = pattern.search(child.log.read_text(errors="replace"))
        assert found is not None
        return found.group(1), kubeconfig

    def kubectl(self, kubeconfig: Path, *args: str) -> None:
        completed = subprocess.run(
            ["kubectl", *args], capture_output=True, text=True, check=False,
            timeout=max(5.0, min(60.0, self.remaining())),
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        )  # fmt: skip
        if completed.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args)} failed: {completed.stderr.strip()}")

    def start_operator(self, kubeconfig: Path) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "KYAI_WORKER_IMAGE": WORKER_IMAGE,
            "KYAI_METRICS_PORT": str(self.metrics_port),
            "KYAI_HEALTH_PORT": "0",
        }
        self.operator = spawn(
            "operator",
            [sys.executable, "-m", "kyai.cli", "operator", "--all-namespaces"],
            self.workdir / "operator.log",
            env,
        )
        self.children.append(self.operator)

    # -- the measured part -------------------------------------------------------------------

    async def create(self, http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> float:
        response = await http.post(path, json=body)
        if response.status_code >= 300:
            raise BenchError(
                f"Creating {body['kind']} {body['metadata']['name']} failed: "
                f"HTTP {response.status_code}: {response.text[:500]}"
            )
        return time.monotonic()

    async def wait_ready(self, http: httpx.AsyncClient, plural: str, count: int) -> None:
        assert self.operator is not None
        while True:
            self.operator.check_alive()
            listed = await http.get(f"{GROUP_PATH}/namespaces/{NAMESPACE}/{plural}")
            listed.raise_for_status()
            items = listed.json()["items"]
            if sum((i.get("status") or {}).get("phase") == "Ready" for i in items) == count:
                return
            if self.remaining() <= 0:
                raise BenchTimeout(f"The {plural} did not become Ready.")
            await asyncio.sleep(0.2)

    async def set_up(self, http: httpx.AsyncClient, double_url: str) -> None:
        path = f"{GROUP_PATH}/namespaces/{NAMESPACE}"
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        await self.create(http, "/api/v1/namespaces", namespace)
        for j in range(self.args.snapshots):
            await self.create(http, f"{path}/snapshots", snapshot_body(j))
        for i in range(self.args.workloads):
            await self.create(http, f"{path}/workloads", workload_body(i, double_url))
        await self.wait_ready(http, "snapshots", self.args.snapshots)
        await self.wait_ready(http, "workloads", self.args.workloads)

    async def measure(self, url: str, double_url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30.0,
                                     headers={"User-Agent": "kyai-bench"}) as http:  # fmt: skip
            await self.set_up(http, double_url)
            assert self.operator is not None
            await asyncio.sleep(1.0)  # the operator settles after the set-up
            self.baseline = usage(self.operator.process.pid)
            path = f"{GROUP_PATH}/namespaces/{NAMESPACE}"
            watches = []
            for plural, handler in (("evaluationruns", self.observed.on_run),
                                    ("evaluationsweeps", self.observed.on_sweep)):  # fmt: skip
                listed = await http.get(f"{path}/{plural}")
                listed.raise_for_status()
                version = listed.json()["metadata"]["resourceVersion"]
                watches.append(asyncio.create_task(watch(http, f"{path}/{plural}", version,
                                                         handler)))  # fmt: skip
            try:
                print(f"creating the sweep ({self.cells()} cells) ...", flush=True)
                body = sweep_body(self.args, double_url)
                self.observed.sweep_created = await self.create(http, f"{path}/evaluationsweeps",
                                                                body)  # fmt: skip
                await self.wait_finished(watches)
            finally:
                self.final = usage(self.operator.process.pid)
                for task in watches:
                    task.cancel()
                for task in watches:
                    with suppress(asyncio.CancelledError, Exception):
                        await task
            listed = await http.get(f"{path}/evaluationruns")
            self.runs = listed.json()["items"]
            with suppress(httpx.HTTPError):
                self.metrics_text = (
                    await http.get(f"http://127.0.0.1:{self.metrics_port}/metrics")
                ).text

    def cells(self) -> int:
        return self.args.workloads * self.args.snapshots

    async def wait_finished(self, watches: list[asyncio.Task[None]]) -> None:
        last_report = time.monotonic()
        while self.observed.finished is None:
            assert self.operator is not None
            self.operator.check_alive()
            for task in watches:
                if task.done():
                    task.result()  # a failed watch says why
            if self.remaining() <= 0:
                raise BenchTimeout(
                    f"The time budget is used up; the sweep is {self.observed.phase}."
                )
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                cells = self.observed.last_status.get("cells") or {}
                print(f"  {self.observed.phase}: {cells}", flush=True)
            await asyncio.sleep(0.05)

    def execute(self) -> dict[str, Any]:
        speed_before = host_speed()
        timed_out = None
        try:
            double_url = self.start_double()
            url, kubeconfig = self.start_devcluster()
            self.kubectl(kubeconfig, "apply", "-f", str(ROOT / "crds"))
            self.kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all",
                         "--timeout=30s")  # fmt: skip
            self.start_operator(kubeconfig)
            tune_collector()
            with asyncio.Runner(loop_factory=loop_factory()) as runner:
                runner.run(self.measure(url, double_url))
        except BenchTimeout as exc:
            timed_out = str(exc)
        finally:
            for child in reversed(self.children):
                child.stop()
            self.save_logs()
        return self.result(timed_out, [speed_before, host_speed()])

    def save_logs(self) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        for child in self.children:
            if child.log.exists():
                shutil.copy(child.log, OUT / f"bench-sweep-operator-{self.stamp}-{child.log.name}")

    # -- figures -----------------------------------------------------------------------------

    def result(self, timed_out: str | None, speed: list[float]) -> dict[str, Any]:
        seen = self.observed
        created = seen.sweep_created
        operator: dict[str, float] = {}
        if self.final is not None and self.baseline is not None:
            operator = {
                "peak_rss_mib": round(self.final.peak_rss_mib, 1),
                "rss_at_end_mib": round(self.final.rss_mib, 1),
                "cpu_during_sweep_s": round(self.final.cpu_s - self.baseline.cpu_s, 2),
                "rss_before_sweep_mib": round(self.baseline.rss_mib, 1),
            }
        return {
            "cells": self.cells(),
            "parallelism": self.args.parallelism,
            "phase": seen.phase,
            "timed_out": timed_out,
            "to_first_run_s": None if created is None or seen.first_run is None
            else round(seen.first_run - created, 3),
            "to_finished_s": None if created is None or seen.finished is None
            else round(seen.finished - created, 2),
            "operator": operator,
            "reconciles": reconciles(self.metrics_text),
            "sweep_status_events": seen.sweep_events,
            "run_events": seen.run_events,
            "runs_made": len(seen.uids),
            "runs_made_twice": sorted(name for name, uids in seen.uids.items() if len(uids) > 1),
            "most_unfinished_runs": seen.most_unfinished,
            "cells_status": seen.last_status.get("cells"),
            "best": seen.last_status.get("bestNames"),
            "ranks_check": ranks_check(seen.last_status, self.runs),
            "host_speed_s": speed,
        }  # fmt: skip


def reconciles(metrics: str) -> dict[str, float]:
    """Reconciles by kind, from the operator's ``kyai_operator_reconcile_total``."""
    found: Counter[str] = Counter()
    for line in metrics.splitlines():
        match = re.match(
            r'kyai_operator_reconcile_total\{kind="(\w+)",result="(\w+)"\} (\S+)', line
        )
        if match:
            found[f"{match.group(1)}/{match.group(2)}"] += float(match.group(3))
    return dict(found)


def ranks_check(status: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """Whether the table's ranks are kyai.stats.ranks of the runs' scores, per Snapshot."""
    by_run = {r["metadata"]["name"]: (r.get("status") or {}).get("scores") for r in runs}
    table = status.get("table") or []
    if len(table) < (status.get("tableRows") or 0):
        return "skipped: the table is in a ConfigMap"
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in table:
        groups.setdefault(row["snapshot"], []).append(row)
    for snapshot, members in groups.items():
        vectors = [by_run.get(row.get("run")) for row in members]
        if any(vector is None for vector in vectors):
            return f"failed: a run of {snapshot} has no scores"
        expected = stats.ranks([list(vector or []) for vector in vectors])
        if [row.get("rank") for row in members] != expected:
            return f"failed on {snapshot}: {[row.get('rank') for row in members]} != {expected}"
    return f"ok ({len(groups)} Snapshots)"


def render(result: dict[str, Any]) -> str:
    operator = result["operator"]
    lines = [
        f"EvaluationSweep of {result['cells']} cells, parallelism {result['parallelism']}: "
        f"{result['phase']}"
        + (f" (TIMED OUT: {result['timed_out']})" if result["timed_out"] else ""),
        f"  sweep created -> first run created   {result['to_first_run_s']} s",
        f"  sweep created -> {result['phase']:<19} {result['to_finished_s']} s",
        f"  operator peak RSS {operator.get('peak_rss_mib')} MiB (at the end "
        f"{operator.get('rss_at_end_mib')} MiB, before the sweep "
        f"{operator.get('rss_before_sweep_mib')} MiB); CPU during the sweep "
        f"{operator.get('cpu_during_sweep_s')} s",
        f"  reconciles: {result['reconciles']}",
        f"  sweep status events {result['sweep_status_events']}, run events {result['run_events']}",
        f"  runs made {result['runs_made']} (twice: {result['runs_made_twice'] or 'none'}); "
        f"most unfinished at once {result['most_unfinished_runs']}",
        f"  cells {result['cells_status']}; best: {result['best']}",
        f"  ranks: {result['ranks_check']}",
        f"  host speed (s for 10M additions, before/after): {result['host_speed_s']}",
    ]
    return "\n".join(lines)


@contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="kyai-bench-sweep-", dir=base))
    try:
        yield path
    finally:
        if keep:
            print(f"work directory kept: {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workloads", type=int, default=10, help="endpoint Workloads (10)")
    parser.add_argument("--snapshots", type=int, default=3, help="Snapshots (3)")
    parser.add_argument("--parallelism", type=int, default=10,
                        help="the sweep's spec.parallelism (10)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="time budget, set-up included (600 s)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if min(args.workloads, args.snapshots, args.parallelism) < 1:
        parser.error("--workloads, --snapshots and --parallelism must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with workdir(args.keep) as path:
        try:
            result = Bench(args, path, stamp).execute()
        except BenchError as exc:
            print(f"bench-sweep-operator: {exc}", file=sys.stderr)
            return 1
    print()
    print(render(result))
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"bench-sweep-operator-{stamp}.json"
    target.write_text(json.dumps({"args": vars(args), **result}, indent=2) + "\n")
    print(f"\nfigures: {target.relative_to(ROOT)}")
    ok = (
        result["phase"] == "Succeeded"
        and result["runs_made"] == result["cells"]
        and not result["runs_made_twice"]
        and result["most_unfinished_runs"] <= args.parallelism
        and str(result["ranks_check"]).startswith("ok")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
