"""The output budget: most of the model's context window, as KYAI prescribes.

KYAI exposes no max-tokens control. The context window comes, in order, from the live
server's ``/v1/models`` card (vLLM and SGLang report ``max_model_len``), from the model's
HuggingFace ``config.json`` given by path (TensorRT-LLM and llama.cpp report nothing), and
otherwise from :data:`DEFAULT_CONTEXT_WINDOW`. Each request then asks for the window less an
estimate of its prompt; when the server still answers with a context-length error, the client
shrinks the budget from the numbers in the message and retries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Context window assumed when neither the server nor a config.json tells it.
DEFAULT_CONTEXT_WINDOW = 8192

#: Characters per token used to estimate a prompt's size (conservative: real tokenizers
#: average about four characters per token on English text, fewer on code and maths).
CHARS_PER_TOKEN = 3

#: Tokens kept free for the chat template's own tokens around the messages.
TEMPLATE_MARGIN = 32

#: The smallest budget ever requested; a prompt that leaves less is left to the server to
#: refuse, which then fails the row as a context overflow.
MIN_BUDGET = 16

#: Keys of a HuggingFace config.json that hold the context length, in order of preference.
CONFIG_KEYS: tuple[str, ...] = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "model_max_length",
    "n_ctx",
)

#: Keys of a /v1/models card that hold the context length (vLLM, SGLang: max_model_len).
CARD_KEYS: tuple[str, ...] = ("max_model_len", "max_context_length", "context_length")


class ModelConfigError(ValueError):
    """The model's config.json could not be read or holds no context length."""


@dataclass(frozen=True)
class ContextWindow:
    """A context window in tokens and where it was learned."""

    tokens: int
    source: str  # "server", "config", "default"


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = int(value)
    return number if number > 0 and number == value else None


def window_from_card(card: Mapping[str, Any]) -> int | None:
    """The context window a ``/v1/models`` entry reports, if any."""
    for key in CARD_KEYS:
        tokens = _positive_int(card.get(key))
        if tokens:
            return tokens
    return None


def find_card(cards: Iterable[Mapping[str, Any]], model: str) -> Mapping[str, Any] | None:
    """The ``/v1/models`` entry whose ``id`` (or ``root``) is ``model``."""
    cards = list(cards)
    for card in cards:
        if card.get("id") == model:
            return card
    for card in cards:
        if card.get("root") == model:
            return card
    return None


def window_from_config(path: str | Path) -> int:
    """The context window in a HuggingFace ``config.json`` (or the folder that holds one)."""
    config_path = Path(path)
    if config_path.is_dir():
        config_path = config_path / "config.json"
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelConfigError(f"Cannot read model config {config_path}: {exc}.") from exc
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"Model config {config_path} is not valid JSON (line {exc.lineno}): {exc.msg}."
        ) from exc
    if not isinstance(data, dict):
        raise ModelConfigError(f"Model config {config_path} is not a JSON object.")
    for section in (data, data.get("text_config"), data.get("llm_config")):
        if not isinstance(section, dict):
            continue
        for key in CONFIG_KEYS:
            tokens = _positive_int(section.get(key))
            if tokens:
                return tokens
    raise ModelConfigError(
        f"Model config {config_path} has none of the context-length fields "
        f"{', '.join(CONFIG_KEYS)}."
    )


def resolve_window(
    cards: Sequence[Mapping[str, Any]],
    model: str,
    *,
    config_path: str | Path | None = None,
    hint: int | None = None,
) -> ContextWindow:
    """Pick the context window: the server's card, ``config_path``, ``hint``, the default.

    ``hint`` is a window known some other way (``--context-window``; the operator passes the
    one it read from the engine's flags or the model's config.json).
    """
    card = find_card(cards, model)
    if card is not None:
        tokens = window_from_card(card)
        if tokens:
            return ContextWindow(tokens, "server")
    if config_path is not None:
        return ContextWindow(window_from_config(config_path), "config")
    if hint is not None and hint > 0:
        return ContextWindow(hint, "hint")
    return ContextWindow(DEFAULT_CONTEXT_WINDOW, "default")


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """A conservative estimate of the tokens a chat prompt takes."""
    chars = 0
    for message in messages:
        content = message.get("content")
        if content:
            chars += len(content) if isinstance(content, str) else len(str(content))
    return math.ceil(chars / CHARS_PER_TOKEN) + TEMPLATE_MARGIN


def output_budget(window: int, messages: Sequence[Mapping[str, Any]]) -> int:
    """``max_tokens`` for one request: the window less the estimated prompt."""
    return max(window - estimate_prompt_tokens(messages), MIN_BUDGET)
