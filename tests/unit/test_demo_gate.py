"""``make demo`` ends with each gated run's verdict, read from its Passed condition."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo_operator.py"


@pytest.fixture(scope="module")
def demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_operator", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(score: float, passed: str | None, message: str = "") -> dict[str, Any]:
    conditions = [] if passed is None else [
        {"type": "Passed", "status": passed, "reason": "R", "message": message}
    ]  # fmt: skip
    return {
        "spec": {"thresholds": {"avgScore": 0.9}},
        "status": {"avgScore": score, "conditions": [{"type": "Ready"}, *conditions]},
    }


def test_a_missed_gate_says_what_was_missed(demo: ModuleType) -> None:
    verdict = demo.gate(run(0.666667, "False", "avgScore 0.6667 < 0.9"))
    assert verdict == "gate: failed (avgScore 0.6667 < 0.9)"


def test_a_met_gate_shows_its_figures(demo: ModuleType) -> None:
    verdict = demo.gate(run(0.933333, "True", "every threshold is met"))
    assert verdict == "gate: passed (avgScore 0.9333 ≥ 0.9: every threshold is met)"


def test_a_run_without_a_gate_has_no_verdict(demo: ModuleType) -> None:
    assert demo.gate(run(0.5, None)) is None
