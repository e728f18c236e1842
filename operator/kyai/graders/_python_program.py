"""A Python grader's or preprocessor's code, run in the sandbox through the harness.

The harness (``_python_child.py``) loads the code after the confinement starts and calls its
function; the code's model calls come back through :func:`_bridge_handler` to the run's
model bridge (``stream``, ``store`` and ``background`` removed), each one logged.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ._sandbox import BridgeHandler, SandboxLimits, SandboxResult, run_sandboxed
from ._types import ModelBridge

_HARNESS = Path(__file__).with_name("_python_child.py")

_REMOVED_REQUEST_KEYS = ("stream", "store", "background")


def _bridge_handler(bridge: ModelBridge | None, log: list[dict[str, Any]]) -> BridgeHandler:
    async def handle(method: str, params: dict[str, Any]) -> Any:
        entry: dict[str, Any] = {"method": method, "model": params.get("model", "auto")}
        log.append(entry)
        if bridge is None:
            entry["error"] = "no model bridge"
            raise RuntimeError(
                "This run gives graders no model access (no judge endpoint is configured)."
            )
        calls = {
            "responses_create": bridge.responses_create,
            "embeddings_create": bridge.embeddings_create,
        }
        call = calls.get(method)
        if call is None:
            entry["error"] = "unknown method"
            raise RuntimeError(f"Unknown model call {method!r}.")
        request = {k: v for k, v in params.items() if k not in _REMOVED_REQUEST_KEYS}
        try:
            response = await call(**request)
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            raise
        if isinstance(response, dict):
            entry["id"] = response.get("id")
        return response

    return handle


class _Program:
    """Resolved source plus the sandbox settings shared by graders and preprocessors."""

    def __init__(self, source: str, filename: str, limits: SandboxLimits) -> None:
        self.source = source
        self.filename = filename
        self.sha256 = hashlib.sha256(source.encode("utf-8")).hexdigest()
        self.limits = limits

    async def run(
        self,
        payload: dict[str, Any],
        *,
        bridge: BridgeHandler | None = None,
    ) -> SandboxResult:
        payload = {**payload, "source": self.source, "filename": self.filename}
        return await run_sandboxed(
            "run", payload, module_file=_HARNESS, limits=self.limits, bridge=bridge
        )
