"""Python preprocessors: ``transform(row)`` / ``transform_batch(rows)`` in the sandbox.

They run on a dataset's rows before the prompts are rendered; what they return becomes the
rows (see :mod:`kyai.graders._python`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kyai.datasets import Row

from ._python_declaration import (
    _VERSION,
    GraderDeclarationError,
    PreprocessDeclaration,
    PreprocessError,
    _read_source,
    _require,
    _top_level_names,
    _validation_message,
)
from ._python_program import _Program
from ._python_rows import _describe, _row_fields, _row_from_dict
from ._sandbox import SandboxLimits


class PythonPreprocessor:
    """``transform(row)`` / ``transform_batch(rows)`` in the sandbox, before prompts render."""

    def __init__(self, declaration: PreprocessDeclaration, program: _Program) -> None:
        self.declaration = declaration
        self._program = program

    @classmethod
    def from_declaration(
        cls,
        decl: Mapping[str, Any] | PreprocessDeclaration,
        *,
        base_dir: str | Path | None = None,
        limits: SandboxLimits | None = None,
    ) -> PythonPreprocessor:
        """Build from ``{"preprocess": {...}}`` or the inner object (see the module docs)."""
        if isinstance(decl, PreprocessDeclaration):
            declaration = decl
        else:
            inner = decl.get("preprocess", decl) if isinstance(decl, Mapping) else decl
            try:
                declaration = PreprocessDeclaration.model_validate(inner)
            except ValidationError as exc:
                raise GraderDeclarationError(_validation_message(exc, "preprocess")) from exc
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        source, filename = _read_source(declaration.source, declaration.file, base, "preprocess")
        function = "transform" if declaration.contract == "sample" else "transform_batch"
        names = _top_level_names(source, filename, "preprocess")
        _require(names, function, "preprocess", f"contract {declaration.contract!r}")
        sandbox = replace(
            limits or SandboxLimits(), timeout_seconds=declaration.timeout_seconds, max_calls=0
        )
        return cls(declaration, _Program(source, filename, sandbox))

    @property
    def identity(self) -> Mapping[str, Any]:
        """What changes the prepared rows."""
        return {
            "type": "python",
            "version": _VERSION,
            "contract": self.declaration.contract,
            "timeout_seconds": self.declaration.timeout_seconds,
            "source_sha256": self._program.sha256,
        }

    async def apply(self, rows: Sequence[Row]) -> tuple[Row, ...]:
        """Run the preprocessor over ``rows``; the rows it returns, re-indexed in order.

        Raises :class:`PreprocessError` when the code fails or returns something that is not
        a row (a dict with string ``instruction`` and ``ground_truth_response``).
        """
        mode = "transform" if self.declaration.contract == "sample" else "transform_batch"
        payload = {"mode": mode, "rows": [_row_fields(row) for row in rows]}
        result = await self._program.run(payload)
        if not result.ok:
            detail = f"\n{result.traceback}" if result.traceback else ""
            raise PreprocessError(
                f"The Python preprocessor failed ({result.error_kind}): {result.message}{detail}"
            )
        value = result.value
        if not isinstance(value, list):
            raise PreprocessError(
                f"The preprocessor returned {_describe(value)}; {mode} must return "
                + ("the row (a dict)." if mode == "transform" else "a list of rows (dicts).")
            )
        return tuple(
            _row_from_dict(data, position, rows, mode) for position, data in enumerate(value)
        )
