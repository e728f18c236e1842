"""Two real runs of one comparison key, made against the LLM double: a baseline and a candidate.

``kyai view``, ``kyai report`` and ``kyai compare`` need two runs of the same questions that
differ on some of them. :func:`make_paired_runs` writes a dataset of arithmetic questions and
runs the KYAI pipeline (``generate`` then ``judge``, in-process, as ``kyai run`` does) twice
against the double: the baseline model (``model-bf16``) gets the rows of
:func:`baseline_wrong` wrong, the candidate (``model-fp8``) those of :func:`candidate_wrong`,
and the candidate's server fails one row for good (``candidate_http_error``). The judge is
the double's substring judge. Some answers carry reasoning, and one of the candidate's holds
HTML and a ``</script>`` (right all the same): a page must show it as text.

    python -m kyai_testing.paired_runs DIR [--questions N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from kyai_testing._double import LLMDouble
from kyai_testing._judge import substring_judge
from kyai_testing._model import ChatRequest, ModelSpec, Rule

BASELINE = "model-bf16"
CANDIDATE = "model-fp8"
JUDGE = "judge"

GENERATION_PROMPT = "Answer the arithmetic question with the number."
JUDGE_PROMPT = (
    'Compare the response with the ground truth. Reply with JSON {"score": 0 or 1, '
    '"reasoning": "<one sentence>"}.'
)

#: The row whose candidate request fails every time (HTTP 500).
FAILING_ROW = 57
#: The row whose candidate answer holds markup (and the right number).
MARKUP_ROW = 42
MARKUP = '<img src=x onerror="document.title=1"></script><script>document.title=2</script>'


def baseline_wrong(questions: int) -> set[int]:
    """The rows the baseline answers wrongly."""
    return {i for i in range(questions) if i % 11 == 5}


def candidate_wrong(questions: int) -> set[int]:
    """The rows the candidate answers wrongly (its failing row scores 0 as well)."""
    return {i for i in range(questions) if i % 8 == 3} | {FAILING_ROW % questions}


def _operands(index: int) -> tuple[int, int]:
    return 3 * index + 7, 2 * index + 11


def write_dataset(path: Path, questions: int) -> Path:
    """The questions as a custom JSONL dataset (row ids ``q000`` ...)."""
    with path.open("w", encoding="utf-8") as handle:
        for index in range(questions):
            a, b = _operands(index)
            record = {
                "instruction": f"Q{index:03d}: what is {a} + {b}?",
                "ground_truth_response": str(a + b),
                "external_row_id": f"q{index:03d}",
            }
            handle.write(json.dumps(record) + "\n")
    return path


def _answerer(wrong: set[int], *, markup: bool) -> Callable[[ChatRequest], str]:
    def answer(request: ChatRequest) -> str:
        found = re.search(r"Q(\d+):", request.last_user_message)
        index = int(found.group(1)) if found else 0
        a, b = _operands(index)
        total = a + b + (1 if index in wrong else 0)
        if markup and index == MARKUP_ROW:
            return f"{MARKUP} {total}"
        if index % 5 == 0:
            return f"<think>{a} + {b}: add the tens, then the ones.</think>The sum is {total}."
        return f"{a} + {b} = {total}"

    return answer


def paired_double(questions: int) -> LLMDouble:
    """The double with both candidates and the substring judge."""
    failing = f"Q{FAILING_ROW % questions:03d}:"
    rules = [
        Rule(model=JUDGE, content=substring_judge),
        Rule(match=failing, model=CANDIDATE, status=500),
        Rule(model=BASELINE, content=_answerer(baseline_wrong(questions), markup=False)),
        Rule(
            model=CANDIDATE,
            content=_answerer(candidate_wrong(questions), markup=True),
            reasoning_content="Adding the two numbers digit by digit.",
        ),
    ]
    models = [ModelSpec(name, max_model_len=4096) for name in (BASELINE, CANDIDATE, JUDGE)]
    return LLMDouble(models=models, rules=rules)


async def make_paired_runs(directory: Path, *, questions: int = 100) -> tuple[Path, Path]:
    """Write the baseline's and the candidate's run directories under ``directory``."""
    from kyai.datasets import load_dataset
    from kyai.evaluation import CandidateConfig, JudgeConfig, RetryPolicy, generate, judge

    directory.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset(
        str(write_dataset(directory / "arithmetic.jsonl", questions)),
        generation_prompt=GENERATION_PROMPT,
        judge_prompt=JUDGE_PROMPT,
    )
    retry = RetryPolicy(max_retries=1, backoff_base_s=0.001, backoff_max_s=0.01)
    outputs = []
    async with paired_double(questions) as double:
        for name, model in (("bf16", BASELINE), ("fp8", CANDIDATE)):
            out = directory / name
            await generate(
                dataset, out, CandidateConfig(double.url, model, retry=retry, concurrency=8)
            )
            await judge(out, out, JudgeConfig(double.url, JUDGE, retry=retry, concurrency=8))
            outputs.append(out)
    return outputs[0], outputs[1]


def main(argv: Sequence[str] | None = None) -> int:
    """Write the two runs from the command line."""
    parser = argparse.ArgumentParser(prog="python -m kyai_testing.paired_runs")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--questions", type=int, default=100)
    args = parser.parse_args(argv)
    baseline, candidate = asyncio.run(make_paired_runs(args.directory, questions=args.questions))
    print(f"baseline {baseline}\ncandidate {candidate}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
