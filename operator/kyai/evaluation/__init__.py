"""KYAI's evaluation engine: generation, judging and scoring against OpenAI-compatible servers.

Used by the ``kyai`` command line and by the operator's generation and judge Jobs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from kyai.evaluation._budget import (
        DEFAULT_CONTEXT_WINDOW,
        ContextWindow,
        ModelConfigError,
        find_card,
        output_budget,
        resolve_window,
        window_from_card,
        window_from_config,
    )
    from kyai.evaluation._client import (
        ChatClient,
        ChatError,
        ChatResult,
        EndpointConfigError,
        EndpointUnreachableError,
        InvalidEndpointError,
        RetryPolicy,
        parse_overflow,
    )
    from kyai.evaluation._generate import CandidateConfig, GenerationOutcome, generate, messages_for
    from kyai.evaluation._grading import (
        GraderJudge,
        NamedJudge,
        agreement,
        cohen_kappa,
        judge_many,
        judge_with_grader,
    )
    from kyai.evaluation._judge import GenerationSet, JudgeConfig, judge, judge_message
    from kyai.evaluation._preflight import check_server
    from kyai.evaluation._progress import Progress, ProgressListener, ProgressUpdate
    from kyai.evaluation._reasoning import strip_reasoning
    from kyai.evaluation._scoring import SCORING_METHOD, comparison_key, score_rows
    from kyai.evaluation._store import RunDirectoryError
    from kyai.evaluation._verdict import Verdict, parse_verdict

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._budget": (
            "DEFAULT_CONTEXT_WINDOW",
            "ContextWindow",
            "ModelConfigError",
            "find_card",
            "output_budget",
            "resolve_window",
            "window_from_card",
            "window_from_config",
        ),
        "._client": (
            "ChatClient",
            "ChatError",
            "ChatResult",
            "EndpointConfigError",
            "EndpointUnreachableError",
            "InvalidEndpointError",
            "RetryPolicy",
            "parse_overflow",
        ),
        "._generate": ("CandidateConfig", "GenerationOutcome", "generate", "messages_for"),
        "._grading": (
            "GraderJudge",
            "NamedJudge",
            "agreement",
            "cohen_kappa",
            "judge_many",
            "judge_with_grader",
        ),
        "._judge": ("GenerationSet", "JudgeConfig", "judge", "judge_message"),
        "._preflight": ("check_server",),
        "._progress": ("Progress", "ProgressListener", "ProgressUpdate"),
        "._reasoning": ("strip_reasoning",),
        "._scoring": ("SCORING_METHOD", "comparison_key", "score_rows"),
        "._store": ("RunDirectoryError",),
        "._verdict": ("Verdict", "parse_verdict"),
    },
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "SCORING_METHOD",
    "CandidateConfig",
    "ChatClient",
    "ChatError",
    "ChatResult",
    "ContextWindow",
    "EndpointConfigError",
    "EndpointUnreachableError",
    "GenerationOutcome",
    "GenerationSet",
    "GraderJudge",
    "InvalidEndpointError",
    "JudgeConfig",
    "ModelConfigError",
    "NamedJudge",
    "Progress",
    "ProgressListener",
    "ProgressUpdate",
    "RetryPolicy",
    "RunDirectoryError",
    "Verdict",
    "agreement",
    "check_server",
    "cohen_kappa",
    "comparison_key",
    "find_card",
    "generate",
    "judge",
    "judge_many",
    "judge_message",
    "judge_with_grader",
    "messages_for",
    "output_budget",
    "parse_overflow",
    "parse_verdict",
    "resolve_window",
    "score_rows",
    "strip_reasoning",
    "window_from_card",
    "window_from_config",
]
