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
- every endpoint the command will use, unless an endpoint flag is malformed: the candidate's
  (``kyai generate``, ``kyai run``) and the judge's (``kyai judge``, ``kyai run``: an LLM judge
  or a model-backed grader; built-in and other Python graders need none). Each is asked
  ``GET /v1/models`` (all at once): it must answer, accept the key, and list the models the
  command asks for (``--model``; ``--judge-model`` and ``--embedding-model``).

A failing endpoint is a problem with a reason of its own, leading its line:
``CandidateUnreachable`` / ``JudgeUnreachable`` (no answer, a time-out, or a 429/5xx: a judge
gateway that cannot reach the judge), ``CandidateKeyRefused`` / ``JudgeKeyRefused`` (401 or
403, the judge gateway's ``UpstreamRefusedKey``: the judge refused the platform's key, or a
``--judge-api-key-file`` that cannot be read) and ``CandidateModelNotServed`` /
``JudgeModelNotServed``.

A blip is tolerated: an endpoint that does not answer (or answers 429/5xx, or a list cut
short) is asked again, up to :data:`CHECK_ATTEMPTS` attempts in all (``1 + --max-retries``
when that is fewer), :data:`CHECK_WAITS_S` apart (a ``Retry-After`` up to the longest of
them), each attempt waiting :data:`PROBE_TIMEOUT_S` at most: at most 7 s of waits and 23 s in
all. Each failed attempt is said (``judge unreachable: connection refused; attempt 1 of 4,
next in 1 s``) through ``say``. A refused key or a model not listed is not asked again. When
the input has problems too, each endpoint is asked once: the command is being fixed.

Exit status: 2 when any problem is the user's input, 3 when every problem is an endpoint's;
then the message leads with the first one's reason (:attr:`PreflightError.reason`).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kyai.evaluation._usage import UsageError, judge_api_key, secret, text_or_file

if TYPE_CHECKING:
    from kyai.evaluation._client import ModelsAnswer
    from kyai.evaluation._keyfile import KeyFile

__all__ = [
    "CHECK_ATTEMPTS",
    "CHECK_WAITS_S",
    "MAX_ROW_PROBLEMS",
    "PROBE_TIMEOUT_S",
    "REASONS",
    "PreflightError",
    "Problem",
    "check_server",
    "preflight",
]

#: Row problems named one by one; the others are counted.
MAX_ROW_PROBLEMS = 20
#: Seconds one ``/v1/models`` attempt waits at most (less with a smaller --request-timeout);
#: under 5 s, which aiohttp would round up to the next whole second.
PROBE_TIMEOUT_S = 4.0
#: Attempts of each endpoint's check at most (``1 + --max-retries`` when that is fewer).
CHECK_ATTEMPTS = 4
#: Seconds between an endpoint's attempts (the first wait, the second, ...).
CHECK_WAITS_S = (1.0, 2.0, 4.0)

#: Sides and what failed: the reason that leads a failing endpoint's problem.
UNREACHABLE, MODEL_NOT_SERVED, KEY_REFUSED = "Unreachable", "ModelNotServed", "KeyRefused"
REASONS: tuple[str, ...] = tuple(
    f"{side}{failure}"
    for side in ("Candidate", "Judge")
    for failure in (UNREACHABLE, MODEL_NOT_SERVED, KEY_REFUSED)
)

#: The key of :func:`_flags`' answer saying a ``--grader`` calls models.
MODEL_BACKED = "model-backed graders"

#: Say a line (a failed attempt of an endpoint's check, about to be tried again); it may be a
#: coroutine function (the operator writes the line into the run's status).
Say = Callable[[str], Awaitable[None] | None]


@dataclass(frozen=True)
class Problem:
    """One problem; ``server``: a server's answer (exit 3), not the user's input (exit 2).

    ``reason`` (one of :data:`REASONS`) names what failed of an endpoint's check; ``text``
    leads with it.
    """

    text: str
    server: bool = False
    reason: str | None = None


class PreflightError(Exception):
    """The problems found before anything was sent; the message lists them all.

    When every problem is an endpoint's, the message leads with the first one's reason
    (``JudgeUnreachable: ...``, or ``CandidateUnreachable: 2 problems, nothing was sent:``).
    """

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = tuple(problems)
        if len(problems) == 1:
            message = problems[0].text
        else:
            lines = "".join(f"\n  - {problem.text}" for problem in problems)
            lead = f"{self.reason}: " if self.reason else ""
            message = f"{lead}{len(problems)} problems, nothing was sent:{lines}"
        super().__init__(message)

    @property
    def usage(self) -> bool:
        """Whether any problem is the user's input (exit 2; else 3)."""
        return any(not problem.server for problem in self.problems)

    @property
    def reason(self) -> str | None:
        """The first problem's reason when every problem is an endpoint's (exit 3), else None."""
        if self.usage:
            return None
        return next((problem.reason for problem in self.problems if problem.reason), None)


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
            model_backed = _model_backed_graders(args)
            if llm or model_backed:
                keys["judge"] = judge_key
                keys[MODEL_BACKED] = model_backed
    return well_formed, keys


def _model_backed_graders(args: argparse.Namespace) -> bool:
    """Whether a ``--grader`` calls models (through the judge endpoint).

    A declaration that cannot be read is left to the judge phase, which names its problem.
    """
    paths = getattr(args, "grader", None) or []
    if not paths:
        return False
    from kyai.graders import GraderDeclarationError, PythonGrader

    for path in paths:
        try:
            if PythonGrader.from_file(path).model_access:
                return True
        except (GraderDeclarationError, OSError, ValueError):
            continue
    return False


@dataclass(frozen=True)
class _Endpoint:
    """An endpoint to check: whose, its flag and URL, the models asked for, the key."""

    side: str  # "candidate" or "judge"
    flag: str
    url: str
    models: tuple[tuple[str, str], ...]  # (flag, name)
    key: object
    key_flag: str


def _reason(side: str, failure: str) -> str:
    return f"{side.capitalize()}{failure}"


def _endpoints(
    args: argparse.Namespace, phases: tuple[str, ...], keys: dict[str, object]
) -> list[_Endpoint]:
    """The endpoints the command will use, candidate first."""
    found = []
    if "generate" in phases and "candidate" in keys:
        key_flag = f"--api-key-env {args.api_key_env}" if args.api_key_env else "no key given"
        models = (("--model", args.model),)
        found.append(
            _Endpoint("candidate", "--endpoint", args.endpoint, models, keys["candidate"], key_flag)
        )
    if "judge" in phases and "judge" in keys and args.judge_endpoint and args.judge_model:
        judge_models = [("--judge-model", args.judge_model)]
        if args.embedding_model and keys.get(MODEL_BACKED):
            judge_models.append(("--embedding-model", args.embedding_model))
        if args.judge_api_key_file:
            key_flag = f"--judge-api-key-file {args.judge_api_key_file}"
        elif args.judge_api_key_env:
            key_flag = f"--judge-api-key-env {args.judge_api_key_env}"
        else:
            key_flag = "no key given"
        found.append(_Endpoint("judge", "--judge-endpoint", args.judge_endpoint,
                               tuple(judge_models), keys["judge"], key_flag))  # fmt: skip
    return found


def _failed(
    endpoint: _Endpoint, base: str, answer: ModelsAnswer, attempts: int, took: float
) -> Problem:
    """The problem of an endpoint whose last answer was no usable model list.

    Each keeps the words the phases' own checks always used ("Cannot reach URL/models",
    "refused the credentials (HTTP 401)"), after the reason and the flag.
    """
    from kyai.evaluation._client import CREDENTIALS_ERROR
    from kyai.evaluation._transport import TIMEOUT

    refused = _reason(endpoint.side, KEY_REFUSED)
    if answer.gateway_refused:
        return Problem(
            f"{refused}: {endpoint.flag} {base}/models: {answer.detail}. This is the "
            "platform's configuration, not this run's: nothing in the run can fix it.",
            server=True,
            reason=refused,
        )
    if answer.key_refused:
        words = answer.detail.removeprefix(f"HTTP {answer.status}: ")
        return Problem(
            f"{refused}: {endpoint.flag} {base}/models refused the credentials (HTTP "
            f"{answer.status}): {words} (the {endpoint.side}'s key: {endpoint.key_flag})",
            server=True,
            reason=refused,
        )
    if answer.kind == CREDENTIALS_ERROR:  # the key's file could not be read, on every attempt
        return Problem(
            f"{refused}: {endpoint.flag} {base}: the {endpoint.side}'s key "
            f"({endpoint.key_flag}) could not be read: {answer.detail}",
            server=True,
            reason=refused,
        )
    said = answer.reason or answer.detail
    if answer.reason and answer.detail and answer.kind != TIMEOUT:
        said += f" ({answer.detail})"
    tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
    unreachable = _reason(endpoint.side, UNREACHABLE)
    return Problem(
        f"{unreachable}: {endpoint.flag}: Cannot reach {base}/models ({tries} in "
        f"{took:.1f} s): {said}",
        server=True,
        reason=unreachable,
    )


async def _check(
    endpoint: _Endpoint, attempts: int, timeout_s: float, say: Say | None
) -> list[Problem]:
    """Check one endpoint (:func:`preflight`'s policy); its problems."""
    from kyai.evaluation import EndpointConfigError, RetryPolicy
    from kyai.evaluation._client import ChatClient, RetryNote
    from kyai.evaluation._generate import check_served
    from kyai.evaluation._keyfile import KeyFile

    key = endpoint.key if isinstance(endpoint.key, str | KeyFile) else None
    started = time.monotonic()
    async with ChatClient(
        endpoint.url, api_key=key, timeout_s=timeout_s,
        retry=RetryPolicy(max_retries=0), max_connections=1,
    ) as client:  # fmt: skip
        for attempt in range(1, attempts + 1):
            answer = await client.models_answer()
            if answer.cards is not None or answer.key_refused or attempt == attempts:
                break
            wait = CHECK_WAITS_S[min(attempt, len(CHECK_WAITS_S)) - 1]
            if answer.retry_after is not None:
                wait = min(answer.retry_after, max(CHECK_WAITS_S))
            if say is not None:
                said = say(RetryNote(answer.what, attempt, attempts, wait).text(endpoint.side))
                if said is not None:
                    await said
            await asyncio.sleep(wait)
        base = client.base_url
    if answer.cards is None:
        return [_failed(endpoint, base, answer, attempt, time.monotonic() - started)]
    problems = []
    for flag, model in endpoint.models:
        try:
            check_served(answer.cards, model, base, endpoint.side)
        except EndpointConfigError as exc:
            reason = _reason(endpoint.side, MODEL_NOT_SERVED)
            problems.append(Problem(f"{reason}: {flag} {model}: {exc}", server=True, reason=reason))
    return problems


async def check_server(
    side: str,
    where: str,
    url: str,
    models: Sequence[tuple[str, str]],
    *,
    key: str | None,
    key_source: str,
    attempts: int = CHECK_ATTEMPTS,
    say: Say | None = None,
) -> list[Problem]:
    """Check one endpoint as :func:`preflight` does, for a caller without a command line.

    ``side`` is ``candidate`` or ``judge``; ``where`` names what gave the URL in the problems
    (a flag, or a resource's field such as ``spec.judge.llm.endpoint``); ``models`` the
    (field, model) pairs it must serve; ``key_source`` where the key came from (said when it
    is refused). The same attempts, waits, time-outs and reasons as the CLI's check.
    """
    endpoint = _Endpoint(side, where, url, tuple(models), key, key_source)
    return await _check(endpoint, attempts, PROBE_TIMEOUT_S, say)


async def _servers(
    args: argparse.Namespace,
    phases: tuple[str, ...],
    keys: dict[str, object],
    *,
    attempts: int,
    say: Say | None,
) -> list[Problem]:
    timeout = min(PROBE_TIMEOUT_S, args.request_timeout)
    checks = [
        _check(endpoint, attempts, timeout, say) for endpoint in _endpoints(args, phases, keys)
    ]
    found = await asyncio.gather(*checks)
    return [problem for problems in found for problem in problems]


async def preflight(
    args: argparse.Namespace,
    phases: tuple[str, ...],
    *,
    check_output: Callable[[Path], Path | None],
    say: Say | None = None,
) -> None:
    """Raise :class:`PreflightError` with every problem found, before anything is sent.

    ``check_output`` makes ``--output`` (raising :class:`UsageError`, one problem of the list,
    when it cannot); ``args.created_output`` records the directory it made, for the caller to
    remove on failure. ``say`` hears each failed attempt of an endpoint's check that is tried
    again.
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
        # Beside input problems, once each: the command is being fixed.
        attempts = 1 if problems else 1 + min(CHECK_ATTEMPTS - 1, args.max_retries)
        problems += await _servers(args, phases, keys, attempts=attempts, say=say)
    if problems:
        raise PreflightError(problems)
