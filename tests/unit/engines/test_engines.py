"""Engine command lines: the documented invocations, flag rendering, refused flags."""

from __future__ import annotations

from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.engines import (
    ENGINES,
    EngineArgsError,
    check_engine_args,
    engine_command,
    engine_env,
    engine_for,
    served_model_name,
)


def workload(framework: str, **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"framework": framework, **fields})


def eas(framework: str, **fields: Any) -> EngineArgsSetSpec:
    return EngineArgsSetSpec.model_validate({"framework": framework, **fields})


# Insertion order deliberately not sorted: rendering must sort by flag name.
MIXED_ARGS: dict[str, Any] = {
    "max-model-len": 32768,
    "enforce-eager": True,
    "trust-remote-code": False,
    "gpu-memory-utilization": 0.9,
    "--lora-modules": ["sql=/adapters/sql", "chat=/adapters/chat"],
}


def test_vllm_command_line() -> None:
    spec = workload("vllm", model="Qwen/Qwen3-8B", servedModelName="qwen3-8b")
    args = eas("vllm", args=MIXED_ARGS, extraArgs=["--seed", "0", "--disable-log-requests"])
    command = engine_command(spec, args)
    assert command.command == ["vllm", "serve"]
    assert command.argv == [
        "vllm", "serve", "Qwen/Qwen3-8B",
        "--host", "0.0.0.0", "--port", "8000",
        "--served-model-name", "qwen3-8b",
        "--enforce-eager",
        "--gpu-memory-utilization", "0.9",
        "--lora-modules", "sql=/adapters/sql", "chat=/adapters/chat",
        "--max-model-len", "32768",
        # trust-remote-code: false is vLLM's --no-X, never nothing.
        "--no-trust-remote-code",
        # extraArgs stay verbatim and unchecked (0.11's --disable-log-requests included).
        "--seed", "0", "--disable-log-requests",
    ]  # fmt: skip


def test_sglang_command_line() -> None:
    spec = workload("sglang", model="deepseek-ai/DeepSeek-R1-Distill-Qwen-7B")
    args = eas(
        "sglang",
        args={"tp-size": 2, "reasoning-parser": "deepseek-r1", "enable-metrics": True},
        extraArgs=["--log-level", "warning"],
    )
    assert engine_command(spec, args).argv == [
        "python3", "-m", "sglang.launch_server",
        "--model-path", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "--host", "0.0.0.0", "--port", "8000",
        "--served-model-name", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "--enable-metrics",
        "--reasoning-parser", "deepseek-r1",
        "--tp-size", "2",
        "--log-level", "warning",
    ]  # fmt: skip


def test_trtllm_command_line_keeps_underscored_flags() -> None:
    spec = workload("trtllm", model="TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    args = eas(
        "trtllm",
        args={"tp_size": 2, "kv_cache_free_gpu_memory_fraction": 0.85, "trust_remote_code": True},
        extraArgs=["--backend", "pytorch"],
    )
    command = engine_command(spec, args)
    assert command.command == ["trtllm-serve"]
    assert command.args == [
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "--host", "0.0.0.0", "--port", "8000",
        "--kv_cache_free_gpu_memory_fraction", "0.85",
        "--tp_size", "2",
        "--trust_remote_code",
        "--backend", "pytorch",
    ]  # fmt: skip
    # The operator passes no served-model-name to trtllm-serve (see kyai.engines.trtllm).
    assert not any("served" in arg for arg in command.args)


@pytest.mark.parametrize("framework", ["vllm", "sglang", "trtllm"])
def test_without_engine_args_only_the_owned_flags_are_set(framework: str) -> None:
    args = engine_command(workload(framework, model="org/model")).args
    flags = {arg.split("=")[0] for arg in args if arg.startswith("-")}
    owned = {"--host", "--port", "--served-model-name", "--model-path"}
    assert flags <= owned
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert args[args.index("--port") + 1] == "8000"
    assert "org/model" in args


def test_rendering_order_does_not_depend_on_insertion() -> None:
    spec = workload("vllm", model="org/model")
    forward = engine_command(spec, eas("vllm", args=dict(MIXED_ARGS)))
    backward = engine_command(spec, eas("vllm", args=dict(reversed(list(MIXED_ARGS.items())))))
    assert forward.argv == backward.argv


OWNED_SPELLINGS = [
    ("vllm", {"port": 9000}, [], "port"),
    ("vllm", {"--host": "127.0.0.1"}, [], "--host"),
    ("vllm", {"served_model_name": "x"}, [], "served_model_name"),
    ("vllm", {"--served-model-name": "x"}, [], "--served-model-name"),
    ("vllm", {"model": "other/model"}, [], "model"),
    ("vllm", {}, ["--port=9000"], "--port"),
    ("vllm", {}, ["--host", "127.0.0.1"], "--host"),
    ("vllm", {}, ["--served_model_name", "x"], "--served_model_name"),
    ("sglang", {"model-path": "other/model"}, [], "model-path"),
    ("sglang", {"--model_path": "other/model"}, [], "--model_path"),
    ("sglang", {}, ["--model", "other/model"], "--model"),
    ("sglang", {"PORT": 1}, [], "PORT"),
    ("trtllm", {"port": 9000}, [], "port"),
    ("trtllm", {}, ["--host=::"], "--host"),
    ("trtllm", {"served_model_name": "x"}, [], "served_model_name"),
]


@pytest.mark.parametrize(("framework", "args", "extra", "named"), OWNED_SPELLINGS)
def test_owned_flags_are_refused_in_every_spelling(
    framework: str, args: dict[str, Any], extra: list[str], named: str
) -> None:
    spec = eas(framework, args=args, extraArgs=extra)
    with pytest.raises(EngineArgsError) as caught:
        engine_command(workload(framework, model="org/model"), spec)
    assert repr(named) in str(caught.value)
    with pytest.raises(EngineArgsError):
        check_engine_args(spec, engine_for(framework).owned_flags)


def test_a_flag_given_twice_is_refused() -> None:
    spec = eas("vllm", args={"max-model-len": 4096, "max_model_len": 8192})
    with pytest.raises(EngineArgsError, match="twice"):
        check_engine_args(spec, engine_for("vllm").owned_flags)


def test_framework_mismatch_is_refused() -> None:
    with pytest.raises(EngineArgsError, match="sglang"):
        engine_command(workload("vllm", model="org/model"), eas("sglang"))


def test_a_workload_with_an_endpoint_launches_no_engine() -> None:
    spec = workload("vllm", model="m", endpoint={"url": "http://elsewhere:8000/v1"})
    with pytest.raises(EngineArgsError, match="endpoint"):
        engine_command(spec)


def test_trtllm_served_name_follows_the_model_argument() -> None:
    assert served_model_name(workload("trtllm", model="org/model")) == "org/model"
    assert served_model_name(workload("trtllm", model="/models/llama-8b/")) == "llama-8b"
    # Naming it what the server reports anyway is fine; another name cannot be honoured.
    engine_command(workload("trtllm", model="/models/llama-8b", servedModelName="llama-8b"))
    with pytest.raises(EngineArgsError, match="servedModelName"):
        engine_command(workload("trtllm", model="org/model", servedModelName="short"))


def test_vllm_and_sglang_serve_the_requested_name() -> None:
    for framework in ("vllm", "sglang"):
        spec = workload(framework, model="/models/x", servedModelName="short")
        assert served_model_name(spec) == "short"
        args = engine_command(spec).args
        assert args[args.index("--served-model-name") + 1] == "short"


def test_engine_profiles() -> None:
    assert set(ENGINES) == {"vllm", "sglang", "trtllm"}
    assert {name: engine.health_path for name, engine in ENGINES.items()} == {
        "vllm": "/health",
        "sglang": "/health",
        "trtllm": "/health",
    }
    assert engine_for("vllm").reasoning_parser_flag == "--reasoning-parser"
    assert engine_for("sglang").reasoning_parser_flag == "--reasoning-parser"
    assert engine_for("trtllm").reasoning_parser_flag == "--reasoning_parser"
    for engine in ENGINES.values():
        assert engine.references, f"{engine.framework} cites no documentation"
    with pytest.raises(EngineArgsError, match="Unknown framework"):
        engine_for("tgi")


def test_env_model_cache_token_and_engine_variables() -> None:
    spec = workload(
        "vllm",
        model="org/model",
        modelCache={"claimName": "weights", "mountPath": "/cache"},
        hfTokenSecretRef={"name": "hf", "key": "token"},
    )
    env = engine_env(spec, eas("vllm", env=[{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]))
    assert env == [
        {"name": "HF_HOME", "value": "/cache"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
    ]
    assert engine_env(workload("vllm", model="org/model")) == []


def test_env_may_not_override_what_the_operator_sets() -> None:
    spec = workload("sglang", model="m", hfTokenSecretRef={"name": "hf"})
    with pytest.raises(EngineArgsError, match="HF_TOKEN"):
        engine_env(spec, eas("sglang", env=[{"name": "HF_TOKEN", "value": "leaked"}]))
    # Without a Secret reference the operator sets no HF_TOKEN: the EngineArgsSet may.
    plain = workload("sglang", model="m")
    assert engine_env(plain, eas("sglang", env=[{"name": "HF_TOKEN", "value": "t"}]))
