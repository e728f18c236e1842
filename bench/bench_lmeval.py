"""Wall time of a 100-question gsm8k run: ``kyai lm-eval`` (the real lm_eval CLI, offline on a
local file in gsm8k's native format) beside ``kyai run`` on the same 100 questions, both
against the OpenAI-compatible double (0.1 s per answer, 8 requests in flight).

    .venv/bin/python bench/bench_lmeval.py [--rows 100] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kyai_testing.llm_double import ChatRequest, LLMDouble, ModelSpec, Rule

GRADER = {
    "grader": {
        "type": "python",
        "metric_id": "exact_match",
        "source": (
            "import re\n"
            "def grade(sample, item):\n"
            "    found = re.findall(r'#### (-?[0-9]+)', sample['output_text'])\n"
            "    want = item['ground_truth_response'].split('#### ')[-1].strip()\n"
            "    return 1.0 if found and found[-1] == want else 0.0\n"
        ),
    }
}


def answer(request: ChatRequest) -> str:
    text = request.messages[-1]["content"]
    a, b = (int(x) for x in re.findall(r"(\d+) plus (\d+)", text)[0])
    # Every fifth answer is wrong: both tools must read 0.8.
    return f"{a} + {b} = {a + b}.\n#### {a + b + (1 if (a % 5 == 0) else 0)}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kyai-bench-lmeval-"))
    rows = [(i, 3 * i + 1) for i in range(args.rows)]
    native = work / "gsm8k_test.jsonl"
    native.write_text(
        "".join(
            json.dumps({"question": f"What is {a} plus {b}?", "answer": f"{a + b}\n#### {a + b}"})
            + "\n"
            for a, b in rows
        )
    )
    custom = work / "rows.jsonl"
    custom.write_text(
        "".join(
            json.dumps(
                {
                    "instruction": f"Question: What is {a} plus {b}?\nAnswer:",
                    "ground_truth_response": f"{a + b}\n#### {a + b}",
                    "external_row_id": str(a),
                }
            )
            + "\n"
            for a, b in rows
        )
    )
    grader = work / "grader.json"
    grader.write_text(json.dumps(GRADER))
    double = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096)],
        rules=[Rule(content=answer)],
        latency_s=0.1,
    )
    kyai = [sys.executable, "-m", "kyai.cli"]
    with double.start_in_thread() as running:
        t0 = time.monotonic()
        lm = subprocess.run(
            [*kyai, "lm-eval", "--endpoint", running.base_url, "--model", "cand",
             "--task", "gsm8k", "--data-file", f"test={native}", "--num-fewshot", "0",
             "--concurrency", str(args.concurrency), "--output", str(work / "lm"), "--quiet"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        lm_wall = time.monotonic() - t0
        t0 = time.monotonic()
        ky = subprocess.run(
            [*kyai, "run", "--endpoint", running.base_url, "--model", "cand",
             "--dataset", str(custom), "--grader", str(grader),
             "--generation-prompt", "Solve the problem; end with '#### <number>'.",
             "--concurrency", str(args.concurrency), "--output", str(work / "kyai"), "--quiet"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        kyai_wall = time.monotonic() - t0
    if lm.returncode != 0 or ky.returncode != 0:
        print(lm.stderr[-2000:], ky.stderr[-2000:], file=sys.stderr)
        return 1
    lm_summary = json.loads((work / "lm" / "summary.json").read_text())
    ky_summary = json.loads((work / "kyai" / "summary.json").read_text())
    print(f"rows {args.rows}, concurrency {args.concurrency}, double latency 0.1 s")
    print(
        f"kyai lm-eval: {lm_wall:6.1f} s  "
        f"flexible-extract {lm_summary['metrics']['gsm8k/exact_match,flexible-extract']:.3f}  "
        f"strict-match {lm_summary['metrics']['gsm8k/exact_match,strict-match']:.3f}"
    )
    print(f"kyai run:     {kyai_wall:6.1f} s  avg_score {ky_summary['avg_score']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
