"""Python grader and preprocessor declarations: the seed's fields, checked, and their source.

A declaration names its code inline (``source``) or as a file relative to the declaration
(``file``; the seed's ``file_id`` names an upload KYAI does not have). The source must
compile and define the function its contract calls.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_VERSION = "1"

_INLINE_FILENAME = "<grader>"


class GraderDeclarationError(ValueError):
    """A grader or preprocessor declaration is invalid; the message names the field."""


class PreprocessError(RuntimeError):
    """A preprocessor failed; the rows cannot be prepared."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_file_id(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "file_id" in data:
            raise ValueError(
                "'file_id' names an uploaded file, which KYAI does not have: give 'file' (a "
                "path relative to the declaration) or 'source' instead."
            )
        return data


class _Sourced(_Strict):
    @model_validator(mode="after")
    def _one_source(self) -> Any:
        source = getattr(self, "source", None)
        file = getattr(self, "file", None)
        if (source is None) == (file is None):
            raise ValueError("Give exactly one of 'source' and 'file'.")
        return self


class PreprocessDeclaration(_Sourced):
    """A Python preprocessor: ``transform(row)`` (sample) or ``transform_batch(rows)``."""

    type: Literal["python"]
    #: ``sample`` calls ``transform(row)`` for each row; ``batch`` calls
    #: ``transform_batch(rows)`` once.
    contract: Literal["sample", "batch"] = "sample"
    #: Inline Python source.
    source: str | None = None
    #: A Python file, relative to the declaration's directory (``base_dir``).
    file: str | None = None
    #: Sandbox time limit for the whole preprocessing, 1 to 600 s.
    timeout_seconds: int = Field(default=120, ge=1, le=600)


class GraderDeclaration(_Sourced):
    """The seed's Python grader declaration (with ``file`` instead of ``file_id``)."""

    type: Literal["python"]
    #: ``sample``, ``batch`` or ``model_backed``.
    contract: Literal["sample", "batch", "model_backed"] = "sample"
    #: ``per_sample`` (``grade``) or ``aggregate`` (``grade_batch``); by default ``sample`` →
    #: per_sample, ``batch`` → aggregate, ``model_backed`` → per_sample when the source
    #: defines ``grade``, else aggregate.
    execution: Literal["per_sample", "aggregate"] | None = None
    #: ``mka1`` enables ``ctx.responses_create`` / ``ctx.embeddings_create``; the default is
    #: ``mka1`` for ``model_backed``, ``none`` otherwise.
    model_access: Literal["mka1", "none"] | None = None
    #: Score key for a grader that returns a single number.
    metric_id: str = Field(default="score", min_length=1)
    #: Inline Python source.
    source: str | None = None
    #: A Python file, relative to the declaration's directory (``base_dir``).
    file: str | None = None
    #: Sandbox time limit per execution (per row for per_sample), 1 to 600 s.
    timeout_seconds: int = Field(default=120, ge=1, le=600)
    #: Model calls allowed per execution, 0 to 500.
    max_model_calls: int = Field(default=64, ge=0, le=500)
    #: Declared metric ids; batch metrics outside them are dropped.
    metrics: tuple[str, ...] | None = None
    #: An optional preprocessor (may also sit beside ``grader``).
    preprocess: PreprocessDeclaration | None = None


class _Envelope(_Strict):
    grader: GraderDeclaration
    preprocess: PreprocessDeclaration | None = None


def _validation_message(exc: ValidationError, prefix: str) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "Invalid Python grader declaration: " + "; ".join(parts)


def _read_source(
    source: str | None, file: str | None, base_dir: Path, where: str
) -> tuple[str, str]:
    """The source text and the filename tracebacks show."""
    if source is not None:
        return source, _INLINE_FILENAME
    assert file is not None
    path = Path(file)
    if not path.is_absolute():
        path = base_dir / path
    try:
        return path.read_text(encoding="utf-8"), path.name
    except (OSError, UnicodeDecodeError) as exc:
        raise GraderDeclarationError(f"{where}.file: cannot read {str(path)!r}: {exc}") from exc


def _top_level_names(source: str, filename: str, where: str) -> set[str]:
    try:
        tree = ast.parse(source, filename=filename)
    except (SyntaxError, ValueError) as exc:
        raise GraderDeclarationError(
            f"{where}: the Python source does not compile: {type(exc).__name__}: {exc}"
        ) from exc
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _require(names: set[str], function: str, where: str, why: str) -> None:
    if function not in names:
        raise GraderDeclarationError(
            f"{where}: the source defines no top-level function {function!r}, which {why} needs."
        )


def _parse_declaration(
    decl: Mapping[str, Any],
) -> tuple[GraderDeclaration, PreprocessDeclaration | None]:
    """(the grader declaration, a preprocess declaration beside it or None)."""
    # An object with a "grader" key, or with a "preprocess" key but no "type", is an envelope.
    envelope = "grader" in decl or ("preprocess" in decl and "type" not in decl)
    try:
        if envelope:
            parsed = _Envelope.model_validate(decl)
            return parsed.grader, parsed.preprocess
        return GraderDeclaration.model_validate(decl), None
    except ValidationError as exc:
        raise GraderDeclarationError(
            _validation_message(exc, "" if envelope else "grader")
        ) from exc


def _model_access(declaration: GraderDeclaration) -> bool:
    """``model_access``, defaulting to ``mka1`` for ``model_backed`` and ``none`` otherwise."""
    if declaration.model_access is not None:
        return declaration.model_access == "mka1"
    return declaration.contract == "model_backed"


def _default_execution(contract: str, names: set[str]) -> Literal["per_sample", "aggregate"]:
    if contract == "sample":
        return "per_sample"
    if contract == "batch":
        return "aggregate"
    return "per_sample" if "grade" in names or "grade_batch" not in names else "aggregate"
