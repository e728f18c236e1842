"""Guards of the context window read from a model's ``config.json`` (issue 14, survivors of
``make mutation`` in evaluation/_budget): nested sections of multimodal configs, and the error
that lists the fields looked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kyai.evaluation import ContextWindow, ModelConfigError, resolve_window


def config(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "data",
    [
        {"llm_config": {"max_position_embeddings": 32768}},  # InternVL-style
        {"text_config": "not a section", "llm_config": {"max_position_embeddings": 32768}},
        {"text_config": {"max_position_embeddings": 32768}},  # Llava / Gemma 3 style
    ],
)
def test_nested_sections_are_read(tmp_path: Path, data: object) -> None:
    window = resolve_window([], "m", config_path=config(tmp_path, data))
    assert window == ContextWindow(32768, "config")


def test_a_config_without_a_window_names_the_fields(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as info:
        resolve_window([], "m", config_path=config(tmp_path, {"hidden_size": 4096}))
    assert "has none of the context-length fields max_position_embeddings, " in str(info.value)


# Survivors of the complete `evaluation-scoring` run (second pass): which card values and
# hints count as a context window, and prompts whose content is a list of parts.


@pytest.mark.parametrize("reported", [-4096, 0, 4096.5, "4096", True])
def test_a_card_window_that_is_not_a_positive_whole_number_is_ignored(reported: object) -> None:
    window = resolve_window([{"id": "m", "max_model_len": reported}], "m", hint=2048)
    assert window == ContextWindow(2048, "hint")


@pytest.mark.parametrize(("reported", "tokens"), [(1, 1), (4096, 4096), (4096.0, 4096)])
def test_a_positive_whole_card_window_is_the_servers(reported: object, tokens: int) -> None:
    window = resolve_window([{"id": "m", "max_model_len": reported}], "m")
    assert window == ContextWindow(tokens, "server")


def test_a_hint_of_zero_is_no_hint_and_a_hint_of_one_is_kept() -> None:
    assert resolve_window([], "m", hint=0).source == "default"
    assert resolve_window([], "m", hint=1) == ContextWindow(1, "hint")


def test_content_given_as_parts_is_counted_by_its_text() -> None:
    from kyai.evaluation._budget import CHARS_PER_TOKEN, estimate_prompt_tokens

    text = "x" * (CHARS_PER_TOKEN * 1000)
    as_parts = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    as_text = [{"role": "user", "content": text}]
    assert estimate_prompt_tokens(as_parts) >= estimate_prompt_tokens(as_text)
