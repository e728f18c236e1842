import json
from pathlib import Path

import pytest

from kyai.evaluation import DEFAULT_CONTEXT_WINDOW, ModelConfigError, output_budget, resolve_window


def test_server_card_wins(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"max_position_embeddings": 131072}))
    cards = [{"id": "other", "max_model_len": 2048}, {"id": "m", "max_model_len": 32768}]
    window = resolve_window(cards, "m", config_path=config)
    assert (window.tokens, window.source) == (32768, "server")


def test_card_matched_by_root() -> None:
    window = resolve_window(
        [{"id": "alias", "root": "org/model", "max_model_len": 4096}], "org/model"
    )
    assert (window.tokens, window.source) == (4096, "server")


@pytest.mark.parametrize(
    ("config", "tokens"),
    [
        ({"max_position_embeddings": 40960}, 40960),
        ({"n_positions": 1024}, 1024),
        ({"text_config": {"max_position_embeddings": 131072}}, 131072),
        ({"max_seq_len": 8192, "max_position_embeddings": 4096}, 4096),
    ],
)
def test_config_json_when_server_silent(
    tmp_path: Path, config: dict[str, object], tokens: int
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    # A card without max_model_len (TensorRT-LLM, llama.cpp), given the folder.
    window = resolve_window([{"id": "m", "object": "model"}], "m", config_path=tmp_path)
    assert (window.tokens, window.source) == (tokens, "config")


def test_default_when_nothing_known() -> None:
    window = resolve_window([], "m")
    assert (window.tokens, window.source) == (DEFAULT_CONTEXT_WINDOW, "default")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"hidden_size": 4096}', "none of the context-length fields"),
        ("[]", "not a JSON object"),
    ],
)
def test_bad_config(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ModelConfigError, match=message) as info:
        resolve_window([], "m", config_path=path)
    assert str(path) in str(info.value)


def test_missing_config(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="Cannot read"):
        resolve_window([], "m", config_path=tmp_path / "nope.json")


def test_budget_is_most_of_the_window() -> None:
    messages = [{"role": "system", "content": "x" * 300}, {"role": "user", "content": "y" * 300}]
    budget = output_budget(4096, messages)
    assert 0.9 * 4096 < budget < 4096
    # The documented rule: the window less a third of the prompt's characters and a margin.
    assert budget == 4096 - 600 // 3 - 32


def test_budget_floor_for_huge_prompts() -> None:
    assert output_budget(1024, [{"role": "user", "content": "z" * 10_000}]) == 16
