"""Packages whose public names load on first use (PEP 562), so importing one costs nothing.

A package ``__init__`` keeps its public surface (``__all__``, and the same imports under
``TYPE_CHECKING`` for type checkers) but imports a submodule only when one of its names is
first read::

    __getattr__, __dir__ = lazy_exports(__name__, {
        "._client": ("ChatClient", "ChatError"),
        "._judge": ("judge",),
    })

``kyai --help`` and every worker Job then pay only for the modules their command runs.
``tests/unit/test_lazy_packages.py`` checks that the table, ``__all__`` and the
``TYPE_CHECKING`` imports of each such package name the same things.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names live in submodules.

    ``modules`` maps a submodule (relative to ``package``, e.g. ``"._client"``) to the names
    it provides. A name is imported once, then kept in the package's namespace.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
