"""Whole-process latency of ``kyai generate``: the command, not only its phase.

A ``kyai generate`` subprocess asks 100 rows at concurrency 16 of the LLM double answering
each in 200 ms (in this process, on loopback). The ideal is the waves alone: ceil(100 / 16)
= 7 waves of 200 ms = 1.4 s. Printed per repeat and as the median, from the double's own
record of when requests arrived and ended (``time.monotonic()``, one clock for both
processes):

- ``start->first``: the process started → its first chat request arrived (interpreter,
  imports, argument parsing, the dataset, the ``/v1/models`` probe, the run directory);
- ``phase``: the first request arrived → the last answer was sent;
- ``last->exit``: the last answer → the process ended (the log rewritten in row order,
  ``run.json``, the interpreter's exit);
- ``total`` and its ratio to the ideal (the target: at most 1.3).

    .venv/bin/python bench/bench_process.py [--rows 100] [--concurrency 16] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kyai_testing import LLMDouble, ModelSpec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    ideal = math.ceil(args.rows / args.concurrency) * args.latency
    print(
        f"kyai generate, whole process: {args.rows} rows at concurrency {args.concurrency}, "
        f"{args.latency * 1000:.0f} ms an answer (ideal {ideal:.2f} s)"
    )
    with tempfile.TemporaryDirectory() as work:
        rows = Path(work) / "rows.jsonl"
        rows.write_text(
            "".join(
                json.dumps({"instruction": f"Q{i}: say hi", "ground_truth_response": "hi"}) + "\n"
                for i in range(args.rows)
            ),
            encoding="utf-8",
        )
        out = Path(work) / "out"
        double = LLMDouble(models=[ModelSpec("candidate")], latency_s=args.latency)
        totals: list[float] = []
        with double.start_in_thread() as running:
            for repeat in range(args.repeat + 1):  # the first run warms the disk's caches
                shutil.rmtree(out, ignore_errors=True)
                running.requests.clear()
                started = time.monotonic()
                subprocess.run(
                    [
                        *(sys.executable, "-m", "kyai.cli", "generate"),
                        *("--endpoint", running.url, "--model", "candidate"),
                        *("--dataset", str(rows), "--generation-prompt", "Answer."),
                        *("--output", str(out), "--concurrency", str(args.concurrency)),
                        "--quiet",
                    ],
                    check=True,
                    capture_output=True,
                )
                ended = time.monotonic()
                first = min(request.started for request in running.requests)
                last = max(request.finished or ended for request in running.requests)
                if repeat == 0:
                    continue
                totals.append(ended - started)
                print(
                    f"  total {ended - started:.3f} s ({(ended - started) / ideal:.2f}x)  "
                    f"start->first {first - started:.3f}  phase {last - first:.3f}  "
                    f"last->exit {ended - last:.3f}"
                )
    median = statistics.median(totals)
    print(f"  median total {median:.3f} s = {median / ideal:.2f}x the ideal (target <= 1.30x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
