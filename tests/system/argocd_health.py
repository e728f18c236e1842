"""Argo CD's health checks of the six kinds, run with a real Lua runtime (lupa).

Argo CD runs ``health.lua`` with gopher-lua (Lua 5.1) and ``obj`` set to the object; the
script returns a table with ``status`` and ``message``. lupa embeds the reference Lua, which
runs the same script; the checks use only Lua 5.1's base library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CUSTOMIZATIONS = ROOT / "config" / "argocd" / "resource_customizations" / "kyai.io"
KINDS = (
    "EvaluationRun",
    "Workload",
    "Snapshot",
    "EngineArgsSet",
    "EvaluationSweep",
    "EvaluationSchedule",
)


def _to_lua(runtime: Any, value: Any) -> Any:
    """A Python JSON value as Lua tables (lists 1-based, as Argo CD's conversion does)."""
    if isinstance(value, dict):
        return runtime.table_from({key: _to_lua(runtime, item) for key, item in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, item) for item in value])
    return value


def health(obj: dict[str, Any], script: str | None = None) -> dict[str, str]:
    """The health Argo CD computes for ``obj`` (``status`` and ``message``).

    ``script`` defaults to the kind's ``health.lua`` under ``config/argocd``.
    """
    from lupa import LuaRuntime  # type: ignore[import-untyped]

    if script is None:
        script = (CUSTOMIZATIONS / obj["kind"] / "health.lua").read_text()
    runtime = LuaRuntime(unpack_returned_tuples=False)
    runtime.globals().obj = _to_lua(runtime, obj)
    result = runtime.execute(script)
    return {"status": str(result["status"]), "message": str(result["message"] or "")}


def expected_cases(kind: str) -> list[tuple[Path, dict[str, str]]]:
    """(input file, expected health) of every entry of a kind's ``health_test.yaml``."""
    folder = CUSTOMIZATIONS / kind
    tests = yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]
    return [(folder / case["inputPath"], dict(case["healthStatus"])) for case in tests]
