"""Test tooling: an OpenAI-compatible LLM double that speaks like vLLM, SGLang and llama.cpp.

The public surface lives in :mod:`kyai.testing.llm_double` (also runnable with
``python -m kyai.testing.llm_double``); it is re-exported here.
"""

# Imported from the private modules, not from llm_double, so that ``python -m
# kyai.testing.llm_double`` does not find its own module already imported.
from kyai.testing._double import DoubleNotRunningError, LLMDouble
from kyai.testing._faults import FAULT_KINDS, Faults
from kyai.testing._judge import substring_judge
from kyai.testing._model import (
    ChatRequest,
    DoubleConfigError,
    ModelSpec,
    RecordedRequest,
    Rule,
    count_prompt_tokens,
)
from kyai.testing._servers import OVERFLOW_STYLES, OverflowStyle

__all__ = [
    "FAULT_KINDS",
    "OVERFLOW_STYLES",
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
