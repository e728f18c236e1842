"""Running ``kyai generate``, ``judge`` and ``run``: input checks, the phases, exit statuses.

:func:`run_guarded` is what the commands' handlers (:mod:`kyai.evaluation.cli`, the parser)
call; everything the phases need is imported here, not when the command line is parsed.
Every input problem is found first, all of them, and every endpoint the command will use is
checked, by :func:`kyai.evaluation._preflight.preflight` (one message, before any chat
request; a failing endpoint leads it with its reason, ``JudgeUnreachable: ...``, exit 3); the
checks the phases make again stay as a net.

What is printed: the progress, resuming and retry lines on stderr (not with ``--quiet``), errors on
stderr as ``kyai <command>: error: <message>`` (also the worker container's termination
message), the result line (``kyai run`` / ``judge``: on stdout; ``kyai generate``: its
"generated ..." line on stderr). With ``--report-run`` the run's ``status.progress`` hears
the same: the checks' retries and failure (phase ``preflight``), then the phases' progress.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import sys
import traceback
from collections.abc import Mapping
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
from kyai.evaluation._cli_judges import (
    check_grader_preprocess_applied,
    grader_preprocess,
    judge_kinds,
    judges,
    preprocess,
)
from kyai.evaluation._gates import gate_failures
from kyai.evaluation._preflight import PreflightError, preflight
from kyai.evaluation._usage import HF_TOKEN_ENV, UsageError, judge_api_key, secret, text_or_file

if TYPE_CHECKING:
    from kyai.datasets import Dataset
    from kyai.evaluation import CandidateConfig, RetryPolicy
    from kyai.evaluation._keyfile import KeyFile
    from kyai.evaluation._report import StatusReporter

__all__ = ["run_guarded"]


def _configure_logging(quiet: bool) -> None:
    from kyai.evaluation._redact import RedactingFilter

    logging.basicConfig(
        level=logging.ERROR if quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
    # One line per request is noise next to the progress lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _first_missing(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (None: it exists)."""
    if path.exists():
        return None
    missing = path
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    return missing


def _remove_if_empty(created: Path | None) -> None:
    """Remove a directory this command created when it holds no file (a failed start)."""
    if created is None or not created.is_dir():
        return
    if any(entry.is_file() or entry.is_symlink() for entry in created.rglob("*")):
        return
    shutil.rmtree(created, ignore_errors=True)


def _check_output(path: Path) -> Path | None:
    """``--output`` must be a directory this process can create and write into.

    Returns the outermost directory it created (None when ``path`` existed), so that a
    command that fails before storing anything leaves nothing behind.
    """
    if path.exists() and not path.is_dir():
        raise UsageError(f"--output {path} exists and is not a directory")
    created = _first_missing(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--output {path} cannot be created: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"--output {path} is not writable")
    return created


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


def run_guarded(args: argparse.Namespace, phases: tuple[str, ...]) -> int:
    """Run the phases; a failure before anything was stored leaves no new directory behind."""
    args.created_output = None
    try:
        status = _run_reporting_errors(args, phases)
    except BaseException:
        _remove_if_empty(args.created_output)
        raise
    if status != 0:
        _remove_if_empty(args.created_output)
    return status


def _run_reporting_errors(args: argparse.Namespace, phases: tuple[str, ...]) -> int:
    from kyai.datasets import DatasetError, DatasetUnavailableError
    from kyai.evaluation import (
        EndpointConfigError,
        EndpointUnreachableError,
        ModelConfigError,
        RunDirectoryError,
    )
    from kyai.evaluation._client import InvalidEndpointError
    from kyai.evaluation._redact import redact, register_secret

    # The status reporter (and the API models it validates with, a third of a second to
    # import) is loaded only for --report-run: an `except ()` catches nothing.
    report_errors: tuple[type[Exception], ...] = ()
    if args.report_run is not None:
        from kyai.evaluation._report import ReportError

        report_errors = (ReportError,)
    _configure_logging(args.quiet)
    register_secret(os.environ.get(HF_TOKEN_ENV))
    try:
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
    except PreflightError as exc:  # every problem found before anything was sent
        _error(args, exc)
        return EXIT_USAGE if exc.usage else EXIT_UNREACHABLE
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
    except report_errors as exc:
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
    async with contextlib.AsyncExitStack() as stack:
        reporter: StatusReporter | None = None
        if args.report_run is not None:
            from kyai.evaluation._report import StatusReporter, kubernetes_patcher

            reporter = await stack.enter_async_context(
                StatusReporter(kubernetes_patcher(*args.report_run))
            )
        await _check(args, phases, reporter)
        if args.check_only:
            _print_redacted(f"kyai {args.command}: {_checked(args, phases)}", sys.stdout)
            _remove_if_empty(args.created_output)
            return EXIT_OK
        return await _phases(args, phases, reporter)


async def _check(
    args: argparse.Namespace, phases: tuple[str, ...], reporter: StatusReporter | None
) -> None:
    """The preflight: every input problem and every endpoint, before anything is sent.

    Its retry lines go to stderr (not with ``--quiet``) and to the run's status; so does its
    failure (the status's message leads with the reason), which it raises.
    """
    said = False

    def say(text: str) -> None:
        from kyai.evaluation._redact import redact

        nonlocal said
        said = True
        text = redact(text)
        if not args.quiet:
            _print_redacted(f"kyai {args.command}: {text}", sys.stderr)
        if reporter is not None:
            reporter.checking(text)

    try:
        await preflight(args, phases, check_output=_check_output, say=say)
    except PreflightError as exc:
        if reporter is not None and exc.reason is not None:
            from kyai.evaluation._redact import redact

            reporter.checking(redact(str(exc)))
        raise
    if said and reporter is not None:
        reporter.checking(None)


def _checked(args: argparse.Namespace, phases: tuple[str, ...]) -> str:
    """What ``--check-only`` says once every check passed."""
    parts = []
    if "generate" in phases:
        parts.append(f"the candidate {args.endpoint} serves {args.model!r}")
    if "judge" in phases and args.judge_endpoint and args.judge_model:
        parts.append(f"the judge {args.judge_endpoint} serves {args.judge_model!r}")
    checked = "; ".join(parts) if parts else "the input"
    return f"checked: {checked}; nothing was sent"


async def _phases(
    args: argparse.Namespace, phases: tuple[str, ...], reporter: StatusReporter | None
) -> int:
    from kyai.evaluation import RetryPolicy

    retry = RetryPolicy(max_retries=args.max_retries)
    judge_prompt = text_or_file("--judge-prompt", getattr(args, "judge_prompt", None))
    if "judge" not in phases:
        await _generate_phase(args, phases, reporter, retry, judge_prompt)
        return EXIT_OK
    if "generate" in phases:
        judge_key = await _generate_phase(args, phases, reporter, retry, judge_prompt)
        return await _judge_phase(args, reporter, retry, args.output, judge_key=judge_key)
    check_grader_preprocess_applied(args, args.generations)
    key = judge_api_key(args)
    return await _judge_phase(
        args, reporter, retry, args.generations, judge_key=key, judge_prompt=judge_prompt
    )


async def _generate_phase(
    args: argparse.Namespace,
    phases: tuple[str, ...],
    reporter: StatusReporter | None,
    retry: RetryPolicy,
    judge_prompt: str | None,
) -> str | KeyFile | None:
    """Generate into ``--output``; return the judge's API key when a judge phase follows.

    The key is read before the candidate is asked anything, so that a missing one fails first.
    """
    from kyai.datasets import load_dataset, load_snapshot_dir
    from kyai.evaluation import generate
    from kyai.evaluation._serving import serving_note

    if args.snapshot is not None:
        dataset = load_snapshot_dir(args.snapshot)
    else:
        dataset = load_dataset(
            args.dataset,
            dataset_file=args.dataset_file,
            generation_prompt=text_or_file("--generation-prompt", args.generation_prompt),
            judge_prompt=judge_prompt,
            hf_revision=args.hf_revision,
        )
    preprocessor = getattr(args, "preprocess", None) or grader_preprocess(args)
    if preprocessor is not None:
        dataset = await preprocess(dataset, preprocessor)
    if "judge" in phases and dataset.prompts.judge is None and judge_kinds(args)[0]:
        raise UsageError("--judge-prompt is required for a custom dataset")
    candidate = _candidate(args, retry)
    key = judge_api_key(args) if "judge" in phases else None
    listener = reporter.listener if reporter is not None else None
    if not args.quiet:
        _say_resuming(args, dataset, candidate)
    outcome = await generate(
        dataset, args.output, candidate, listener=listener, echo=not args.quiet
    )
    if not args.quiet or "judge" not in phases:  # kyai generate's result line
        _print_redacted(
            f"generated {outcome.sent} of {outcome.rows} rows ({outcome.errors} errors) in "
            f"{outcome.wall_seconds:.1f}s; context window {outcome.window.tokens} tokens "
            f"({outcome.window.source}); {serving_note(outcome.serving)} -> {args.output}",
            sys.stderr,
        )
    return key


async def _judge_phase(
    args: argparse.Namespace,
    reporter: StatusReporter | None,
    retry: RetryPolicy,
    generations_dir: Path,
    *,
    judge_key: str | KeyFile | None,
    judge_prompt: str | None = None,
) -> int:
    """Judge the answers in ``generations_dir``; write, report and gate the summary."""
    from kyai.evaluation import judge_many
    from kyai.evaluation._serving import serving_note

    output: Path = args.output
    named = judges(
        args, generations_dir, judge_key=judge_key, judge_prompt=judge_prompt, retry=retry
    )
    listener = reporter.listener if reporter is not None else None
    summary = await judge_many(
        generations_dir, output, named, listener=listener, echo=not args.quiet
    )
    if reporter is not None:
        await reporter.final(summary)
    latency = summary["avg_latency_ms"]
    _print_redacted(
        f"avg_score={summary['avg_score']:.4f} count={summary['count']} "
        f"errors={summary['error_count']} avg_latency_ms="
        f"{'n/a' if latency is None else f'{latency:.1f}'} "
        f"{serving_note(summary.get('serving'))} "
        f"comparison_key={summary['comparison_key']}{subset_note(summary)} -> "
        f"{output / 'summary.json'}",
        sys.stdout,
    )
    failures = gate_failures(
        summary, fail_under=args.fail_under, max_error_rate=args.max_error_rate
    )
    if failures:
        print(f"kyai {args.command}: quality gate failed: {'; '.join(failures)}", file=sys.stderr)
        return EXIT_GATE_FAILED
    return EXIT_OK


def _say_resuming(args: argparse.Namespace, dataset: Dataset, config: CandidateConfig) -> None:
    """Say (a progress line) that ``--output`` already holds answers this run keeps.

    ``resuming: K of N rows already stored in DIR``: K are the rows ``generate`` will not ask
    again (a sound stored record; not an error under ``--retry-errors``), N the rows it asks
    for. Nothing when none is kept, or when the directory holds another model's or dataset's
    run (``generate`` refuses it). The log is read as it is: ``generate`` repairs it.
    """
    from kyai.evaluation import _store as store
    from kyai.evaluation._generate import pending_rows

    run_path = args.output / store.RUN
    if not run_path.is_file():
        return
    previous = store.read_json(run_path)
    if (previous.get("candidate") or {}).get("model") != config.model or (
        previous.get("dataset") or {}
    ).get("sha256") != dataset.sha256:
        return
    stored = store.latest_by_row(
        store.JsonlLog(args.output / store.GENERATIONS, repair=False).read()
    )
    rows = config.asked_rows(dataset)
    kept = len(rows) - len(pending_rows(rows, stored, retry_errors=config.retry_errors))
    if kept:
        _print_redacted(
            f"kyai {args.command}: resuming: {kept} of {len(rows)} rows already stored in "
            f"{args.output}",
            sys.stderr,
        )


def _candidate(args: argparse.Namespace, retry: RetryPolicy) -> CandidateConfig:
    """The candidate the flags describe (``kyai generate`` and ``kyai run``)."""
    from kyai.evaluation import CandidateConfig

    return CandidateConfig(
        endpoint=args.endpoint,
        model=args.model,
        api_key=secret("--api-key-env", args.api_key_env),
        concurrency=args.concurrency,
        timeout_s=args.request_timeout,
        retry=retry,
        model_config_path=args.model_config,
        context_window=args.context_window,
        retry_errors=args.retry_errors,
        stream=not args.no_stream,
        server_metrics=args.server_metrics,
        gpus=args.gpus,
        sampling=sampling(args),
        limit=args.limit,
    )


def sampling(args: argparse.Namespace) -> dict[str, float | int] | None:
    """The sampling parameters the flags set (``--temperature``, ``--top-p``, ``--seed``)."""
    chosen = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "seed": args.seed,
    }
    return {name: value for name, value in chosen.items() if value is not None} or None


def subset_note(summary: Mapping[str, Any]) -> str:
    """`` subset=10/1000``: the result line of a run of the first questions only."""
    subset = summary.get("subset")
    return f" subset={subset['limit']}/{subset['of']}" if subset else ""


def _print_redacted(text: str, stream: Any) -> None:
    from kyai.evaluation._redact import redact

    print(redact(text), file=stream)
