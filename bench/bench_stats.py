"""Timings of issue 21's statistics on large runs, and the reference figures of the README.

    .venv/bin/python bench/bench_stats.py [--rows 50000] [--runs 5]

Prints, in seconds: one run's interval, one paired comparison and the ranks of ``--runs``
runs on ``--rows`` questions (kyai.stats alone, 0/1 and continuous scores), then
``kyai compare`` and ``kyai leaderboard --from`` on run directories of that size written to a
temporary folder (reading summary.json and judgements.jsonl, and building the command line's
parser, included). Then the 95 % interval
at n = 100 for scores 0.5, 0.7 and 0.9. The tests (tests/unit/stats, tests/unit/compare)
check the figures against scipy; these are the times to compare between changes, on a quiet
machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kyai.cli import main
from kyai.stats import compare, ranks, score_interval


def timed(label: str, call: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = call()
    print(f"  {label:<48} {time.perf_counter() - started:8.3f} s")
    return result


def vectors(rows: int, runs: int, *, binary: bool) -> list[list[float]]:
    rng = np.random.default_rng(21)
    truth = rng.uniform(size=rows)
    out = []
    for run in range(runs):
        noisy = np.clip(truth + 0.01 * run + rng.normal(0, 0.2, rows), 0, 1)
        out.append(list((noisy > 0.5).astype(float) if binary else np.round(noisy, 3)))
    return out


def write_run(root: Path, name: str, scores: list[float]) -> Path:
    folder = root / name
    folder.mkdir()
    summary = {
        "comparison_key": "bench", "dataset": "bench", "dataset_sha256": "bench",
        "candidate_model": name, "count": len(scores), "scores": scores,
        "avg_score": sum(scores) / len(scores), "avg_latency_ms": 100.0,
    }  # fmt: skip
    (folder / "summary.json").write_text(json.dumps(summary))
    with (folder / "judgements.jsonl").open("w") as log:
        for index, score in enumerate(scores):
            record = {"row_index": index, "row_id": f"row-{index}", "score": score,
                      "reasoning": "The response matches the ground truth. " * 8}  # fmt: skip
            log.write(json.dumps(record) + "\n")
    return folder


def quiet_main(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(argv)


def bench_scores(data: list[list[float]]) -> None:
    runs = len(data)
    timed("score_interval (one run)", lambda: score_interval(data[0]))
    timed("compare (two runs)", lambda: compare(data[0], data[1]))
    timed(f"ranks ({runs} runs, {runs * (runs - 1) // 2} pairs)", lambda: ranks(data))


def bench(rows: int, runs: int) -> None:
    timed(
        "import scipy.stats (paid once, on first use)",
        lambda: importlib.import_module("scipy.stats"),
    )
    for binary in (True, False):
        kind = "0/1 scores" if binary else "continuous scores"
        print(f"kyai.stats, {rows:,} questions, {kind}:")
        bench_scores(vectors(rows, runs, binary=binary))
    data = vectors(rows, runs, binary=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dirs = [write_run(root, f"run-{i}", scores) for i, scores in enumerate(data)]
        print(f"the commands on run directories of {rows:,} questions (files read included):")
        timed("kyai compare run-0 run-1", lambda: quiet_main(["compare", *map(str, dirs[:2])]))
        timed(
            f"kyai leaderboard --from ({runs} runs)",
            lambda: quiet_main(["leaderboard", "--from", str(root)]),
        )
    print("95 % interval at n = 100 (Wilson):")
    for k in (50, 70, 90):
        interval = score_interval([1.0] * k + [0.0] * (100 - k))
        print(
            f"  score {k / 100:.1f}: {interval.low:.4f} to {interval.high:.4f}, "
            f"width {interval.high - interval.low:.4f}"
        )


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    bench(args.rows, args.runs)


if __name__ == "__main__":
    main_()
