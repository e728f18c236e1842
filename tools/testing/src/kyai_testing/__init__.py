"""Test tooling: an OpenAI-compatible LLM double that speaks like vLLM, SGLang and llama.cpp.

The public surface lives in :mod:`kyai_testing.llm_double` (also runnable with
``python -m kyai_testing.llm_double``); it is re-exported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from kyai_testing._double import STREAM_MODES, DoubleNotRunningError, LLMDouble
    from kyai_testing._faults import ALL_FAULT_KINDS, FAULT_KINDS, STREAM_FAULT_KINDS, Faults
    from kyai_testing._judge import substring_judge
    from kyai_testing._model import (
        ChatRequest,
        DoubleConfigError,
        ModelSpec,
        RecordedRequest,
        Rule,
        count_prompt_tokens,
    )
    from kyai_testing._servers import OVERFLOW_STYLES, OverflowStyle

# The private modules, not llm_double, so that ``python -m kyai_testing.llm_double`` does
# not find its own module already imported.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._double": ("STREAM_MODES", "DoubleNotRunningError", "LLMDouble"),
        "._faults": ("ALL_FAULT_KINDS", "FAULT_KINDS", "STREAM_FAULT_KINDS", "Faults"),
        "._judge": ("substring_judge",),
        "._model": (
            "ChatRequest",
            "DoubleConfigError",
            "ModelSpec",
            "RecordedRequest",
            "Rule",
            "count_prompt_tokens",
        ),
        "._servers": ("OVERFLOW_STYLES", "OverflowStyle"),
    },
)

__all__ = [
    "ALL_FAULT_KINDS",
    "FAULT_KINDS",
    "OVERFLOW_STYLES",
    "STREAM_FAULT_KINDS",
    "STREAM_MODES",
    "ChatRequest",
    "DoubleConfigError",
    "DoubleNotRunningError",
    "Faults",
    "LLMDouble",
    "ModelSpec",
    "OverflowStyle",
    "RecordedRequest",
    "Rule",
    "count_prompt_tokens",
    "substring_judge",
]
