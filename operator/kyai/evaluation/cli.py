"""``kyai generate``, ``kyai judge`` and ``kyai run``: the engine on the command line.

Exit status (:mod:`kyai._exitcodes`): 0 when the run completed (whatever the score), 1 for
an unexpected failure, 2 for bad input (flags, URLs, paths, dataset files, run directories), 3
when a server cannot be reached or cannot answer a single request (unknown model, 404, HTML,
refused credentials), 130 when interrupted (what was stored is kept). No traceback reaches
the user unless ``--debug`` is given. API keys are read from the environment variable a flag
names, never from a flag's value, and are redacted from everything printed or stored.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kyai._exitcodes import (
    EXIT_FAILURE,
    EXIT_GATE_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from kyai.evaluation._gates import add_gate_flags, gate_failures

if TYPE_CHECKING:
    from kyai.datasets import Dataset
    from kyai.evaluation import RetryPolicy
    from kyai.evaluation._grading import NamedJudge
    from kyai.evaluation._report import StatusReporter

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE"]

#: Environment variable of the HuggingFace token (datasets downloads); redacted like API keys.
HF_TOKEN_ENV = "HF_TOKEN"


class UsageError(Exception):
    """A flag's value cannot be used; the message names the flag."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def _add_candidate_flags(parser: argparse.ArgumentParser) -> None:
    from kyai.datasets import builtin_names

    group = parser.add_argument_group("candidate")
    group.add_argument(
        "--endpoint",
        required=True,
        metavar="URL",
        help="the candidate's OpenAI-compatible base URL (with or without /v1)",
    )
    group.add_argument(
        "--model", required=True, metavar="NAME", help="the served model name to ask for"
    )
    group.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the candidate's API key, if it needs one",
    )
    group.add_argument(
        "--model-config",
        type=Path,
        metavar="PATH",
        help="the model's HuggingFace config.json (or its folder): the context "
        "window when the server does not report max_model_len",
    )
    group.add_argument(
        "--context-window",
        type=_positive_int,
        metavar="TOKENS",
        help="the model's context window when the server does not report max_model_len and no "
        "--model-config is given (default 8192); the server's own figure always wins",
    )
    group.add_argument(
        "--retry-errors",
        action="store_true",
        help="when resuming, ask again for rows whose stored answer is an error",
    )
    data = parser.add_argument_group("dataset (one of --dataset, --snapshot)")
    source = data.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--snapshot",
        type=Path,
        metavar="DIR",
        help="a resolved snapshot folder (snapshot.json + rows), as the operator mounts "
        "it from a Snapshot's ConfigMap",
    )
    source.add_argument(
        "--dataset",
        metavar="NAME_OR_FILE",
        help=f"a built-in dataset name ({', '.join(builtin_names())}) or a custom JSONL/CSV file",
    )
    data.add_argument(
        "--dataset-file",
        type=Path,
        metavar="FILE",
        help="a built-in dataset's rows in its native schema (JSONL, JSON, CSV or "
        "Parquet) instead of downloading them from HuggingFace",
    )
    data.add_argument(
        "--hf-revision",
        metavar="REV",
        help="HuggingFace revision (commit) to download a built-in dataset from",
    )
    data.add_argument(
        "--preprocess",
        type=Path,
        metavar="FILE",
        help='a Python preprocessor declaration (JSON: {"preprocess": {"type": "python", ...}}) '
        "run over the rows before the prompts are sent; changes the dataset's sha256",
    )
    data.add_argument(
        "--generation-prompt",
        metavar="TEXT|@FILE",
        help="generation system prompt (required for custom datasets; overrides "
        "a built-in's, which changes the comparison key)",
    )


def _judge_name(text: str) -> tuple[str, str]:
    kind, _, name = text.partition("=")
    if kind not in ("llm", "builtin") or not name:
        raise argparse.ArgumentTypeError(f"expected llm=NAME or builtin=NAME, got {text!r}")
    return kind, name


def _add_judge_flags(parser: argparse.ArgumentParser, *, prompt: bool = True) -> None:
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--judge",
        action="append",
        choices=("llm", "builtin"),
        metavar="KIND",
        help="llm (an LLM judge, the default) or builtin (the dataset's deterministic grader); "
        "repeat, or add --grader, for several judges on the same answers",
    )
    group.add_argument(
        "--judge-name",
        action="append",
        type=_judge_name,
        metavar="KIND=NAME",
        help="report the llm or builtin judge under NAME (default: its kind); a grader is "
        "named after its file",
    )
    group.add_argument(
        "--grader",
        action="append",
        type=Path,
        metavar="FILE",
        help='a Python grader declaration (JSON: {"grader": {"type": "python", ...}}); repeatable',
    )
    group.add_argument(
        "--judge-endpoint",
        metavar="URL",
        help="the judge's OpenAI-compatible base URL (LLM judges and model-backed graders)",
    )
    group.add_argument("--judge-model", metavar="NAME", help="the judge's model name")
    group.add_argument(
        "--embedding-model",
        metavar="NAME",
        help="the embedding model of model-backed graders (ctx.embeddings_create)",
    )
    group.add_argument(
        "--judge-api-key-env",
        metavar="VAR",
        help="environment variable holding the judge's API key",
    )
    if prompt:
        group.add_argument(
            "--judge-prompt",
            metavar="TEXT|@FILE",
            help="judge system prompt (required for custom datasets)",
        )


def _add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        metavar="DIR",
        help="the run directory (generations.jsonl, judgements.jsonl, summary.json)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=16,
        metavar="N",
        help="requests in flight at most (default 16)",
    )
    parser.add_argument(
        "--request-timeout",
        type=_positive_float,
        default=600.0,
        metavar="S",
        help="seconds one request may take (default 600)",
    )
    parser.add_argument(
        "--max-retries",
        type=_non_negative_int,
        default=5,
        metavar="N",
        help="retries of a request after 429, 5xx, time-outs and connection "
        "errors, with exponential backoff (default 5)",
    )
    parser.add_argument("--quiet", action="store_true", help="only print the result line")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an unexpected error"
    )
    parser.add_argument(
        "--report-run",
        type=_run_reference,
        metavar="NAMESPACE/NAME",
        help="report progress and the result into this EvaluationRun's status (operator Jobs)",
    )


def _run_reference(text: str) -> tuple[str, str]:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``generate``, ``judge`` and ``run``."""
    generate = subparsers.add_parser(
        "generate",
        help="phase 1: ask the candidate every row and store the answers",
        description="Send every dataset row to the candidate and store each answer verbatim "
        "in DIR/generations.jsonl; running it again resumes where it stopped.",
    )
    _add_candidate_flags(generate)
    generate.add_argument(
        "--judge-prompt",
        metavar="TEXT|@FILE",
        help="judge prompt to store with a custom dataset for the judge phase",
    )
    _add_common_flags(generate)
    generate.set_defaults(handler=_handle_generate)

    judge = subparsers.add_parser(
        "judge",
        help="phase 2: score stored answers with an LLM judge",
        description="Score the answers stored in a generation directory with an LLM judge "
        "(never calling the candidate) and write DIR/summary.json.",
    )
    judge.add_argument(
        "--generations",
        required=True,
        type=Path,
        metavar="DIR",
        help="a directory written by `kyai generate`",
    )
    _add_judge_flags(judge)
    _add_common_flags(judge)
    add_gate_flags(judge)
    judge.set_defaults(handler=_handle_judge)

    run = subparsers.add_parser(
        "run",
        help="generate then judge, into one directory",
        description="Both phases into one directory: generate, then judge.",
    )
    _add_candidate_flags(run)
    _add_judge_flags(run)
    _add_common_flags(run)
    add_gate_flags(run)
    run.set_defaults(handler=_handle_run)


def _text_or_file(flag: str, value: str | None) -> str | None:
    """A prompt flag's text, or the contents of the file after ``@``."""
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc}") from exc


def _secret(flag: str, variable: str | None) -> str | None:
    """The API key in the environment variable a flag names."""
    if variable is None:
        return None
    from kyai.evaluation._redact import register_secret

    value = os.environ.get(variable)
    if not value:
        raise UsageError(f"{flag}: the environment variable {variable} is not set or is empty")
    register_secret(value)
    return value


def _configure_logging(quiet: bool) -> None:
    from kyai.evaluation._redact import RedactingFilter

    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    # One line per request is noise next to the progress lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _check_endpoint(flag: str, url: str | None) -> None:
    from kyai.evaluation._client import InvalidEndpointError, check_endpoint

    if url is None:
        return
    try:
        check_endpoint(url)
    except InvalidEndpointError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _check_output(path: Path) -> None:
    """``--output`` must be a directory this process can create and write into."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"--output {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output {path} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--output {path} is not writable")


def _check_inputs(args: argparse.Namespace, phases: tuple[str, ...]) -> None:
    """Flags checked before anything is loaded or sent: URLs and paths."""
    if "generate" in phases:
        _check_endpoint("--endpoint", args.endpoint)
        if args.snapshot is not None and not args.snapshot.is_dir():
            what = "does not exist" if not args.snapshot.exists() else "is not a directory"
            raise UsageError(f"--snapshot {args.snapshot} {what}; give a snapshot folder")
        if args.model_config is not None and not args.model_config.exists():
            raise UsageError(f"--model-config {args.model_config} does not exist")
    if "judge" in phases:
        _check_endpoint("--judge-endpoint", args.judge_endpoint)
        if "generate" not in phases and not args.generations.is_dir():
            what = "does not exist" if not args.generations.exists() else "is not a directory"
            raise UsageError(
                f"--generations {args.generations} {what}; give a directory written by "
                "`kyai generate` (it holds run.json)"
            )
    _check_output(args.output)


def _error(args: argparse.Namespace, message: object) -> None:
    from kyai.constants import TERMINATION_MESSAGE_ENV
    from kyai.evaluation._redact import redact

    text = redact(f"kyai {args.command}: error: {message}")
    print(text, file=sys.stderr)
    # In a worker Job, also the container's termination message: the operator quotes it.
    # The kubelet creates that file before the container starts; none is created here.
    path = os.environ.get(TERMINATION_MESSAGE_ENV)
    if path and os.path.isfile(path):
        try:
            with open(path, "wb") as log:
                log.write(text.encode("utf-8", "replace")[:4096])
        except OSError:
            pass  # best effort: FallbackToLogsOnError takes the log's tail instead


def _run_guarded(args: argparse.Namespace, phases: tuple[str, ...]) -> int:
    from kyai.datasets import DatasetError, DatasetUnavailableError
    from kyai.evaluation import (
        EndpointConfigError,
        EndpointUnreachableError,
        ModelConfigError,
        RunDirectoryError,
    )
    from kyai.evaluation._client import InvalidEndpointError
    from kyai.evaluation._redact import redact, register_secret
    from kyai.evaluation._report import ReportError

    _configure_logging(args.quiet)
    register_secret(os.environ.get(HF_TOKEN_ENV))
    try:
        _check_inputs(args, phases)
        return asyncio.run(_execute(args, phases))
    except KeyboardInterrupt:
        print(
            f"kyai {args.command}: interrupted; what was stored is kept in {args.output} "
            "(run the same command again to resume)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except DatasetUnavailableError as exc:  # the Hub is unreachable: not the user's input
        _error(args, exc)
        return EXIT_UNREACHABLE
    except (
        UsageError,
        DatasetError,
        RunDirectoryError,
        ModelConfigError,
        InvalidEndpointError,
    ) as exc:
        _error(args, exc)
        return EXIT_USAGE
    except (EndpointUnreachableError, EndpointConfigError) as exc:
        _error(args, exc)
        return EXIT_UNREACHABLE
    except ReportError as exc:
        _error(args, exc)
        return EXIT_FAILURE
    except Exception as exc:
        if args.debug:
            print(redact(traceback.format_exc()), file=sys.stderr, end="")
        _error(
            args,
            f"unexpected {type(exc).__name__}: {exc}"
            + ("" if args.debug else " (--debug shows the traceback)"),
        )
        return EXIT_FAILURE


async def _execute(args: argparse.Namespace, phases: tuple[str, ...]) -> int:
    from kyai.evaluation._report import StatusReporter, kubernetes_patcher

    async with contextlib.AsyncExitStack() as stack:
        reporter: StatusReporter | None = None
        if args.report_run is not None:
            reporter = await stack.enter_async_context(
                StatusReporter(kubernetes_patcher(*args.report_run))
            )
        return await _phases(args, phases, reporter)


async def _phases(
    args: argparse.Namespace, phases: tuple[str, ...], reporter: StatusReporter | None
) -> int:
    from kyai.datasets import load_dataset, load_snapshot_dir
    from kyai.evaluation import CandidateConfig, RetryPolicy, generate, judge_many

    retry = RetryPolicy(max_retries=args.max_retries)
    listener = reporter.listener if reporter is not None else None
    output: Path = args.output
    judge_prompt = _text_or_file("--judge-prompt", getattr(args, "judge_prompt", None))
    if "generate" in phases:
        if args.snapshot is not None:
            dataset = load_snapshot_dir(args.snapshot)
        else:
            dataset = load_dataset(
                args.dataset,
                dataset_file=args.dataset_file,
                generation_prompt=_text_or_file("--generation-prompt", args.generation_prompt),
                judge_prompt=judge_prompt,
                hf_revision=args.hf_revision,
            )
        preprocess = getattr(args, "preprocess", None) or _grader_preprocess(args)
        if preprocess is not None:
            dataset = await _preprocess(dataset, preprocess)
        if "judge" in phases and dataset.prompts.judge is None and _judge_kinds(args)[0]:
            raise UsageError("--judge-prompt is required for a custom dataset")
        candidate = CandidateConfig(
            endpoint=args.endpoint,
            model=args.model,
            api_key=_secret("--api-key-env", args.api_key_env),
            concurrency=args.concurrency,
            timeout_s=args.request_timeout,
            retry=retry,
            model_config_path=args.model_config,
            context_window=args.context_window,
            retry_errors=args.retry_errors,
        )
        judge_key = (
            _secret("--judge-api-key-env", args.judge_api_key_env) if "judge" in phases else None
        )
        outcome = await generate(dataset, output, candidate, listener=listener)
        _print_redacted(
            f"generated {outcome.sent} of {outcome.rows} rows ({outcome.errors} errors) in "
            f"{outcome.wall_seconds:.1f}s; context window {outcome.window.tokens} tokens "
            f"({outcome.window.source}) -> {output}",
            sys.stderr,
        )
    if "judge" in phases:
        generations_dir: Path = output if "generate" in phases else args.generations
        if "generate" not in phases:
            _check_grader_preprocess_applied(args, generations_dir)
        if "generate" not in phases:
            judge_key = _secret("--judge-api-key-env", args.judge_api_key_env)
        judges = _judges(
            args,
            generations_dir,
            judge_key=judge_key,
            judge_prompt=judge_prompt if "generate" not in phases else None,
            retry=retry,
        )
        summary = await judge_many(generations_dir, output, judges, listener=listener)
        if reporter is not None:
            await reporter.final(summary)
        latency = summary["avg_latency_ms"]
        _print_redacted(
            f"avg_score={summary['avg_score']:.4f} count={summary['count']} "
            f"errors={summary['error_count']} avg_latency_ms="
            f"{'n/a' if latency is None else f'{latency:.1f}'} "
            f"comparison_key={summary['comparison_key']} -> {output / 'summary.json'}",
            sys.stdout,
        )
        failures = gate_failures(
            summary, fail_under=args.fail_under, max_error_rate=args.max_error_rate
        )
        if failures:
            print(
                f"kyai {args.command}: quality gate failed: {'; '.join(failures)}", file=sys.stderr
            )
            return EXIT_GATE_FAILED
    return EXIT_OK


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


def _grader_preprocess(args: argparse.Namespace) -> Path | None:
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


def _check_grader_preprocess_applied(args: argparse.Namespace, generations: Path) -> None:
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


def _print_redacted(text: str, stream: Any) -> None:
    from kyai.evaluation._redact import redact

    print(redact(text), file=stream)


async def _preprocess(dataset: Dataset, path: Path) -> Dataset:
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


def _judge_kinds(args: argparse.Namespace) -> tuple[bool, bool]:
    """(an LLM judge is wanted, the builtin grader is wanted)."""
    kinds = list(args.judge or [])
    if not kinds and not args.grader:
        kinds = ["llm"]
    return "llm" in kinds, "builtin" in kinds


def _judges(
    args: argparse.Namespace,
    generations_dir: Path,
    *,
    judge_key: str | None,
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

    llm, builtin = _judge_kinds(args)
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


def _handle_generate(args: argparse.Namespace) -> int:
    return _run_guarded(args, ("generate",))


def _handle_judge(args: argparse.Namespace) -> int:
    return _run_guarded(args, ("judge",))


def _handle_run(args: argparse.Namespace) -> int:
    return _run_guarded(args, ("generate", "judge"))
