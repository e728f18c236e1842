"""The engines and built-in datasets registries are the one source of names and defaults."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

from kyai.api import OWNED_FLAGS, EngineArgsSetSpec, SnapshotSpec, WorkloadSpec
from kyai.api.snapshot import BuiltinName
from kyai.datasets import BUILTIN_DATASETS, GENERATION_PROMPTS, JUDGE_PROMPTS, builtin_names
from kyai.engines import ENGINES, framework_list
from kyai.engines.__main__ import update_schema
from kyai.graders import NO_BUILTIN_GRADER, SPEC_CHOICES, GraderUnavailableError, builtin_grader
from kyai.graders._registry import GRADERS
from kyai.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]


def test_api_framework_enum_is_the_registry() -> None:
    schema = EngineArgsSetSpec.model_json_schema(by_alias=True)
    assert schema["properties"]["framework"]["enum"] == list(ENGINES)
    assert framework_list() in schema["properties"]["framework"]["description"]
    assert OWNED_FLAGS == {name: engine.owned_flags for name, engine in ENGINES.items()}
    with pytest.raises(ValueError, match=r"spec\.framework is required"):
        WorkloadSpec.model_validate({"model": "m"})


def test_settings_take_engine_images_from_the_registry() -> None:
    settings = OperatorSettings()
    assert {name: settings.engine_image(name) for name in ENGINES} == {
        name: engine.default_image for name, engine in ENGINES.items()
    }
    env = {"KYAI_VLLM_IMAGE": "registry.local/vllm:1"}
    assert OperatorSettings.from_env(env).engine_image("vllm") == "registry.local/vllm:1"
    assert OperatorSettings(vllm_image="x:1").engine_image("vllm") == "x:1"  # type: ignore[call-arg]


def test_chart_schema_lists_every_engine() -> None:
    path = ROOT / "charts" / "kyai-operator" / "values.schema.json"
    text = path.read_text(encoding="utf-8")
    assert update_schema(text) == text, "run `make crds`"
    images = json.loads(text)["properties"]["engineImages"]["properties"]
    assert list(images) == list(ENGINES)


def test_builtin_enum_is_the_registry() -> None:
    assert typing.get_args(BuiltinName) == builtin_names()
    with pytest.raises(ValueError, match="builtin"):
        SnapshotSpec.model_validate({"builtin": "not-a-dataset"})


@pytest.mark.parametrize("name", list(BUILTIN_DATASETS))
def test_every_builtin_entry_is_complete(name: str) -> None:
    entry = BUILTIN_DATASETS[name]
    assert entry.generation_prompt_id in GENERATION_PROMPTS
    assert entry.judge_prompt_id in JUDGE_PROMPTS
    if entry.grader is None:
        assert entry.no_grader_reason and name in NO_BUILTIN_GRADER
        with pytest.raises(GraderUnavailableError, match=re.escape(entry.no_grader_reason)):
            builtin_grader(name)
    else:
        assert entry.grader in GRADERS and name not in NO_BUILTIN_GRADER
        assert builtin_grader(name) is not None


def test_unknown_dataset_has_no_grader() -> None:
    with pytest.raises(GraderUnavailableError, match="not a built-in dataset"):
        builtin_grader("nope")
    with pytest.raises(GraderUnavailableError, match="only for built-in datasets"):
        builtin_grader(None)


def test_the_cli_is_told_its_flags_and_a_resource_its_fields() -> None:
    with pytest.raises(GraderUnavailableError) as cli:
        builtin_grader(None)
    assert "(--judge llm)" in str(cli.value) and "(--grader FILE)" in str(cli.value)
    with pytest.raises(GraderUnavailableError) as spec:
        builtin_grader("quantum-mechanics", choices=SPEC_CHOICES)
    assert "(spec.judge.type: llm, the default)" in str(spec.value)
    assert "--" not in str(spec.value)
