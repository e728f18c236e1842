"""Which deterministic grader scores which built-in dataset."""

from __future__ import annotations

from kyai.graders._types import Grader

#: Built-ins without a deterministic grader, and why.
NO_BUILTIN_GRADER: dict[str, str] = {
    "python-codes-25k": "its tasks have no tests to run and many correct programs",
    "quantum-mechanics": "its answers are free-form physics with equivalent forms",
}


class GraderUnavailableError(ValueError):
    """No deterministic grader exists for this dataset."""


def builtin_grader(dataset: str | None) -> Grader:
    """The deterministic grader of a built-in dataset.

    ``None`` (a custom dataset) and datasets without one raise
    :class:`GraderUnavailableError` pointing to the LLM judge.
    """
    if dataset is None:
        raise GraderUnavailableError(
            "deterministic graders exist only for built-in datasets; score a custom dataset "
            "with the LLM judge (--judge llm) or a Python grader (--grader FILE)"
        )
    if dataset in NO_BUILTIN_GRADER:
        raise GraderUnavailableError(
            f"{dataset} has no deterministic grader ({NO_BUILTIN_GRADER[dataset]}): use the LLM "
            "judge (--judge llm, the default) with its judge prompt"
        )
    if dataset == "mmlu-pro":
        from kyai.graders._mcq import MCQGrader

        return MCQGrader(letters="ABCDEFGHIJ")
    if dataset == "gpqa-diamond":
        from kyai.graders._mcq import MCQGrader

        return MCQGrader(letters="ABCD")
    if dataset == "math-500":
        from kyai.graders._math import MathGrader

        return MathGrader()
    if dataset == "humaneval":
        from kyai.graders._humaneval import HumanEvalGrader

        return HumanEvalGrader()
    if dataset == "ifeval":
        from kyai.graders._ifeval import IFEvalGrader

        return IFEvalGrader()
    raise GraderUnavailableError(f"{dataset!r} is not a built-in dataset")
