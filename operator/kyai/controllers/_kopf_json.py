"""kopf's watch streams parsed with orjson instead of the standard library's ``json``.

kopf parses every line of every watch stream with ``json.loads`` (``kopf._cogs.clients.api``
offers no hook for it): at 1,000 runs, that was a tenth of the operator's CPU, most of what
kopf's watchers cost. :func:`install` points that module's ``json`` at a stand-in whose
``loads`` is :func:`kyai._json.loads` (orjson, falling back to ``json`` for what orjson
refuses, with ``json``'s exceptions) and whose every other attribute is ``json``'s own.

A kopf without that module attribute is left as it is (the operator works the same, only
slower): :func:`install` says whether it took.
"""

from __future__ import annotations

import importlib
import json
from types import ModuleType
from typing import Any

from kyai import _json

#: The kopf module whose ``json`` is replaced.
KOPF_API_MODULE = "kopf._cogs.clients.api"


class FastJson:
    """The ``json`` module, but for ``loads`` without options: orjson."""

    def __init__(self, real: ModuleType) -> None:
        self.real = real

    def loads(self, text: str | bytes, **options: Any) -> Any:
        """``json.loads``; through orjson when no option is given."""
        if options:
            return self.real.loads(text, **options)
        return _json.loads(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def install() -> bool:
    """Make kopf's watch streams parse with orjson; True when kopf's module allowed it."""
    try:
        module = importlib.import_module(KOPF_API_MODULE)
    except ImportError:
        return False
    current = getattr(module, "json", None)
    if isinstance(current, FastJson):
        return True
    if current is not json:
        return False
    module.json = FastJson(json)  # type: ignore[attr-defined]
    return True
