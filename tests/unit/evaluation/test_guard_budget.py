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
