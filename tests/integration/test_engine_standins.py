"""The serving-engine stand-ins run the operator's own engine command lines, over real HTTP.

Each stand-in is started as ``python -m kyai_testing.engines <argv>`` where ``argv`` is what
:func:`kyai.engines.engine_command` renders for a Workload and an EngineArgsSet, so the
operator's real output is what gets parsed. The command line says ``--host 0.0.0.0 --port
8000``; ``KYAI_DEVCLUSTER_POD_IP`` gives each stand-in its own loopback address, as the
devcluster gives each pod one.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from kyai.api.engineargsset import EngineArgsSetSpec
from kyai.api.workload import WorkloadSpec
from kyai.cli import main as kyai_main
from kyai.constants import ENGINE_PORT
from kyai.engines import engine_command, served_model_name
from kyai.evaluation import parse_overflow
from kyai_testing import count_prompt_tokens
from kyai_testing.engines import (
    STANDINS,
    ServeConfig,
    StandinServer,
    StandinUsageError,
    engine_of,
    parse_command_line,
)
from kyai_testing.engines.__main__ import main as standin_main

LOAD_SECONDS = 2.0  # long enough to be seen loading on a busy machine
START_TIMEOUT_S = 20.0
RULES = [
    {"match": "France", "content": "Paris"},
    {"match": "Hamlet", "content": "Shakespeare"},
]
ROWS = [
    {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
    {"instruction": "Who wrote Hamlet?", "ground_truth_response": "Shakespeare"},
    {"instruction": "What is 2+2?", "ground_truth_response": "4"},
]


def workload(framework: str, **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"framework": framework, **fields})


def engine_args(framework: str, **fields: Any) -> EngineArgsSetSpec:
    return EngineArgsSetSpec.model_validate({"framework": framework, **fields})


#: Per engine: a Workload, its EngineArgsSet, the window it sets and whether it is reported.
CASES: dict[str, tuple[WorkloadSpec, EngineArgsSetSpec, int, bool]] = {
    "vllm": (
        workload("vllm", model="Qwen/Qwen3-0.6B", servedModelName="cand-vllm"),
        engine_args(
            "vllm",
            args={"max_model_len": 3072, "reasoning-parser": "qwen3", "enforce-eager": True},
            extraArgs=["--gpu-memory-utilization", "0.85"],
        ),
        3072,
        True,
    ),
    "sglang": (
        workload("sglang", model="Qwen/Qwen3-0.6B", servedModelName="cand-sglang"),
        engine_args(
            "sglang", args={"context-length": 2048, "tp-size": 1, "mem-fraction-static": 0.8}
        ),
        2048,
        True,
    ),
    "trtllm": (
        workload("trtllm", model="/models/tiny-llama"),
        engine_args("trtllm", args={"max_seq_len": 2048, "kv_cache_free_gpu_memory_fraction": 0.8}),
        2048,
        False,
    ),
}


def pod_ip() -> str:
    """A loopback address of its own (the port, 8000, is the command line's)."""
    return f"127.{random.randint(64, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"


@dataclass
class Running:
    process: subprocess.Popen[str]
    url: str
    health_seen: list[int]


def start(argv: list[str], tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    environ = {
        **os.environ,
        "KYAI_STANDIN_LOAD_SECONDS": str(LOAD_SECONDS),
        "KYAI_STANDIN_RULES": str(rules),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "kyai_testing.engines", *argv],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_healthy(process: subprocess.Popen[str], url: str, path: str = "/health") -> list[int]:
    """Poll the health route until 200; the statuses seen (0 = not listening yet)."""
    seen: list[int] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the stand-in exited with {process.returncode}: {out}{err}")
        try:
            status = httpx.get(url + path, timeout=2).status_code
        except httpx.TransportError:
            status = 0
        if not seen or seen[-1] != status:
            seen.append(status)
        if status == 200:
            return seen
        time.sleep(0.05)
    pytest.fail(f"{url}{path} was not healthy in {START_TIMEOUT_S} s: {seen}")


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return process.returncode, out


@pytest.fixture(scope="module", params=sorted(CASES))
def running(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Running]]:
    """One stand-in per engine for the module (starting one takes about two seconds)."""
    framework: str = request.param
    spec, args, _, _ = CASES[framework]
    ip = pod_ip()
    workdir = tmp_path_factory.mktemp(framework)
    process = start(engine_command(spec, args).argv, workdir, KYAI_DEVCLUSTER_POD_IP=ip)
    url = f"http://{ip}:{ENGINE_PORT}"
    try:
        seen = wait_healthy(process, url)
        yield framework, Running(process, url, seen)
    finally:
        code, out = stop(process)
        assert code == 0, out
        assert "stopped" in out


def test_health_is_503_while_loading_then_200_on_the_pod_address(
    running: tuple[str, Running],
) -> None:
    framework, server = running
    assert server.health_seen[-1] == 200
    assert 503 in server.health_seen, server.health_seen
    assert server.health_seen.index(503) < server.health_seen.index(200)
    health = httpx.get(server.url + "/health")
    assert health.status_code == 200 and health.content == b""
    if framework == "sglang":
        assert httpx.get(server.url + "/health_generate").status_code == 200


def test_models_are_listed_as_the_engine_lists_them(running: tuple[str, Running]) -> None:
    framework, server = running
    spec, _, window, reported = CASES[framework]
    listing = httpx.get(server.url + "/v1/models").json()
    assert listing["object"] == "list"
    (card,) = listing["data"]
    assert card["id"] == served_model_name(spec)
    assert card["object"] == "model" and isinstance(card["created"], int)
    if framework == "vllm":
        assert card["owned_by"] == "vllm" and card["root"] == spec.model
        assert card["parent"] is None and card["permission"][0]["object"] == "model_permission"
    elif framework == "sglang":
        assert card["owned_by"] == "sglang" and card["root"] == served_model_name(spec)
    else:
        assert set(card) == {"id", "object", "created", "owned_by"}
        assert card["owned_by"] == "tensorrt_llm"
    assert ("max_model_len" in card) is reported
    if reported:
        assert card["max_model_len"] == window


def test_kyai_generate_answers_every_row(
    running: tuple[str, Running], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    framework, server = running
    spec, _, window, _ = CASES[framework]
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    out = tmp_path / "gen"
    args = [
        "generate",
        "--endpoint",
        server.url + "/v1",
        "--model",
        served_model_name(spec),
        "--dataset",
        str(dataset),
        "--generation-prompt",
        "Answer with the bare answer only.",
        "--output",
        str(out),
        "--quiet",
    ]
    if framework == "trtllm":
        # The server reports no window: the operator passes the one from --max_seq_len.
        args += ["--context-window", str(window)]
    assert kyai_main(args) == 0, capsys.readouterr()
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [row["error"] for row in rows] == [None] * len(ROWS)
    assert [row["content"] for row in rows] == ["Paris", "Shakespeare", "OK"]
    assert {row["served_model"] for row in rows} == {served_model_name(spec)}
    assert all(row["max_tokens"] < window for row in rows)
    # vLLM (0.34, the default image) answers `reasoning`, SGLang `reasoning_content`.
    thinking = [row["reasoning"] or row["reasoning_content"] for row in rows]
    # Only the vLLM case's EngineArgsSet enables a reasoning parser.
    assert all(thinking) if framework == "vllm" else not any(thinking)
    printed = capsys.readouterr()
    source = "hint" if framework == "trtllm" else "server"
    assert f"context window {window} tokens ({source})" in printed.out + printed.err


def test_context_overflow_is_refused_in_the_engine_wording(
    running: tuple[str, Running],
) -> None:
    framework, server = running
    spec, _, window, _ = CASES[framework]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = count_prompt_tokens(messages)
    body = {"model": served_model_name(spec), "messages": messages, "max_tokens": window}
    answer = httpx.post(server.url + "/v1/chat/completions", json=body)
    if framework in ("trtllm", "vllm"):
        # TensorRT-LLM's PyTorch backend does not check max_tokens: generation stops at
        # max_seq_len. vLLM 0.32 on (the default image is 0.34) clamps it likewise.
        assert answer.status_code == 200
        assert answer.json()["usage"]["completion_tokens"] <= window - prompt
    if framework == "trtllm":
        return
    if framework == "vllm":
        # max_tokens alone over the window is refused, in 0.32's words.
        answer = httpx.post(
            server.url + "/v1/chat/completions", json={**body, "max_tokens": window + 1}
        )
        assert answer.status_code == 400
        message = answer.json()["error"]["message"]
        assert message == (
            f"max_tokens={window + 1} cannot be greater than max_model_len={window}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={window + 1})"
        )
    assert answer.status_code == 400
    payload = answer.json()
    if framework == "sglang":
        message = payload["message"]
        assert payload["object"] == "error" and payload["code"] == 400
        assert f"maximum context length of {window} tokens" in message
        assert f"{prompt} tokens from the input messages" in message
    overflow = parse_overflow(400, payload, answer.text)
    assert overflow is not None and overflow.window == window
    fits = {**body, "max_tokens": window - prompt - 1}
    assert httpx.post(server.url + "/v1/chat/completions", json=fits).status_code == 200


def test_reasoning_parser_adds_reasoning_content(running: tuple[str, Running]) -> None:
    framework, server = running
    spec, _, _, _ = CASES[framework]
    body = {
        "model": served_model_name(spec),
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 100,
    }
    message = httpx.post(server.url + "/v1/chat/completions", json=body).json()["choices"][0][
        "message"
    ]
    assert message["content"] == "Paris"
    # Only the vLLM case's EngineArgsSet enables a reasoning parser; vLLM after 0.11 (the
    # default image is 0.34) calls the field `reasoning`.
    if framework == "vllm":
        assert message["reasoning"] == "Let me think about this briefly."
        assert "reasoning_content" not in message
    else:
        assert "reasoning_content" not in message and "reasoning" not in message


def test_metrics_are_served_as_the_engine_serves_them(running: tuple[str, Running]) -> None:
    framework, server = running
    response = httpx.get(f"{server.url}/metrics", timeout=5)
    if framework == "vllm":
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        series = 'vllm:time_to_first_token_seconds_count{engine="0",model_name="cand-vllm"}'
        assert series in response.text
    else:  # SGLang only with --enable-metrics (not on this command line); TensorRT-LLM never
        assert response.status_code == 404


@pytest.mark.parametrize(
    ("framework", "expected"),
    [
        ("vllm", "vllm: error: unrecognized arguments: --kyai-no-such-flag"),
        ("sglang", "launch_server.py: error: unrecognized arguments: --kyai-no-such-flag"),
        ("trtllm", "No such option"),
    ],
)
def test_an_unknown_flag_fails_as_the_engine_fails(
    framework: str, expected: str, tmp_path: Path
) -> None:
    spec, args, _, _ = CASES[framework]
    bad = args.model_copy(update={"extra_args": ["--kyai-no-such-flag"]})
    process = start(engine_command(spec, bad).argv, tmp_path, KYAI_DEVCLUSTER_POD_IP=pod_ip())
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert expected in err
    assert "--kyai-no-such-flag" in err
    if framework != "trtllm":
        assert err.startswith("usage: ")
    else:
        assert err.startswith("Usage: trtllm-serve serve [OPTIONS] MODEL")


def test_the_engine_is_told_from_the_operators_command_lines() -> None:
    for framework, (spec, args, _, _) in CASES.items():
        assert engine_of(engine_command(spec, args).argv) == framework
    assert engine_of(["/usr/local/bin/vllm", "serve", "m"]) == "vllm"
    assert engine_of(["python", "-m", "sglang.launch_server"]) == "sglang"
    assert engine_of(["kyai", "generate"]) is None and engine_of([]) is None


def test_a_command_line_of_no_known_engine_is_refused(tmp_path: Path) -> None:
    process = start(["llama-server", "-m", "model.gguf"], tmp_path)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert "cannot tell the engine" in err and "llama-server" in err


# -- parsing as each engine parses (in-process) --------------------------------------------


def parse(argv: list[str], **env: str) -> ServeConfig:
    return parse_command_line(argv, env)


def test_vllm_spellings_defaults_and_refusals() -> None:
    config = parse(
        ["vllm", "serve", "org/m", "--max_model_len=32k", "-O3", "--compilation-config.level", "3"]
    )
    assert config.served_names == ("org/m",) and config.max_model_len == 32_000
    assert config.window_source == "--max-model-len" and config.port == 8000
    assert parse(["vllm", "serve", "org/m", "--max-model-len", "1K"]).max_model_len == 1024
    assert parse(["vllm", "serve", "org/m", "--max-model-len", "25.6k"]).max_model_len == 25_600
    with pytest.raises(StandinUsageError) as binary:
        parse(["vllm", "serve", "org/m", "--max-model-len", "1.5K"])
    assert "argument --max-model-len: Decimals are not allowed with binary suffixes like K." in (
        binary.value.output
    )
    two = parse(["vllm", "serve", "org/m", "--served-model-name", "a", "b", "--api-key", "k"])
    assert two.served_names == ("a", "b") and two.api_keys == ("k",)
    assert parse(["vllm", "serve", "org/m", "--no-enforce-eager"]).engine == "vllm"
    # vLLM 0.11 refused --model with `vllm serve`; 0.32 on moves it to the positional model.
    with pytest.raises(StandinUsageError) as refused:
        parse(["vllm", "serve", "--model", "org/m"], KYAI_STANDIN_ENGINE_VERSION="0.11.0")
    assert refused.value.exit_code == 1 and "positional argument" in refused.value.output
    assert parse(["vllm", "serve", "--model", "org/m"]).model == "org/m"
    with pytest.raises(StandinUsageError) as typed:
        parse(["vllm", "serve", "org/m", "--port", "http"])
    assert typed.value.exit_code == 2
    assert "argument --port: invalid int value: 'http'" in typed.value.output


def test_sglang_requires_the_model_and_refuses_deprecated_flags() -> None:
    with pytest.raises(StandinUsageError) as missing:
        parse(["python3", "-m", "sglang.launch_server", "--port", "8000"])
    assert "the following arguments are required: --model-path" in missing.value.output
    # SGLang 0.5.3 refused its deprecated MoE flags with their help text; 0.5.23 has none.
    sglang_053 = {"KYAI_STANDIN_ENGINE_VERSION": "0.5.3"}
    enable_ep_moe = ["python3", "-m", "sglang.launch_server", "--model", "m", "--enable-ep-moe"]
    with pytest.raises(StandinUsageError) as deprecated:
        parse(enable_ep_moe, **sglang_053)
    assert deprecated.value.exit_code == 1 and "--enable-ep-moe is deprecated" in (
        deprecated.value.output
    )
    with pytest.raises(StandinUsageError) as removed:
        parse(enable_ep_moe)
    assert removed.value.exit_code == 2
    assert "unrecognized arguments: --enable-ep-moe" in removed.value.output
    config = parse(
        ["python3", "-m", "sglang.launch_server", "--model", "m", "--allow-auto-truncate"]
    )
    assert (config.host, config.port, config.served_names) == ("127.0.0.1", 30000, ("m",))
    assert config.clamp_max_tokens


def test_window_comes_from_config_json_then_the_default(tmp_path: Path) -> None:
    model = tmp_path / "llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 16384}))
    config = parse(["trtllm-serve", str(model)])
    assert (config.max_model_len, config.window_source) == (16384, "config.json")
    assert config.served_names == ("llama",) and config.host == "localhost"
    default = parse(["trtllm-serve", "org/m"], KYAI_STANDIN_MAX_MODEL_LEN="1234")
    assert (default.max_model_len, default.window_source) == (1234, "default")
    assert default.served_names == ("org/m",)


def test_pod_ip_replaces_any_address_only() -> None:
    config = parse(["vllm", "serve", "m", "--host", "0.0.0.0"])
    assert config.bind_host({"KYAI_DEVCLUSTER_POD_IP": "127.1.2.3"}) == "127.1.2.3"
    assert config.bind_host({}) == "0.0.0.0"
    pinned = parse(["vllm", "serve", "m", "--host", "127.0.0.1"])
    assert pinned.bind_host({"KYAI_DEVCLUSTER_POD_IP": "127.1.2.3"}) == "127.0.0.1"


# -- in the test's event loop ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "open_routes", "guarded_routes"),
    [
        (
            ["vllm", "serve", "m", "--api-key", "sk-0", "sk-1", "--port", "0"],
            {"/health", "/version"},
            set(),
        ),
        (
            [
                "python3",
                "-m",
                "sglang.launch_server",
                "--model",
                "m",
                "--api-key",
                "sk-1",
                "--port",
                "0",
            ],
            {"/health", "/health_generate"},
            {"/get_model_info"},
        ),
    ],
)
async def test_api_key_guards_the_routes_the_engine_guards(
    argv: list[str], open_routes: set[str], guarded_routes: set[str]
) -> None:
    config = parse_command_line(argv, {})
    server = StandinServer(STANDINS[config.engine], config, host="127.0.0.1")
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            for route in open_routes:
                assert (await client.get(route)).status_code == 200, route
            for route in {*guarded_routes, "/v1/models"}:
                assert (await client.get(route)).status_code == 401, route
            wrong = {"Authorization": "Bearer sk-2"}
            assert (await client.get("/v1/models", headers=wrong)).status_code == 401
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            refused = await client.post("/v1/chat/completions", json=chat)
            assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
            auth = {"Authorization": "bearer sk-1"}
            assert (await client.get("/v1/models", headers=auth)).json()["data"][0]["id"] == "m"
            for route in guarded_routes:
                assert (await client.get(route, headers=auth)).status_code == 200, route
            answer = await client.post("/v1/chat/completions", json=chat, headers=auth)
            assert answer.json()["choices"][0]["message"]["content"] == "OK"
            unknown = await client.post(
                "/v1/chat/completions", json={**chat, "model": "other"}, headers=auth
            )
            assert unknown.status_code == 404
            assert "The model `other` does not exist." in unknown.text
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("flags", "content", "max_tokens", "expected"),
    [
        (  # the PyTorch backend refuses a prompt over max_num_tokens
            ["--max_num_tokens", "16"],
            "x" * 80,
            None,
            "The sum of prompt length (20.0), query length (0) should not exceed "
            "max_num_tokens (16)",
        ),
        (  # ... but not with chunked prefill, where only the window counts
            ["--max_num_tokens", "16", "--enable_chunked_prefill"],
            "x" * 80,
            None,
            None,
        ),
        (  # the TensorRT backend refuses prompt + max_tokens over max_seq_len
            ["--backend", "trt"],
            "x" * 80,
            100,
            "The sum of prompt length (20.0) and query length (0) max_tokens (100) should not "
            "exceed max_seq_len (64)",
        ),
        (["--backend", "tensorrt"], "x" * 80, 44, None),
        (  # a prompt that fills the window
            [],
            "x" * 256,
            None,
            "The sum of prompt length (64.0) and query length (0) max_tokens (None) should not "
            "exceed max_seq_len (64)",
        ),
    ],
)
async def test_trtllm_refusals_follow_the_backend(
    flags: list[str], content: str, max_tokens: int | None, expected: str | None
) -> None:
    argv = ["trtllm-serve", "m", "--port", "0", "--max_seq_len", "64", *flags]
    config = parse_command_line(argv, {})
    server = StandinServer(STANDINS["trtllm"], config, host="127.0.0.1")
    await server.start()
    try:
        body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": content}]}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        async with httpx.AsyncClient(base_url=server.url) as client:
            answer = await client.post("/v1/chat/completions", json=body)
    finally:
        await server.stop()
    if expected is None:
        assert answer.status_code == 200, answer.text
    else:
        assert answer.status_code == 400
        assert answer.json() == {
            "object": "error",
            "message": expected,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KYAI_STANDIN_LOAD_SECONDS": "soon"}, "KYAI_STANDIN_LOAD_SECONDS='soon' is not a number"),
        ({"KYAI_STANDIN_LOAD_SECONDS": "-1"}, "KYAI_STANDIN_LOAD_SECONDS='-1' must be a non-neg"),
        ({"KYAI_STANDIN_MAX_MODEL_LEN": "big"}, "KYAI_STANDIN_MAX_MODEL_LEN='big' is not an int"),
        ({"KYAI_STANDIN_RULES": "/nonexistent/rules.json"}, "KYAI_STANDIN_RULES=/nonexistent"),
        ({"KYAI_STANDIN_TTFT_MS": "fast"}, "KYAI_STANDIN_TTFT_MS='fast' is not a number"),
        ({"KYAI_STANDIN_TOKEN_MS": "-5"}, "KYAI_STANDIN_TOKEN_MS='-5' must be a non-negative"),
    ],
)
def test_bad_settings_exit_2_naming_the_variable(
    env: dict[str, str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert standin_main(["vllm", "serve", "m", "--port", "0"], env) == 2
    assert expected in capsys.readouterr().err


def test_a_bad_rules_file_names_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"match": "x", "colour": "red"}]))
    env = {"KYAI_STANDIN_RULES": str(rules)}
    assert standin_main(["trtllm-serve", "m", "--port", "0"], env) == 2
    err = capsys.readouterr().err
    assert str(rules) in err and "Rule #0 has unknown fields ['colour']" in err
