"""Python graders inside the sandbox: load the user's source and call its contract function.

Loaded by the sandbox child as a trusted harness (standard library only, never ``kyai``);
:func:`run` is its entry point. The parent (:mod:`kyai.graders._python`) validates whatever
comes back; this side only calls the function and returns its raw value.

Modes (``payload["mode"]``): ``grade`` (``grade(sample, item[, ctx])``), ``grade_batch``
(``grade_batch(samples[, ctx])``), ``transform`` (``transform(row)`` for every row, in one
process) and ``transform_batch`` (``transform_batch(rows)``).
"""

from __future__ import annotations

import builtins
import inspect
import linecache
from collections.abc import Callable
from typing import Any


class ModelAccessError(RuntimeError):
    """``ctx.responses_create`` / ``ctx.embeddings_create`` without model access."""


class ModelCallError(RuntimeError):
    """A model call made through ``ctx`` failed or was refused (e.g. ``max_model_calls``)."""


class GraderContext:
    """The ``ctx`` a grader receives: model calls routed through the parent."""

    def __init__(self, host: Any, *, model_access: bool, max_model_calls: int) -> None:
        self._host = host
        self._model_access = model_access
        #: The most model calls this grader execution may make.
        self.max_model_calls = max_model_calls

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        if not self._model_access:
            raise ModelAccessError(
                f"ctx.{method} needs model access: declare contract 'model_backed' "
                "(or model_access 'mka1') and give the run a judge model."
            )
        try:
            return self._host.call(method, kwargs)
        except RuntimeError as exc:
            raise ModelCallError(str(exc)) from None

    def responses_create(self, **kwargs: Any) -> Any:
        """An OpenAI Responses request (``model="auto"`` or none: the run's judge model)."""
        return self._call("responses_create", kwargs)

    def embeddings_create(self, **kwargs: Any) -> Any:
        """An OpenAI Embeddings request (``model="auto"`` or none: the run's embedding model)."""
        return self._call("embeddings_create", kwargs)


def _accepts(fn: Callable[..., Any], count: int) -> bool:
    """Whether ``fn`` takes ``count`` positional arguments."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            positional += 1
    return positional >= count


def _load(source: str, filename: str) -> dict[str, Any]:
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    namespace: dict[str, Any] = {
        "__name__": "__grader__",
        "__file__": filename,
        "__builtins__": builtins,
    }
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def _function(namespace: dict[str, Any], name: str) -> Callable[..., Any]:
    fn = namespace.get(name)
    if not callable(fn):
        raise NameError(f"The grader source defines no function {name!r}.")
    return fn  # type: ignore[no-any-return]


def run(payload: dict[str, Any], host: Any) -> Any:
    """Call the contract function ``payload["mode"]`` names; return its raw value."""
    mode = str(payload["mode"])
    namespace = _load(str(payload["source"]), str(payload.get("filename") or "<grader>"))
    ctx = GraderContext(
        host,
        model_access=bool(payload.get("model_access")),
        max_model_calls=int(payload.get("max_model_calls") or 0),
    )
    if mode == "grade":
        fn = _function(namespace, "grade")
        args: tuple[Any, ...] = (payload["sample"], payload["item"])
        return fn(*args, ctx) if _accepts(fn, 3) else fn(*args)
    if mode == "grade_batch":
        fn = _function(namespace, "grade_batch")
        samples = payload["samples"]
        return fn(samples, ctx) if _accepts(fn, 2) else fn(samples)
    if mode == "transform":
        fn = _function(namespace, "transform")
        return [fn(row) for row in payload["rows"]]
    if mode == "transform_batch":
        fn = _function(namespace, "transform_batch")
        return fn(payload["rows"])
    raise ValueError(f"Unknown grader mode {mode!r}.")
