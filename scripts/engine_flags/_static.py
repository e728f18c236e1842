"""Reading a module's literals without importing it (the static extractors share this).

:class:`StaticModule` holds a source's module-level constants; :meth:`StaticModule.evaluate`
gives the value of an expression made of literals, those constants, lists, dicts, sums and
products, ``list()``/``tuple()``/``sorted()`` and ``.keys()`` of them, or raises
:class:`Unreadable`. A reader subclasses it and resolves more names in :meth:`resolve`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any


class Unreadable(Exception):
    """An expression that cannot be evaluated statically."""


class StaticModule:
    """A module's source, parsed, with its module-level ``NAME = expression`` constants."""

    def __init__(self, source: str) -> None:
        self.tree = ast.parse(source)
        self.constants: dict[str, ast.expr] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.constants[target.id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.constants[node.target.id] = node.value

    def resolve(self, node: ast.expr, depth: int) -> Any:
        """A value for an expression :meth:`evaluate` does not know (raise Unreadable)."""
        raise Unreadable(ast.unparse(node))

    def evaluate(self, node: ast.expr, depth: int = 0) -> Any:
        """The value of ``node`` (see the module docstring)."""
        if depth > 20:
            raise Unreadable(ast.unparse(node))
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return [self.evaluate(item, depth + 1) for item in node.elts]
        if isinstance(node, ast.Set):
            return {self.evaluate(item, depth + 1) for item in node.elts}
        if isinstance(node, ast.Dict):
            return {
                self.evaluate(key, depth + 1): self.evaluate(value, depth + 1)
                for key, value in zip(node.keys, node.values, strict=True)
                if key is not None
            }
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.evaluate(node.operand, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = self.evaluate(node.left, depth + 1), self.evaluate(node.right, depth + 1)
            return left + right if isinstance(node.op, ast.Add) else left * right
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.evaluate(self.constants[node.id], depth + 1)
        if isinstance(node, ast.Call) and not node.keywords and len(node.args) <= 1:
            function = node.func
            if isinstance(function, ast.Name) and function.id in ("list", "tuple", "sorted"):
                if len(node.args) == 1:
                    return list(self.evaluate(node.args[0], depth + 1))
            if isinstance(function, ast.Attribute) and function.attr == "keys" and not node.args:
                return list(self.evaluate(function.value, depth + 1))
        return self.resolve(node, depth)

    def keywords(self, call: ast.Call) -> Callable[..., Any]:
        """``value(name, missing=None)``: a call's keyword argument, evaluated.

        None when it cannot be read statically, ``missing`` when the call does not give it.
        """
        given = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}

        def value(name: str, missing: Any = None) -> Any:
            if name not in given:
                return missing
            try:
                return self.evaluate(given[name])
            except Unreadable:
                return None

        return value
