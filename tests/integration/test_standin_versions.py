"""The stand-ins parse with the flag table of the version they imitate.

What the operator renders from an EngineArgsSet for a version is what the stand-in of that
version takes, with the values declared; what the version does not have, its stand-in
refuses as the engine does. Parsing only (no server): every table, every switch both ways.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.engines import engine_command, engine_tables
from kyai_testing.engines import StandinUsageError, parse_command_line
from kyai_testing.engines import sglang as sglang_standin
from kyai_testing.engines import vllm as vllm_standin
from kyai_testing.engines._common import ENV_ENGINE_VERSION, ENV_IMAGE, flag_table

IMAGES = {
    "vllm": "vllm/vllm-openai:v{}",
    "sglang": "lmsysorg/sglang:v{}-cu129",
    "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:{}",
}
VERSIONS = [(engine, table.version) for engine in IMAGES for table in engine_tables(engine)]


def image(engine: str, version: str) -> str:
    return IMAGES[engine].format(version)


def argv_for(engine: str, version: str, args: dict[str, Any]) -> list[str]:
    spec = WorkloadSpec.model_validate({"framework": engine, "model": "/models/m"})
    engine_args = EngineArgsSetSpec.model_validate({"framework": engine, "args": args})
    return engine_command(spec, engine_args, image=image(engine, version)).argv


def namespace(engine: str, version: str, argv: list[str]) -> argparse.Namespace:
    """The stand-in's own parse of ``argv`` (the argparse namespace, where it has one)."""
    env = {ENV_IMAGE: image(engine, version)}
    table = flag_table(engine, env)
    if engine == "vllm":
        args = vllm_standin._preprocess(argv[1:], table)
        return vllm_standin._parser(table).parse_args(args)
    return sglang_standin._parser(table).parse_args(argv[3:])


@pytest.mark.parametrize(("engine", "version"), VERSIONS)
def test_the_stand_in_imitates_the_images_version(engine: str, version: str) -> None:
    argv = argv_for(engine, version, {})
    config = parse_command_line(argv, {ENV_IMAGE: image(engine, version)})
    assert config.version == version
    assert parse_command_line(argv, {ENV_ENGINE_VERSION: version}).version == version


@pytest.mark.parametrize(("engine", "version"), [v for v in VERSIONS if v[0] != "trtllm"])
def test_every_switch_reaches_the_stand_in_with_the_value_declared(
    engine: str, version: str
) -> None:
    table = flag_table(engine, {ENV_IMAGE: image(engine, version)})
    owned = {"host", "port", "model", "model-path", "served-model-name", "headless"}
    switches = [
        flag
        for flag in table.flags
        if flag.kind == "boolean" and flag.name not in owned and flag.sets is True
    ]
    assert len(switches) >= 20
    for value in (True, False):
        args = {flag.name: value for flag in switches}
        argv = argv_for(engine, version, args)
        parsed = vars(namespace(engine, version, argv))
        for flag in switches:
            dest = flag.name.replace("-", "_")
            if value or flag.negative is not None:
                assert parsed[dest] is value, (flag.option, value, parsed[dest])
            else:  # off by default, nothing passed
                assert not parsed[dest], flag.option


def test_a_removed_option_is_refused_by_the_newer_stand_in_only() -> None:
    # --swap-space is in vLLM 0.11.0's parser, not in 0.32.0's.
    old = ["vllm", "serve", "/models/m", "--swap-space", "4"]
    assert parse_command_line(old, {ENV_IMAGE: image("vllm", "0.11.0")}).version == "0.11.0"
    with pytest.raises(StandinUsageError) as caught:
        parse_command_line(old, {ENV_IMAGE: image("vllm", "0.32.0")})
    assert "unrecognized arguments: --swap-space 4" in caught.value.output
    assert caught.value.exit_code == 2


def test_choices_are_the_engines() -> None:
    argv = ["vllm", "serve", "/models/m", "--dtype", "bf16"]
    with pytest.raises(StandinUsageError) as caught:
        parse_command_line(argv, {ENV_IMAGE: image("vllm", "0.32.0")})
    assert "argument --dtype: invalid choice: 'bf16'" in caught.value.output


def test_vllm_032_takes_model_as_an_option_and_newer_reasoning() -> None:
    argv = ["vllm", "serve", "--model", "/models/m", "--reasoning-parser", "deepseek_r1"]
    newer = parse_command_line(argv, {ENV_IMAGE: image("vllm", "0.32.0")})
    assert newer.model == "/models/m"
    assert newer.settings["reasoning_field"] == "reasoning"
    with pytest.raises(StandinUsageError, match="positional"):
        parse_command_line(argv, {ENV_IMAGE: image("vllm", "0.11.0")})
    older = ["vllm", "serve", "/models/m", "--reasoning-parser", "deepseek_r1"]
    config = parse_command_line(older, {ENV_IMAGE: image("vllm", "0.11.0")})
    assert config.settings["reasoning_field"] == "reasoning_content"
