"""The real-engine tier (``make test-engines``): see conftest.py.

The devcluster tests here reuse the system tests' kubectl and operator helpers
(``system.helpers``): ``tests/system`` is made importable as ``system`` first, as pytest
does when it collects it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _tests_package(name: str) -> None:
    if name in sys.modules:
        return
    folder = Path(__file__).resolve().parents[1] / name
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_tests_package("system")
