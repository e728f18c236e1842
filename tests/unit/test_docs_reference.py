"""The docs site's generated reference pages hold every field, command, flag and metric.

scripts/docs_reference.py is the MkDocs hook that writes them at build time; these tests read
its pages without MkDocs and hold them against the code they come from.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

from kyai.api import (
    EngineArgsSetSpec,
    EngineArgsSetStatus,
    EvaluationRunSpec,
    EvaluationRunStatus,
    EvaluationSweepSpec,
    EvaluationSweepStatus,
    SnapshotSpec,
    SnapshotStatus,
    WorkloadSpec,
    WorkloadStatus,
)
from kyai.cli import COMMANDS, build_parser
from kyai.metrics import RunMetrics

ROOT = Path(__file__).resolve().parents[2]


def load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_reference", ROOT / "scripts" / "docs_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_reference", module)
    spec.loader.exec_module(module)
    return module


hook = load_hook()


@pytest.fixture(scope="module")
def crd_page() -> str:
    return str(hook.crd_page())


@pytest.fixture(scope="module")
def cli_page() -> str:
    return str(hook.cli_page())


@pytest.fixture(scope="module")
def metrics_page() -> str:
    return str(hook.metrics_page())


def row(page: str, first_cell: str) -> str:
    """The table row whose first cell is ``first_cell`` (a code span)."""
    found = [line for line in page.splitlines() if line.startswith(f"| `{first_cell}` |")]
    assert len(found) >= 1, f"no row for {first_cell}"
    return found[0]


def section(page: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = page.index(f"\n{heading}\n")
    following = re.search(rf"\n#{{1,{len(level)}}} ", page[start + len(heading) + 2 :])
    end = start + len(heading) + 2 + following.start() if following else len(page)
    return page[start:end]


MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "EngineArgsSet": (EngineArgsSetSpec, EngineArgsSetStatus),
    "Workload": (WorkloadSpec, WorkloadStatus),
    "Snapshot": (SnapshotSpec, SnapshotStatus),
    "EvaluationRun": (EvaluationRunSpec, EvaluationRunStatus),
    "EvaluationSweep": (EvaluationSweepSpec, EvaluationSweepStatus),
}


@pytest.mark.parametrize("kind", MODELS)
def test_every_top_level_field_of_the_models_has_a_row_with_its_description(
    kind: str, crd_page: str
) -> None:
    for part, model in zip(("spec", "status"), MODELS[kind], strict=True):
        table = section(crd_page, f"### {kind} {part}")
        for name, prop in model.model_json_schema(by_alias=True)["properties"].items():
            line = row(table, f"{part}.{name}")
            described = " ".join(str(prop.get("description", "")).split()).replace("``", "`")
            words = described.split()[:6]
            assert " ".join(words).replace("<", "&lt;").replace(">", "&gt;") in line or not words, (
                kind,
                name,
                line,
            )


def test_nested_fields_carry_type_bounds_default_and_required(crd_page: str) -> None:
    margin = row(crd_page, "spec.thresholds.nonInferiority.margin")
    assert "| number (required; ≥ 0; ≤ 1) |" in margin
    assert "The margin M in score units" in margin
    parallelism = row(section(crd_page, "### EvaluationSweep spec"), "spec.parallelism")
    assert "| integer (≥ 1; ≤ 1000) | `1` |" in parallelism
    env_value = row(section(crd_page, "### EngineArgsSet spec"), "spec.env[].value")
    assert '| `""` |' in env_value
    framework = row(section(crd_page, "### EngineArgsSet spec"), "spec.framework")
    assert 'one of `"vllm"`, `"sglang"`, `"trtllm"`' in framework


def test_prose_that_looks_like_html_stays_visible() -> None:
    assert (
        hook._text("named <run>-worker, `code <kept>`") == "named &lt;run&gt;-worker, `code <kept>`"
    )
    assert hook._text("a | b ``x``") == "a \\| b `x`"


def test_every_command_and_every_flag_is_on_the_cli_page(cli_page: str) -> None:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(COMMANDS) <= set(commands.choices)
    for name, command in commands.choices.items():
        text = section(cli_page, f"## kyai {name}")
        for action in command._actions:
            if action.help is argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                assert f"`{option}`" in text, (name, option)
        assert "exit status:" in text, name  # each command's statuses, from its epilog


def test_a_command_s_flags_show_their_values_and_defaults(cli_page: str) -> None:
    compare = section(cli_page, "## kyai compare")
    assert "`--non-inferiority`" in compare and "`--alpha`" in compare
    assert re.search(r"\|\s*4\s+", compare) is None  # statuses are a code block, not a table
    assert "  4    " in compare  # 4: the gate failed, as `kyai compare --help` says
    order = [cli_page.index(f"\n## kyai {name}\n") for name in COMMANDS]
    assert order == sorted(order)  # kyai --help's order


def test_every_metric_family_is_on_the_metrics_page_with_its_labels(metrics_page: str) -> None:
    operator = section(metrics_page, "## The operator's /metrics")
    for family in RunMetrics().registry.collect():
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert f"| `{name}` | {family.type} |" in operator, name
    assert "`kind`, `result`" in row(operator, "kyai_operator_reconcile_total")
    assert "`phase`" in row(operator, "kyai_sweep_cells")
    assert "`quantile`" in row(operator, "kyai_evaluation_ttft_seconds")
    assert "`comparison_key`, `bound`" in row(operator, "kyai_evaluation_score_interval")
    assert "| gauge |" in row(operator, "kyai_operator_leader")
    gateway = section(metrics_page, "## The judge gateway's /metrics")
    assert "`namespace`, `kind`" in row(gateway, "kyai_judge_gateway_tokens_total")
    assert "`code`" in row(gateway, "kyai_judge_gateway_upstream_refusals_total")


def test_the_hook_adds_the_pages_and_refuses_a_committed_copy() -> None:
    from mkdocs.config import load_config
    from mkdocs.structure.files import File, Files

    config = load_config(str(ROOT / "mkdocs.yml"))  # the site's own, hooks: names the script
    assert any(name.endswith("docs_reference.py") for name in config.plugins)
    files = config.plugins.on_files(Files([]), config=config)  # as `mkdocs build` calls it
    assert sorted(file.src_uri for file in files) == sorted(hook.GENERATORS)
    assert all(file.generated_by and file.content_string.startswith("# ") for file in files)
    committed = Files([File("reference/cli.md", str(ROOT / "docs"), "/nowhere", False)])
    with pytest.raises(ValueError, match=r"docs/reference/cli.md exists in Git"):
        config.plugins.on_files(committed, config=config)


def test_every_option_of_every_table_is_on_the_engine_flags_page() -> None:
    from kyai.engines import ENGINES, engine_tables

    page = str(hook.engine_flags_page())
    for name in ENGINES:
        for table in engine_tables(name):
            part = section(page, f"## {name} {table.version}")
            for flag in table.flags:
                assert f"| `{flag.option}` |" in part, (name, table.version, flag.option)
    vllm = section(page, "## vllm 0.32.0")
    assert "switch; off: `--no-enable-prefix-caching`" in row(vllm, "--enable-prefix-caching")
    assert "one of: `auto`, `bfloat16`" in row(vllm, "--dtype")
    assert "| `-tp` |" in row(vllm, "--tensor-parallel-size")
    assert "vllm/vllm-openai:v0.34.0" in page
