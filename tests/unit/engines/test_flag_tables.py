"""Engine flag tables: versions, booleans both ways, unknown flags, choices, JSON, spellings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.engines import (
    ENGINES,
    EngineArgsError,
    check_flags,
    engine_command,
    engine_tables,
    image_version,
    table_for,
)
from kyai.engines._flags import release_of

TABLES = Path(__file__).resolve().parents[3] / "operator" / "kyai" / "engines" / "flags"
KINDS = {"boolean", "value", "choice", "list", "any", "optional", "append", "deprecated"}


def eas(framework: str, args: dict[str, Any], **fields: Any) -> EngineArgsSetSpec:
    return EngineArgsSetSpec.model_validate({"framework": framework, "args": args, **fields})


def workload(framework: str, **fields: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"framework": framework, "model": "org/m", **fields})


def rendered(framework: str, args: dict[str, Any], image: str | None = None) -> list[str]:
    """The EngineArgsSet's part of the command line (after the operator's own arguments)."""
    spec = workload(framework)
    own = engine_command(spec, image=image).args
    return engine_command(spec, eas(framework, args), image=image).args[len(own) :]


VLLM_032 = "vllm/vllm-openai:v0.32.0"


# -- the tables themselves -------------------------------------------------------------------


def table_files() -> list[Path]:
    return sorted(TABLES.glob("*/*.json"))


def test_every_engine_has_a_table_and_its_default_image_has_its_own() -> None:
    for name, engine in ENGINES.items():
        assert engine_tables(name), f"no flag table of {name}"
        choice = engine.table()
        assert choice.exact, f"{engine.default_image} has no table of its own"
        # The default image is the newest table's release.
        assert choice.table == engine_tables(name)[-1]


@pytest.mark.parametrize("path", table_files(), ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_a_table_file_is_well_formed(path: Path) -> None:
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["engine"] == path.parent.name
    assert document["version"] == path.stem
    assert document["source"], "a table names its source"
    assert release_of(document["version"]) is not None
    spellings: list[str] = []
    for item in document["options"]:
        assert item["kind"] in KINDS, item
        assert item["option"].startswith("-"), item
        if item["kind"] == "boolean":
            assert "negative" in item and isinstance(item["set"], bool), item
        else:
            assert "negative" not in item, item
        if item["kind"] == "choice":
            assert item["choices"], item
        spellings += [item["option"], *item["aliases"]]
        if item.get("negative"):
            spellings.append(item["negative"])
    assert len(spellings) == len(set(spellings)), "a spelling belongs to one option"
    assert len(document["options"]) >= 30


def test_vllm_switches_have_their_negative_forms() -> None:
    table = table_for("vllm", "0.32.0").table
    assert table is not None
    for name in ("enable-prefix-caching", "enable-chunked-prefill", "trust-remote-code"):
        found = table.lookup(name)
        assert found is not None
        flag = found[0]
        assert flag.kind == "boolean"
        assert flag.negative == f"--no-{name}"


# -- which table -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("vllm/vllm-openai:v0.32.0", "0.32.0"),
        ("docker.io/vllm/vllm-openai:v0.34.0@sha256:abc", "0.34.0"),
        ("lmsysorg/sglang:v0.5.23-cu129", "0.5.23"),
        ("lmsysorg/sglang:v0.5.3.post3-cu126", "0.5.3"),
        ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6", "1.2.0"),
        ("registry:5000/vllm:0.32", "0.32.0"),
        ("vllm/vllm-openai:latest", None),
        ("vllm/vllm-openai", None),
        ("registry:5000/vllm", None),
        ("vllm/vllm-openai@sha256:abc", None),
    ],
)
def test_the_version_is_the_tags_release(image: str, version: str | None) -> None:
    assert image_version(image) == version


def test_a_version_without_a_table_is_checked_against_the_newest_as_warnings() -> None:
    choice = table_for("vllm", "0.29.1")
    assert not choice.exact
    assert choice.table == engine_tables("vllm")[-1]
    assert "no table of its own" in choice.describe()
    plan = check_flags(eas("vllm", {"tensor-paralel-size": 2}), "vllm/vllm-openai:v0.29.1")
    assert plan.errors == []
    assert "did you mean `tensor-parallel-size`" in plan.warnings[0]
    # The typo still reaches the engine (which will refuse it): nothing is dropped.
    assert rendered("vllm", {"tensor-paralel-size": 2}, "vllm/vllm-openai:v0.29.1") == [
        "--tensor-paralel-size",
        "2",
    ]


def test_each_version_is_checked_against_its_own_table() -> None:
    # --swap-space exists in 0.11.0 and was removed before 0.32.0.
    assert check_flags(eas("vllm", {"swap-space": 4}), "vllm/vllm-openai:v0.11.0").errors == []
    refused = check_flags(eas("vllm", {"swap-space": 4}), VLLM_032).errors
    assert refused and "`swap-space` is not an option of vllm 0.32.0" in refused[0]


# -- booleans --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "negative"),
    [
        ("vllm/vllm-openai:v0.11.0", "--no-enable-{}"),
        (VLLM_032, "--no-enable-{}"),
        # 0.34's EnableDisableAction: --enable-X / --disable-X (--no-enable-X still taken).
        ("vllm/vllm-openai:v0.34.0", "--disable-{}"),
    ],
)
def test_vllm_false_renders_the_negative_form(image: str, negative: str) -> None:
    args = {"enable-prefix-caching": False, "enable-chunked-prefill": False}
    assert rendered("vllm", args, image) == [
        negative.format("chunked-prefill"),
        negative.format("prefix-caching"),
    ]
    assert rendered("vllm", {"enable-prefix-caching": True}, image) == ["--enable-prefix-caching"]


def test_a_switch_without_negative_form_that_is_off_by_default_renders_nothing_and_says_so() -> (
    None
):
    # vllm serve --headless is a store_true switch: false is its default.
    plan = check_flags(eas("vllm", {"headless": False}), VLLM_032)
    assert plan.argv == [] and plan.errors == []
    assert plan.notes == ["`headless`: false is vllm 0.32.0's default (nothing passed)"]


def test_sglang_false_on_a_store_true_switch_is_its_default() -> None:
    plan = check_flags(eas("sglang", {"enable-metrics": False}))
    assert plan.argv == [] and plan.errors == []
    assert "default" in plan.notes[0]
    assert check_flags(eas("sglang", {"enable-metrics": True})).argv == ["--enable-metrics"]


def test_false_on_a_switch_that_cannot_be_turned_off_is_refused() -> None:
    from kyai.engines._flags import Flag, FlagTable, TableChoice, plan_flags

    table = FlagTable("x", "1.0.0", "test", (Flag("--on", "boolean", default=True),))
    plan = plan_flags({"on": False}, TableChoice(table, True, "1.0.0"))
    assert plan.argv == []
    assert plan.errors == [
        "`on`: false cannot be honoured: x 1.0.0 has no way to turn it off (no negative "
        "form, and it is on by default); remove it"
    ]


def test_the_negative_spelling_is_the_flag_set_to_false() -> None:
    off = ["--no-enable-prefix-caching"]
    assert rendered("vllm", {"no-enable-prefix-caching": True}, VLLM_032) == off
    assert rendered("vllm", {"no-enable-prefix-caching": False}, VLLM_032) == [
        "--enable-prefix-caching"
    ]
    # 0.34 keeps --no-enable-X as a hidden spelling of --disable-X.
    assert rendered("vllm", {"no-enable-prefix-caching": True}) == ["--disable-prefix-caching"]


def test_a_switch_given_a_value_is_refused() -> None:
    with pytest.raises(EngineArgsError, match=r"`enforce-eager` is a switch of vllm 0\.34\.0"):
        rendered("vllm", {"enforce-eager": "yes"})


def test_false_on_a_flag_no_table_knows_is_not_dropped() -> None:
    # vLLM's convention (--no-X) for a build newer than the tables; SGLang has none.
    plan = check_flags(eas("vllm", {"enable-future-thing": False}), "vllm/vllm-openai:v9.0.0")
    assert plan.argv == ["--no-enable-future-thing"]
    plan = check_flags(eas("sglang", {"enable-future-thing": False}), "lmsysorg/sglang:v9.0.0")
    assert plan.argv == []
    assert "false cannot be rendered" in plan.errors[0]


# -- unknown flags, values, choices ----------------------------------------------------------


def test_a_typo_names_the_flag_meant() -> None:
    with pytest.raises(EngineArgsError) as caught:
        rendered("vllm", {"tensor-paralel-size": 1})
    assert str(caught.value) == (
        "spec.args: `tensor-paralel-size` is not an option of vllm 0.34.0: did you mean "
        "`tensor-parallel-size`? (spec.extraArgs passes arguments unchecked)"
    )


def test_a_flag_far_from_any_is_refused_without_a_guess() -> None:
    plan = check_flags(eas("vllm", {"frobnicate-the-widgets": 1}))
    assert "did you mean" not in plan.errors[0]
    assert "`frobnicate-the-widgets` is not an option of vllm" in plan.errors[0]


def test_a_value_outside_the_choices_names_them() -> None:
    plan = check_flags(eas("vllm", {"dtype": "bf16"}), VLLM_032)
    assert plan.errors == [
        "`dtype`: 'bf16' is not one of its choices: auto, bfloat16, float, float16, float32, "
        "half (vllm 0.32.0)"
    ]
    assert check_flags(eas("vllm", {"dtype": "bfloat16"}), VLLM_032).errors == []


def test_numbers_are_checked_where_the_parser_converts_them() -> None:
    plan = check_flags(eas("vllm", {"tensor-parallel-size": "two"}), VLLM_032)
    assert plan.errors == ["`tensor-parallel-size` takes an integer in vllm 0.32.0, not 'two'"]
    plan = check_flags(eas("vllm", {"gpu-memory-utilization": "most"}), VLLM_032)
    assert "takes a number" in plan.errors[0]
    assert check_flags(eas("vllm", {"tensor-parallel-size": "2"}), VLLM_032).errors == []


def test_a_value_flag_given_true_or_a_list_is_refused() -> None:
    plan = check_flags(eas("vllm", {"max-model-len": True, "seed": [1, 2]}), VLLM_032)
    assert plan.errors == [
        "`max-model-len` takes a value in vllm 0.32.0 (human_readable_int_or_auto), not true",
        "`seed` takes one value in vllm 0.32.0, not a list",
    ]


def test_deprecated_options_that_refuse_themselves_are_refused() -> None:
    # SGLang 0.5.3's DeprecatedAction raises with its help text (0.5.23 has none that do).
    plan = check_flags(eas("sglang", {"enable-ep-moe": True}), "lmsysorg/sglang:v0.5.3-cu129")
    assert len(plan.errors) == 1
    assert plan.errors[0].startswith("`enable-ep-moe` is refused by sglang 0.5.3: ")
    assert "deprecated" in plan.errors[0]
    removed = check_flags(eas("sglang", {"enable-ep-moe": True}), "lmsysorg/sglang:v0.5.23")
    assert "is not an option of sglang 0.5.23" in removed.errors[0]


# -- spellings and values --------------------------------------------------------------------


def test_flags_render_in_the_engines_own_spelling() -> None:
    # vLLM: underscores become the parser's dashes; a short alias stays as written.
    assert rendered("vllm", {"max_model_len": 4096, "tp": 2}) == [
        "--max-model-len",
        "4096",
        "-tp",
        "2",
    ]
    # SGLang's argparse takes dashes only: an underscored name is rendered dashed.
    assert rendered("sglang", {"context_length": 4096}) == ["--context-length", "4096"]


def test_objects_render_as_json() -> None:
    args = {"compilation-config": {"level": 3, "cudagraph_capture_sizes": [1, 2]}}
    assert rendered("vllm", args) == [
        "--compilation-config",
        '{"cudagraph_capture_sizes":[1,2],"level":3}',
    ]
    with pytest.raises(EngineArgsError, match="takes int values, not an object"):
        rendered("vllm", {"seed": {"a": 1}})


def test_lists_render_once_or_per_value_as_the_parser_takes_them() -> None:
    args = {"lora-modules": ["a=/x", "b=/y"], "middleware": ["m1", "m2"]}
    assert check_flags(eas("vllm", args), VLLM_032).argv == [
        "--lora-modules",
        "a=/x",
        "b=/y",
        "--middleware",
        "m1",
        "--middleware",
        "m2",
    ]
    assert "empty list" in check_flags(eas("vllm", {"lora-modules": []}), VLLM_032).errors[0]


def test_an_unambiguous_prefix_is_the_option_as_argparse_takes_it() -> None:
    plan = check_flags(eas("sglang", {"tp": 2}))
    assert plan.argv == ["--tp-size", "2"] and plan.errors == []
    assert plan.notes == [
        "`tp` is taken as `--tp-size` (sglang 0.5.23 accepts an unambiguous prefix of an option)"
    ]
    ambiguous = check_flags(eas("vllm", {"max-num": 8}), VLLM_032).errors
    assert ambiguous and ambiguous[0].startswith("`max-num` is ambiguous in vllm 0.32.0: ")
    assert "`--max-num-seqs`" in ambiguous[0] and "`--max-num-batched-tokens`" in ambiguous[0]


def test_click_takes_no_prefix() -> None:
    # trtllm-serve's options are click's: an abbreviation is an unknown option there.
    plan = check_flags(eas("trtllm", {"max_batch": 8}))
    assert plan.argv == ["--max_batch", "8"]
    assert "is not an option of trtllm 1.2.1" in plan.errors[0]
