"""A trusted harness for the sandbox tests: makes bridge calls and reports each outcome."""

from typing import Any


def run(payload: dict[str, Any], host: Any) -> list[Any]:
    outcomes: list[Any] = []
    for number in range(payload["calls"]):
        try:
            outcomes.append({"ok": host.call(payload["method"], {"n": number})})
        except RuntimeError as exc:
            outcomes.append({"error": str(exc)})
    return outcomes
