"""Where a Workload's context window comes from when its server reports none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.controllers import workload as wl
from kyai.evaluation import resolve_window


def spec(framework: str = "trtllm", model: str = "org/model") -> WorkloadSpec:
    return WorkloadSpec.model_validate({"framework": framework, "model": model})


@pytest.mark.parametrize(
    ("framework", "args", "tokens"),
    [
        ("vllm", {"max-model-len": 32768}, 32768),
        ("vllm", {"max_model_len": "16384"}, 16384),
        ("sglang", {"context-length": 8192}, 8192),
        ("trtllm", {"max_seq_len": 4096}, 4096),
        ("trtllm", {"max-seq-len": 2048}, 2048),
        ("vllm", {"tensor-parallel-size": 2}, None),
        ("vllm", {"max-model-len": "32k"}, None),
        ("sglang", {"max-model-len": 8192}, None),  # not SGLang's flag
    ],
)
def test_engine_args_window(framework: str, args: dict[str, Any], tokens: int | None) -> None:
    eas = EngineArgsSetSpec.model_validate({"framework": framework, "args": args})
    assert wl.engine_args_window(spec(framework), eas) == tokens


def test_hub_config_window_is_fetched_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import huggingface_hub

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"max_position_embeddings": 131072}))
    calls: list[dict[str, Any]] = []

    def download(**kwargs: Any) -> str:
        calls.append(kwargs)
        return str(config)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(wl, "_HUB_WINDOWS", {})
    assert wl.hub_config_window("org/model") == 131072
    assert wl.hub_config_window("org/model") == 131072
    assert calls == [{"repo_id": "org/model", "filename": "config.json"}]
    assert wl.hub_config_window("/models/local-path") is None


def test_hub_failures_are_not_retried_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    calls = 0

    def offline(**kwargs: Any) -> str:
        nonlocal calls
        calls += 1
        raise OSError("no route to host")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.setattr(wl, "_HUB_WINDOWS", {})
    assert wl.hub_config_window("org/model") is None
    assert wl.hub_config_window("org/model") is None
    assert calls == 1


async def test_fallback_prefers_the_engine_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wl, "hub_config_window", lambda model: 999)
    eas = EngineArgsSetSpec.model_validate({"framework": "trtllm", "args": {"max_seq_len": 4096}})
    assert await wl.fallback_window(spec(), eas) == (4096, "engine-args")
    assert await wl.fallback_window(spec(), None) == (999, "config")
    monkeypatch.setattr(wl, "hub_config_window", lambda model: None)
    assert await wl.fallback_window(spec(), None) == (None, None)


def test_hint_ranks_below_server_and_config(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"max_position_embeddings": 2048}))
    assert resolve_window([{"id": "m", "max_model_len": 1024}], "m", hint=3000).source == "server"
    assert resolve_window([], "m", config_path=config, hint=3000).tokens == 2048
    window = resolve_window([{"id": "m"}], "m", hint=3000)
    assert (window.tokens, window.source) == (3000, "hint")
