"""The judges and the row preprocessing that ``kyai judge`` / ``kyai run``'s flags ask for."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from kyai.evaluation._usage import UsageError

if TYPE_CHECKING:
    from kyai.datasets import Dataset
    from kyai.evaluation import RetryPolicy
    from kyai.evaluation._grading import NamedJudge
    from kyai.evaluation._keyfile import KeyFile

__all__ = [
    "check_grader_preprocess_applied",
    "grader_preprocess",
    "judge_kinds",
    "judges",
    "preprocess",
]


def _declared_preprocess(path: Path) -> str | None:
    """The preprocess source's sha256 a ``--grader`` file declares, or None.

    Read errors are left to the grader's own loading, which names them.
    """
    from kyai.graders import GraderDeclarationError, PythonGrader

    try:
        grader = PythonGrader.from_file(path)
    except GraderDeclarationError:
        return None
    if grader.preprocessor is None:
        return None
    return str(grader.preprocessor.identity["source_sha256"])


def grader_preprocess(args: argparse.Namespace) -> Path | None:
    """The ``--grader`` file whose ``preprocess`` runs before generation, if any.

    A grader file's preprocess is part of the contract (seed 001): ``kyai run`` applies it
    to the rows before asking the candidate, as ``--preprocess`` would. Two grader files
    declaring one each is refused: the rows can be prepared only one way.
    """
    declaring = [
        path
        for path in getattr(args, "grader", None) or []
        if _declared_preprocess(path) is not None
    ]
    if len(declaring) > 1:
        names = ", ".join(str(path) for path in declaring)
        raise UsageError(
            f"--grader: {names} each declare a preprocess; the rows can be prepared only "
            "one way (keep one, or pass --preprocess FILE to choose)"
        )
    return declaring[0] if declaring else None


def check_grader_preprocess_applied(args: argparse.Namespace, generations: Path) -> None:
    """Refuse judging with a grader whose preprocess did not prepare the stored answers."""
    for path in getattr(args, "grader", None) or []:
        sha = _declared_preprocess(path)
        if sha is None:
            continue
        try:
            manifest = json.loads((generations / "run.json").read_text(encoding="utf-8"))
            source = str(manifest.get("dataset", {}).get("source", ""))
        except (OSError, ValueError, AttributeError):
            source = ""
        if f"preprocess {sha[:12]}" not in source:
            raise UsageError(
                f"--grader {path}: it declares a preprocess, which runs before generation, "
                f"but the answers in {generations} were not generated from rows it prepared; "
                f"generate with `kyai generate --preprocess {path}` (or use `kyai run`)"
            )


async def preprocess(dataset: Dataset, path: Path) -> Dataset:
    """The dataset with its rows run through a Python preprocessor (in the sandbox)."""
    import dataclasses

    from kyai.datasets import dataset_sha256
    from kyai.graders import GraderDeclarationError, PreprocessError, PythonPreprocessor

    try:
        declaration = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(declaration, dict) and "preprocess" not in declaration:
            declaration = (declaration.get("grader") or {}).get("preprocess", declaration)
        preprocessor = PythonPreprocessor.from_declaration(declaration, base_dir=path.parent)
        rows = await preprocessor.apply(dataset.rows)
    except (OSError, ValueError, GraderDeclarationError, PreprocessError) as exc:
        raise UsageError(f"--preprocess {path}: {exc}") from exc
    if not rows:
        raise UsageError(f"--preprocess {path}: the preprocessor kept no row")
    return dataclasses.replace(
        dataset,
        rows=rows,
        sha256=dataset_sha256(rows),
        source=f"{dataset.source} | preprocess {preprocessor.identity['source_sha256'][:12]}",
    )


def judge_kinds(args: argparse.Namespace) -> tuple[bool, bool]:
    """(an LLM judge is wanted, the builtin grader is wanted)."""
    kinds = list(args.judge or [])
    if not kinds and not args.grader:
        kinds = ["llm"]
    return "llm" in kinds, "builtin" in kinds


def judges(
    args: argparse.Namespace,
    generations_dir: Path,
    *,
    judge_key: str | KeyFile | None,
    judge_prompt: str | None,
    retry: RetryPolicy,
) -> list[NamedJudge]:
    """The judges the flags ask for, named llm, builtin and each grader file's stem."""
    from kyai.evaluation import JudgeConfig, RunDirectoryError
    from kyai.evaluation._grading import GraderJudge, NamedJudge
    from kyai.graders import (
        GraderDeclarationError,
        GraderUnavailableError,
        PythonGrader,
        builtin_grader,
    )

    llm, builtin = judge_kinds(args)
    graders: list[PythonGrader] = []
    for path in args.grader or []:
        try:
            graders.append(PythonGrader.from_file(path))
        except GraderDeclarationError as exc:
            raise UsageError(f"--grader {path}: {exc}") from exc
    endpoint_needed = llm or any(grader.model_access for grader in graders)
    config = None
    if endpoint_needed:
        if not args.judge_endpoint or not args.judge_model:
            what = "an LLM judge" if llm else "a model-backed grader"
            raise UsageError(f"--judge-endpoint and --judge-model are required for {what}")
        config = JudgeConfig(
            endpoint=args.judge_endpoint,
            model=args.judge_model,
            api_key=judge_key,
            prompt=judge_prompt,
            concurrency=args.concurrency,
            timeout_s=args.request_timeout,
            retry=retry,
        )
    names = dict(args.judge_name or [])
    judges: list[NamedJudge] = []
    if llm:
        judges.append(NamedJudge(names.get("llm", "llm"), llm=config))
    if builtin:
        try:
            manifest = json.loads((generations_dir / "run.json").read_text(encoding="utf-8"))
            dataset = str(manifest["dataset"]["name"])
            builtin_dataset = bool(manifest["dataset"].get("builtin"))
        except (OSError, ValueError, KeyError) as exc:
            raise RunDirectoryError(f"{generations_dir} has no readable run.json: {exc}") from exc
        try:
            grader = builtin_grader(dataset if builtin_dataset else None)
        except GraderUnavailableError as exc:
            raise UsageError(f"--judge builtin: {exc}") from exc
        judges.append(
            NamedJudge(
                names.get("builtin", "builtin"),
                grader=GraderJudge(grader, "builtin", concurrency=2),
            )
        )
    for path, grader in zip(args.grader or [], graders, strict=True):
        name = path.stem
        if name in {judge.name for judge in judges}:
            name = f"python-{name}"
        judges.append(
            NamedJudge(
                name,
                grader=GraderJudge(
                    grader,
                    "python",
                    bridge_endpoint=config if grader.model_access else None,
                    embedding_model=args.embedding_model,
                    concurrency=min(args.concurrency, 4),
                ),
            )
        )
    return judges
