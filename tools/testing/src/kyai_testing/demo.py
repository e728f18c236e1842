"""``make demo-cli``: a whole KYAI run on this machine, against the bundled LLM double.

Starts the OpenAI-compatible double with a scripted candidate (``demo-candidate``: mostly
right, one wrong answer, one answer with a ``<think>`` block) and a scripted judge
(``demo-judge``, the substring judge), writes a small custom dataset, runs ``kyai run``
in-process and prints the scores and where the files are.

    python -m kyai_testing.demo [--output DIR] [--latency SECONDS]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kyai_testing._double import LLMDouble
from kyai_testing._judge import substring_judge
from kyai_testing._model import ModelSpec, Rule

CANDIDATE = "demo-candidate"
JUDGE = "demo-judge"

GENERATION_PROMPT = (
    "You are a helpful assistant. Answer the question correctly and concisely, "
    "stating the final answer plainly."
)

JUDGE_PROMPT = (
    "You are an impartial grader. Compare the candidate response with the ground truth "
    "answer to the instruction. Score 1 when the response gives the ground truth answer and "
    "0 when it does not. Reply with only a JSON object: "
    '{"score": <number between 0 and 1>, "reasoning": "<one sentence>"}.'
)


@dataclass(frozen=True)
class DemoRow:
    """One demo question, its expected answer, and what the scripted candidate replies."""

    row_id: str
    instruction: str
    ground_truth: str
    answer: str


DEMO_ROWS: tuple[DemoRow, ...] = (
    DemoRow(
        "capital-france",
        "What is the capital of France?",
        "Paris",
        "The capital of France is Paris.",
    ),
    DemoRow("times-7-8", "What is 7 multiplied by 8?", "56", "7 × 8 = 56."),
    DemoRow(
        "capital-japan",
        "What is the capital of Japan?",
        "Tokyo",
        "The capital of Japan is Kyoto.",  # wrong on purpose
    ),
    DemoRow(
        "sum-15-27",
        "What is 15 plus 27?",
        "42",
        "<think>15 + 27: 15 + 20 = 35, and 35 + 7 = 42.</think>15 plus 27 is 42.",
    ),
    DemoRow(
        "largest-planet",
        "Which planet is the largest in the Solar System?",
        "Jupiter",
        "Jupiter is the largest planet in the Solar System.",
    ),
    DemoRow(
        "capital-canada",
        "What is the capital of Canada?",
        "Ottawa",
        "Ottawa is the capital of Canada.",
    ),
)


def demo_double(*, latency_s: float = 0.05) -> LLMDouble:
    """The double with the scripted demo candidate and judge."""
    rules = [Rule(model=JUDGE, content=substring_judge)]
    rules += [Rule(match=row.instruction, model=CANDIDATE, content=row.answer) for row in DEMO_ROWS]
    rules.append(Rule(model=CANDIDATE, content="I do not know."))
    return LLMDouble(
        models=[ModelSpec(CANDIDATE, max_model_len=4096), ModelSpec(JUDGE, max_model_len=8192)],
        rules=rules,
        latency_s=latency_s,
    )


def write_dataset(path: Path) -> Path:
    """Write the demo rows as a custom JSONL dataset; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in DEMO_ROWS:
            record = {
                "instruction": row.instruction,
                "ground_truth_response": row.ground_truth,
                "external_row_id": row.row_id,
            }
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _clip(text: Any, width: int) -> str:
    flat = " ".join(str(text if text is not None else "-").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def report(output: Path) -> str:
    """A human-readable account of the run in ``output``."""
    summary = json.loads((output / "summary.json").read_text(encoding="utf-8"))
    generations = {g.get("row_index"): g for g in _read_jsonl(output / "generations.jsonl")}
    judgements = sorted(
        _read_jsonl(output / "judgements.jsonl"), key=lambda j: j.get("row_index", 0)
    )
    lines = [
        "",
        f"avg_score      {summary.get('avg_score')}  (expected {5 / 6:.4f}: 5 of 6 right)",
        f"count          {summary.get('count')}",
        f"errors         {summary.get('error_count', summary.get('errors'))}",
        f"avg_latency_ms {summary.get('avg_latency_ms')}",
        f"comparison_key {summary.get('comparison_key')}",
        "",
        f"{'row':<16} {'score':>5}  {'expected':<9} answer (as generated)",
    ]
    for judgement in judgements:
        generation = generations.get(judgement.get("row_index"), {})
        row_id = judgement.get("row_id") or judgement.get("row_index")
        expected = next((r.ground_truth for r in DEMO_ROWS if r.row_id == row_id), "?")
        score = judgement.get("score")
        lines.append(
            f"{_clip(row_id, 16):<16} {score!s:>5}  {expected:<9} "
            f"{_clip(generation.get('content'), 60)}"
        )
    lines += [
        "",
        f"files in {output}:",
        *(f"  {path.name}" for path in sorted(output.iterdir()) if path.is_file()),
    ]
    return "\n".join(lines)


def run_demo(output: Path, *, latency_s: float = 0.05, concurrency: int = 4) -> int:
    """Run ``kyai run`` on the demo dataset against the double; returns its exit status."""
    from kyai import cli

    dataset = write_dataset(output.parent / f"{output.name}-dataset.jsonl")
    with demo_double(latency_s=latency_s).start_in_thread() as double:
        print(f"LLM double on {double.base_url} serving {', '.join(double.models)}")
        print(f"dataset: {dataset} ({len(DEMO_ROWS)} rows)\n", flush=True)
        status = cli.main(
            [
                "run",
                "--endpoint",
                double.base_url,
                "--model",
                CANDIDATE,
                "--dataset",
                str(dataset),
                "--generation-prompt",
                GENERATION_PROMPT,
                "--judge-endpoint",
                double.base_url,
                "--judge-model",
                JUDGE,
                "--judge-prompt",
                JUDGE_PROMPT,
                "--concurrency",
                str(concurrency),
                "--output",
                str(output),
            ]
        )
        served = len(double.requests)
    if status != 0 or not (output / "summary.json").exists():
        print(f"\nkyai run failed with exit status {status}.", file=sys.stderr)
        return status or 1
    print(report(output))
    print(f"\nthe double answered {served} chat requests (candidate and judge).")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo from the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m kyai_testing.demo",
        description="A local KYAI run against the bundled OpenAI-compatible LLM double.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="run directory (default: a new temporary directory, kept)",
    )
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    args = parser.parse_args(argv)
    output = args.output or Path(tempfile.mkdtemp(prefix="kyai-demo-")) / "run"
    return run_demo(output, latency_s=args.latency)


if __name__ == "__main__":
    sys.exit(main())
