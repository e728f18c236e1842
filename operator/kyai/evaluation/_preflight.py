"""Every input problem of ``kyai generate``, ``judge`` and ``run``, found before anything is sent.

:func:`preflight` checks all that can be checked before the first chat request and reports
every problem in one :class:`PreflightError`, one line each, instead of one per invocation:

- flags: malformed ``--endpoint`` / ``--judge-endpoint``, a missing ``--snapshot``,
  ``--model-config`` or ``--generations`` folder, an unusable ``--output``, an API key
  variable that is not set, a missing ``--judge-endpoint`` / ``--judge-model`` for an LLM judge;
- a custom dataset (``--dataset FILE``): the file itself (type, readable, valid JSON/CSV), every
  row's ``instruction`` and ``ground_truth_response`` (line and field named; the first
  :data:`MAX_ROW_PROBLEMS` problems, then how many more), ``--generation-prompt`` and, for
  an LLM judge, ``--judge-prompt`` (required, and their ``@FILE`` readable), ``--judge builtin``
  (built-in datasets only);
- the servers, unless an endpoint flag is malformed: one ``GET /v1/models`` each (no retry, a
  short time-out), the candidate and judge models they do not list.

Exit status: 2 when any problem is the user's input, 3 when every problem is a server's (a
model not served, a server not reached), as each alone always was. A server that cannot be
reached is reported only beside input problems: alone, the phase that follows reaches it with
its retries (a server still starting) and says so itself.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kyai.evaluation._usage import UsageError, judge_api_key, secret, text_or_file

if TYPE_CHECKING:
    from kyai.evaluation._keyfile import KeyFile

__all__ = ["MAX_ROW_PROBLEMS", "PreflightError", "Problem", "preflight"]

#: Row problems named one by one; the others are counted.
MAX_ROW_PROBLEMS = 20
#: Seconds the ``/v1/models`` probe waits at most.
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Problem:
    """One problem; ``server``: a server's answer (exit 3), not the user's input (exit 2)."""

    text: str
    server: bool = False
    #: The server did not answer ``/v1/models`` (reported only beside other problems).
    unreachable: bool = False


class PreflightError(Exception):
    """The problems found before anything was sent; the message lists them all."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        if len(problems) == 1:
            message = problems[0].text
        else:
            lines = "".join(f"\n  - {problem.text}" for problem in problems)
            message = f"{len(problems)} problems, nothing was sent:{lines}"
        super().__init__(message)

    @property
    def usage(self) -> bool:
        """Whether any problem is the user's input (exit 2; else 3)."""
        return any(not problem.server for problem in self.problems)


def _endpoint(flag: str, url: str | None, problems: list[Problem]) -> bool:
    """Whether ``url`` (when given) is well formed; a problem otherwise."""
    from kyai.evaluation._client import InvalidEndpointError, check_endpoint

    if url is None:
        return True
    try:
        check_endpoint(url)
    except InvalidEndpointError as exc:
        problems.append(Problem(f"{flag}: {exc}"))
        return False
    return True


def _folder(flag: str, path: Path | None, hint: str, problems: list[Problem]) -> None:
    if path is not None and not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a directory"
        problems.append(Problem(f"{flag} {path} {what}; {hint}"))


def _text(flag: str, value: str | None, problems: list[Problem]) -> str | None:
    try:
        return text_or_file(flag, value)
    except UsageError as exc:
        problems.append(Problem(str(exc)))
        return None


def _key(flag: str, variable: str | None, problems: list[Problem]) -> tuple[bool, str | None]:
    """(usable, the key) of ``flag``'s variable."""
    try:
        return True, secret(flag, variable)
    except UsageError as exc:
        problems.append(Problem(str(exc)))
        return False, None


def _llm_wanted(args: argparse.Namespace) -> tuple[bool, bool]:
    from kyai.evaluation._cli_judges import judge_kinds

    return judge_kinds(args)


def _is_custom(args: argparse.Namespace) -> bool:
    from kyai.datasets import BUILTIN_DATASETS

    return args.dataset is not None and args.dataset not in BUILTIN_DATASETS


def _dataset_rows(path: Path, problems: list[Problem]) -> None:
    """The custom file's problems: the file, then each row's required fields."""
    from kyai.datasets import custom_row_problems

    if not path.is_file():
        what = "does not exist" if not path.exists() else "is not a file"
        problems.append(Problem(f"--dataset {path} {what}"))
        return
    found = [str(problem) for problem in custom_row_problems(path)]
    for text in found[:MAX_ROW_PROBLEMS]:
        problems.append(Problem(text))
    if len(found) > MAX_ROW_PROBLEMS:
        more = len(found) - MAX_ROW_PROBLEMS
        problems.append(Problem(f"{path}: {more} more problems in its rows"))


def _dataset(args: argparse.Namespace, phases: tuple[str, ...], problems: list[Problem]) -> None:
    """The dataset's and prompts' problems (``kyai generate`` / ``run`` with ``--dataset``)."""
    llm, builtin = _llm_wanted(args) if "judge" in phases else (False, False)
    _text("--generation-prompt", args.generation_prompt, problems)
    _text("--judge-prompt", getattr(args, "judge_prompt", None), problems)
    if not _is_custom(args):
        if builtin:
            # Only then: the graders' package takes a tenth of a second to import.
            from kyai.graders import GraderUnavailableError, builtin_grader

            try:
                builtin_grader(args.dataset)
            except GraderUnavailableError as exc:
                problems.append(Problem(f"--judge builtin: {exc}"))
        return
    if args.generation_prompt is None:
        problems.append(Problem(
            "--generation-prompt is required for a custom dataset: the system prompt sent to "
            "the candidate before each instruction (TEXT or @FILE)"
        ))  # fmt: skip
    if llm and getattr(args, "judge_prompt", None) is None:
        problems.append(Problem(
            "--judge-prompt is required for a custom dataset judged by an LLM: the judge's "
            "system prompt, asking for {\"score\": ..., \"reasoning\": ...} (TEXT or @FILE)"
        ))  # fmt: skip
    if builtin:
        from kyai.graders import GraderUnavailableError, builtin_grader

        try:
            builtin_grader(None)
        except GraderUnavailableError as exc:
            problems.append(Problem(f"--judge builtin: {exc}"))
    _dataset_rows(Path(args.dataset), problems)


def _flags(
    args: argparse.Namespace, phases: tuple[str, ...], problems: list[Problem]
) -> tuple[bool, dict[str, object]]:
    """The flags' problems; (every endpoint well formed, the probes' keys by side)."""
    well_formed = True
    keys: dict[str, object] = {}
    if "generate" in phases:
        well_formed &= _endpoint("--endpoint", args.endpoint, problems)
        _folder("--snapshot", args.snapshot, "give a snapshot folder", problems)
        if args.model_config is not None and not args.model_config.exists():
            problems.append(Problem(f"--model-config {args.model_config} does not exist"))
        usable, key = _key("--api-key-env", args.api_key_env, problems)
        if usable:
            keys["candidate"] = key
    if "judge" in phases:
        well_formed &= _endpoint("--judge-endpoint", args.judge_endpoint, problems)
        if "generate" not in phases:
            _folder("--generations", args.generations, "give a directory written by "
                    "`kyai generate` (it holds run.json)", problems)  # fmt: skip
        llm = _llm_wanted(args)[0]
        if llm and (not args.judge_endpoint or not args.judge_model):
            problems.append(
                Problem("--judge-endpoint and --judge-model are required for an LLM judge")
            )
        try:
            judge_key: str | KeyFile | None = judge_api_key(args)
        except UsageError as exc:
            problems.append(Problem(str(exc)))
        else:
            if llm:
                keys["judge"] = judge_key
    return well_formed, keys


async def _probe(side: str, flag: str, endpoint: str, model: str, key: object) -> Problem | None:
    """One ``GET /v1/models``: a problem when ``model`` is not listed or nothing answers."""
    from kyai.evaluation import EndpointConfigError, EndpointUnreachableError, RetryPolicy
    from kyai.evaluation._client import ChatClient
    from kyai.evaluation._generate import check_served
    from kyai.evaluation._keyfile import KeyFile

    api_key = key if isinstance(key, str | KeyFile) else None
    try:
        async with ChatClient(
            endpoint, api_key=api_key, timeout_s=PROBE_TIMEOUT_S,
            retry=RetryPolicy(max_retries=0), max_connections=1,
        ) as client:  # fmt: skip
            cards = await client.list_models()
            check_served(cards, model, client.base_url, side)
    except EndpointConfigError as exc:
        return Problem(f"{flag} {model}: {exc}", server=True)
    except EndpointUnreachableError as exc:
        return Problem(f"{flag}: {exc}", server=True, unreachable=True)
    return None


async def _servers(
    args: argparse.Namespace, phases: tuple[str, ...], keys: dict[str, object]
) -> list[Problem]:
    probes = []
    if "generate" in phases and "candidate" in keys:
        probes.append(_probe("candidate", "--model", args.endpoint, args.model,
                             keys["candidate"]))  # fmt: skip
    if "judge" in phases and "judge" in keys and args.judge_endpoint and args.judge_model:
        probes.append(_probe("judge", "--judge-model", args.judge_endpoint, args.judge_model,
                             keys["judge"]))  # fmt: skip
    found = await asyncio.gather(*probes)
    return [problem for problem in found if problem is not None]


def preflight(
    args: argparse.Namespace,
    phases: tuple[str, ...],
    *,
    check_output: Callable[[Path], Path | None],
) -> None:
    """Raise :class:`PreflightError` with every problem found, before anything is sent.

    ``check_output`` makes ``--output`` (raising :class:`UsageError`, one problem of the list,
    when it cannot); ``args.created_output`` records the directory it made, for the caller to
    remove on failure.
    """
    problems: list[Problem] = []
    well_formed, keys = _flags(args, phases, problems)
    if "generate" in phases and args.snapshot is None and args.dataset is not None:
        _dataset(args, phases, problems)
    elif "judge" in phases:
        _text("--judge-prompt", getattr(args, "judge_prompt", None), problems)
    try:
        args.created_output = check_output(args.output)
    except UsageError as exc:
        problems.append(Problem(str(exc)))
    if well_formed:  # a malformed endpoint: the command is being fixed, nothing is asked
        found = asyncio.run(_servers(args, phases, keys))
        # Alone, a server that did not answer is the phase's to report (with its retries).
        noted = bool(problems) or any(not problem.unreachable for problem in found)
        problems += [problem for problem in found if noted or not problem.unreachable]
    if problems:
        raise PreflightError(problems)
