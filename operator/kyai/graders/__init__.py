"""Graders: scores no judge model can bend, and teams' own Python graders.

- Built-in deterministic graders (:func:`builtin_grader`): MCQ letter match (MMLU-Pro,
  GPQA Diamond), math equivalence with math-verify (MATH-500), HumanEval tests run in the
  sandbox, IFEval's verifiable instructions.
- Python graders (:class:`PythonGrader`) with the ``sample``, ``batch`` and ``model_backed``
  contracts, and preprocessors, run in the sandbox (:func:`run_sandboxed`).
"""

from kyai.graders._humaneval import HumanEvalGrader
from kyai.graders._ifeval import IFEvalGrader, write_punkt_tab
from kyai.graders._math import MathGrader, extract_final_answer
from kyai.graders._mcq import MCQGrader, extract_letter
from kyai.graders._python import (
    GraderDeclaration,
    GraderDeclarationError,
    PreprocessDeclaration,
    PreprocessError,
    PythonGrader,
    PythonPreprocessor,
)
from kyai.graders._registry import (
    CLI_CHOICES,
    NO_BUILTIN_GRADER,
    SPEC_CHOICES,
    GraderUnavailableError,
    JudgeChoices,
    builtin_grader,
)
from kyai.graders._sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    run_sandboxed,
    sandbox_layers,
)
from kyai.graders._types import (
    Grade,
    GradeInput,
    Grader,
    GradingContext,
    GradingOutcome,
    ModelBridge,
)

__all__ = [
    "CLI_CHOICES",
    "NO_BUILTIN_GRADER",
    "SPEC_CHOICES",
    "Grade",
    "GradeInput",
    "Grader",
    "GraderDeclaration",
    "GraderDeclarationError",
    "GraderUnavailableError",
    "GradingContext",
    "GradingOutcome",
    "HumanEvalGrader",
    "IFEvalGrader",
    "JudgeChoices",
    "MCQGrader",
    "MathGrader",
    "ModelBridge",
    "PreprocessDeclaration",
    "PreprocessError",
    "PythonGrader",
    "PythonPreprocessor",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "builtin_grader",
    "extract_final_answer",
    "extract_letter",
    "run_sandboxed",
    "sandbox_layers",
    "write_punkt_tab",
]
