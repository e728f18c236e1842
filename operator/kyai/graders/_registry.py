"""Deterministic graders by id; which built-in dataset uses which is said by its entry.

A built-in dataset's entry in :data:`kyai.datasets.BUILTIN_DATASETS` names its grader's id
(or why it has none); :func:`builtin_grader` builds that grader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kyai.datasets import BUILTIN_DATASETS
from kyai.graders._types import Grader


def _mcq(letters: str) -> Callable[[], Grader]:
    def make() -> Grader:
        from kyai.graders._mcq import MCQGrader

        return MCQGrader(letters=letters)

    return make


def _math() -> Grader:
    from kyai.graders._math import MathGrader

    return MathGrader()


def _humaneval() -> Grader:
    from kyai.graders._humaneval import HumanEvalGrader

    return HumanEvalGrader()


def _ifeval() -> Grader:
    from kyai.graders._ifeval import IFEvalGrader

    return IFEvalGrader()


#: Grader factories by the id a dataset entry names.
GRADERS: Mapping[str, Callable[[], Grader]] = MappingProxyType(
    {
        "mcq-a-j": _mcq("ABCDEFGHIJ"),
        "mcq-a-d": _mcq("ABCD"),
        "math": _math,
        "humaneval": _humaneval,
        "ifeval": _ifeval,
    }
)

#: Built-ins without a deterministic grader, and why.
NO_BUILTIN_GRADER: dict[str, str] = {
    name: entry.no_grader_reason or "it names no grader"
    for name, entry in BUILTIN_DATASETS.items()
    if entry.grader is None
}


class GraderUnavailableError(ValueError):
    """No deterministic grader exists for this dataset."""


@dataclass(frozen=True)
class JudgeChoices:
    """How a front end names the judges to use instead: the CLI's flags, a resource's fields."""

    llm: str
    """The LLM judge."""
    python: str
    """A Python grader."""


#: ``kyai run`` / ``kyai judge``: their flags.
CLI_CHOICES = JudgeChoices(llm="--judge llm", python="--grader FILE")
#: An EvaluationRun's message (and so a sweep cell's note): the run's spec fields.
SPEC_CHOICES = JudgeChoices(
    llm="spec.judge.type: llm", python="spec.judge.type: python with spec.judge.python"
)


def builtin_grader(dataset: str | None, *, choices: JudgeChoices = CLI_CHOICES) -> Grader:
    """The deterministic grader of a built-in dataset.

    ``None`` (a custom dataset) and datasets without one raise
    :class:`GraderUnavailableError` pointing to the LLM judge, named as ``choices`` says
    (the CLI's flags by default).
    """
    if dataset is None:
        raise GraderUnavailableError(
            "deterministic graders exist only for built-in datasets; score a custom dataset "
            f"with the LLM judge ({choices.llm}) or a Python grader ({choices.python})"
        )
    if dataset in NO_BUILTIN_GRADER:
        raise GraderUnavailableError(
            f"{dataset} has no deterministic grader ({NO_BUILTIN_GRADER[dataset]}): use the LLM "
            f"judge ({choices.llm}, the default) with its judge prompt"
        )
    entry = BUILTIN_DATASETS.get(dataset)
    if entry is None or entry.grader is None:
        raise GraderUnavailableError(f"{dataset!r} is not a built-in dataset")
    return GRADERS[entry.grader]()
