"""The docs site's table of the operator's settings is generated from the model and kept current.

The table sits in docs/reference/settings.md (it was README.md's until the docs site).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kyai.engines import ENGINES
from kyai.settings import (
    TABLE_BEGIN,
    TABLE_END,
    OperatorSettings,
    settings_table,
    with_settings_table,
)

ROOT = Path(__file__).resolve().parents[2]
#: The page that holds the table, between the markers (``make crds`` rewrites it).
PAGE = ROOT / "docs" / "reference" / "settings.md"


def rows() -> dict[str, tuple[str, str]]:
    found = re.findall(r"^\| `(KYAI_\w+)` \| `(.*?)` \| (.*) \|$", settings_table(), re.M)
    return {variable: (default, meaning) for variable, default, meaning in found}


def test_the_settings_page_table_is_current() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert with_settings_table(text) == text, f"{PAGE}'s settings table is stale: run `make crds`"


def test_make_crds_rewrites_the_page_that_holds_the_table() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-m kyai.settings docs/reference/settings.md" in makefile
    assert TABLE_BEGIN not in (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_setting_has_a_row_with_its_default_and_meaning() -> None:
    table = rows()
    expected = {f"KYAI_{name.upper()}" for name in OperatorSettings.model_fields}
    expected -= {"KYAI_ENGINE_IMAGES"}  # one variable per engine instead
    expected |= {f"KYAI_{name.upper()}_IMAGE" for name in ENGINES}
    assert set(table) == expected
    assert all(meaning.strip() for _, meaning in table.values())
    assert table["KYAI_METRICS_PORT"] == ("8080", "Port of /metrics (0: not served).")
    assert table["KYAI_HEALTH_PORT"][0] == "8081"
    assert table["KYAI_DEFAULT_JUDGE_ENDPOINT"][0] == "none"
    assert table["KYAI_WORKER_IMAGE"][0] == "ghcr.io/kyai-io/kyai-operator:<kyai version>"


def test_every_variable_of_the_table_is_read() -> None:
    # The names are those from_env reads: set each one, and the setting changes.
    settings = OperatorSettings.from_env({"KYAI_METRICS_PORT": "9090", "KYAI_VLLM_IMAGE": "v:1"})
    assert settings.metrics_port == 9090 and settings.engine_image("vllm") == "v:1"


def test_the_markers_are_required_and_the_command_rewrites_the_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="markers"):
        with_settings_table("no table here")
    target = tmp_path / "doc.md"
    target.write_text(f"before\n{TABLE_BEGIN}\nold rows\n{TABLE_END}\nafter\n")
    subprocess.run([sys.executable, "-m", "kyai.settings", str(target)], check=True)
    assert target.read_text() == f"before\n{TABLE_BEGIN}\n{settings_table()}\n{TABLE_END}\nafter\n"
