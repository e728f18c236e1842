"""The EvaluationSweep's pure logic on a whole sweep: what a controller pays per reconcile.

    .venv/bin/python bench/bench_sweeps.py [--workloads 10] [--snapshots 3] [--parallelism 4]
        [--questions 100]

Runs a sweep of endpoint Workloads × Snapshots to the end with instant workers, as the
controller would: each round expands the spec, plans, "creates" the runs, finishes every
unfinished run with 0/1 scores (random, one quality per Workload), and builds the status (the
ranked table with intervals, ranks, a baseline comparison and best). Prints the rounds, the
wall time, the slowest and the median round, the status' size, and the process' peak RSS.
No Kubernetes API is involved: the operator benchmark (bench/bench_operator.py) measures the
controller with the devcluster once the kind is wired in.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import statistics
import time
from typing import Any

from kyai.api import status_patch
from kyai.api.evaluationsweep import EvaluationSweepSpec
from kyai.sweeps import expand, plan, sweep_status

SWEEP = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "EvaluationSweep",
    "metadata": {"name": "bench", "namespace": "bench", "uid": "bench-uid"},
}


def obj(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "bench", "labels": {}}, "spec": spec}


def run_sweep(workloads: int, snapshots: int, parallelism: int, questions: int) -> None:
    rng = random.Random(23)
    names = [f"w{index:03}" for index in range(workloads)]
    snaps = [f"s{index:02}" for index in range(snapshots)]
    quality = {name: rng.uniform(0.4, 0.9) for name in names}
    spec = EvaluationSweepSpec.model_validate(
        {
            "workloads": [{"name": n} for n in names],
            "snapshots": [{"name": s} for s in snaps],
            "parallelism": parallelism,
            "baseline": {"workload": names[0]},
            "nonInferiorityMargin": 0.05,
        }
    )
    listed = {
        "workloads": [obj(n, model=n, endpoint={"url": f"http://{n}/v1"}) for n in names],
        "engine_args_sets": [],
        "snapshots": [obj(s) for s in snaps],
    }
    runs: dict[str, dict[str, Any]] = {}
    rounds: list[float] = []
    started = time.perf_counter()
    while True:
        tick = time.perf_counter()
        expansion = expand("bench", spec, **listed)
        decided = plan(SWEEP, spec, expansion, runs=list(runs.values()), workloads=[])
        for manifest in decided.create_runs:
            runs[manifest["metadata"]["name"]] = copy.deepcopy(manifest)
        report = sweep_status(SWEEP, spec, expansion, list(runs.values()))
        rounds.append(time.perf_counter() - tick)
        if report.status.phase in ("Succeeded", "Failed"):
            break
        for run in runs.values():
            if "status" not in run:
                workload = run["metadata"]["annotations"]["kyai.io/sweep-workload"]
                scores = [float(rng.random() < quality[workload]) for _ in range(questions)]
                run["status"] = {
                    "phase": "Succeeded",
                    "avgScore": sum(scores) / questions,
                    "comparisonKey": run["spec"]["snapshotRef"]["name"],
                    "scores": scores,
                    "avgLatencyMs": 100.0,
                }
    wall = time.perf_counter() - started
    size = len(json.dumps(status_patch(report.status)))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{workloads} workloads × {snapshots} snapshots = {len(expansion.cells)} cells, "
        f"parallelism {parallelism}, {questions} questions"
    )
    print(f"  phase {report.status.phase}, best {report.status.best_names}")
    print(f"  rounds {len(rounds)}, wall {wall:.3f} s")
    print(f"  round: median {statistics.median(rounds):.4f} s, slowest {max(rounds):.4f} s")
    print(f"  status patch {size / 1024:.1f} KiB; table ConfigMap: {report.config_map is not None}")
    print(f"  peak RSS {rss_mb:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10)
    parser.add_argument("--snapshots", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--questions", type=int, default=100)
    args = parser.parse_args()
    run_sweep(args.workloads, args.snapshots, args.parallelism, args.questions)


if __name__ == "__main__":
    main()
