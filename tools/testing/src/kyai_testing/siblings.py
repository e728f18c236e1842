"""Test modules that share another test module's fixtures.

The suite imports test modules with ``--import-mode=importlib``, which puts no test directory
on ``sys.path``: a module reusing the fixtures of a module beside it loads that module with
:func:`sibling`, once per process (the same module object as pytest's own import).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def sibling(test_file: str, name: str) -> ModuleType:
    """The test module ``name`` in the directory of ``test_file`` (a module's ``__file__``)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(test_file).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
