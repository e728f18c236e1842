from __future__ import annotations

from pathlib import Path

import pytest

from kyai.datasets import BUILTIN_DATASETS, GENERATION_PROMPTS, JUDGE_PROMPTS

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "kyai_seed_prompts.txt"
# In a checkout, shared/ sits beside the repository (CI lays a copy there too).
SEED = Path(__file__).resolve().parents[4] / "shared" / "seeds" / "000_b747e3435d11474e.txt"

GENERATION_IDS = [
    "mmlu-pro-mcq",
    "gpqa-mcq",
    "math-500-answer",
    "code-python",
    "humaneval-code",
    "quantum-mechanics-reasoning",
    "ifeval-instruction",
]
JUDGE_IDS = [
    "mcq-exact-match-judge",
    "math-final-answer-judge",
    "code-python-judge",
    "humaneval-code-judge",
    "physics-reasoning-judge",
    "ifeval-constraint-judge",
]


def seed_text() -> str:
    return FIXTURE.read_text(encoding="utf-8")


def test_exactly_the_seed_ids() -> None:
    assert list(GENERATION_PROMPTS) == GENERATION_IDS
    assert list(JUDGE_PROMPTS) == JUDGE_IDS


@pytest.mark.parametrize(
    ("pid", "text"),
    [*GENERATION_PROMPTS.items(), *JUDGE_PROMPTS.items()],
    ids=[*GENERATION_PROMPTS, *JUDGE_PROMPTS],
)
def test_prompt_is_verbatim_block_of_seed(pid: str, text: str) -> None:
    seed = seed_text()
    lines = seed.split("\n")
    # The prompt follows its id line: the id alone, or the id then " (datasets...)".
    heads = [i for i, line in enumerate(lines) if line == pid or line.startswith(pid + " (")]
    assert len(heads) == 1, f"{pid} id line not found once in the seed excerpt"
    block = "\n".join(lines[heads[0] + 1 :])
    assert block.startswith(text + "\n"), f"{pid} differs from the seed text after its id"
    # The block ends right there: the next seed line is another id or a heading.
    following = block[len(text) + 1 :].split("\n", 1)[0]
    known_heads = {*GENERATION_IDS, *JUDGE_IDS, "Judge Prompts", ""}
    assert following.split(" (")[0] in known_heads
    assert text == text.strip() and "\n" in text  # seed line breaks kept, nothing trailing


def test_prompts_keep_seed_line_breaks_exactly() -> None:
    assert GENERATION_PROMPTS["code-python"] == (
        "You are a Python coding assistant. Respond with ONLY valid Python code that\n"
        "satisfies the request. Do not include Markdown fences or explanation."
    )
    assert JUDGE_PROMPTS["mcq-exact-match-judge"].endswith(
        'Return JSON {"score": 1.0 or 0.0, "reasoning": "Extracted letter: X. Ground\n'
        'truth: Y."} No other output.'
    )


def test_builtins_use_the_seed_table_prompts() -> None:
    table = {
        "mmlu-pro": ("mmlu-pro-mcq", "mcq-exact-match-judge"),
        "gpqa-diamond": ("gpqa-mcq", "mcq-exact-match-judge"),
        "math-500": ("math-500-answer", "math-final-answer-judge"),
        "python-codes-25k": ("code-python", "code-python-judge"),
        "humaneval": ("humaneval-code", "humaneval-code-judge"),
        "quantum-mechanics": ("quantum-mechanics-reasoning", "physics-reasoning-judge"),
        "ifeval": ("ifeval-instruction", "ifeval-constraint-judge"),
    }
    got = {
        name: (spec.generation_prompt_id, spec.judge_prompt_id)
        for name, spec in BUILTIN_DATASETS.items()
    }
    assert got == table
    for spec in BUILTIN_DATASETS.values():
        assert spec.generation_prompt == GENERATION_PROMPTS[spec.generation_prompt_id]
        assert spec.judge_prompt == JUDGE_PROMPTS[spec.judge_prompt_id]


def test_prompt_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        GENERATION_PROMPTS["code-python"] = "changed"  # type: ignore[index]


@pytest.mark.skipif(not SEED.exists(), reason="shared/seeds is not beside this checkout")
def test_fixture_is_a_verbatim_excerpt_of_the_seed() -> None:
    assert seed_text() in SEED.read_text(encoding="utf-8")
