import pytest

from kyai.evaluation import strip_reasoning


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Answer: C", "Answer: C"),
        ("<think>A? B? maybe D</think>\nAnswer: C", "Answer: C"),
        ("<THINK>x</THINK>Answer: B", "Answer: B"),
        ("<think>one</think>mid<think>two</think> end", "mid end"),
        ("<thinking>plan</thinking>Final answer: 4", "Final answer: 4"),
        # DeepSeek-R1 templates open <think> in the prompt: only the closing tag is generated.
        ("I weigh A against B...\n</think>\n\nAnswer: A", "Answer: A"),
        # Cut off while thinking: nothing of the thought reaches the judge.
        ("Answer: D\n<think>but wait, maybe", "Answer: D"),
        ("<think>never finished", ""),
        ("", ""),
        (None, ""),
    ],
)
def test_strip_reasoning(raw: str | None, clean: str) -> None:
    assert strip_reasoning(raw) == clean
