"""``kyai generate``, ``kyai judge`` and ``kyai run``: the engine on the command line.

Exit status (:mod:`kyai._exitcodes`): 0 when the run completed (whatever the score), 1 for
an unexpected failure, 2 for bad input (flags, URLs, paths, dataset files, run directories), 3
when a server cannot be reached or cannot answer a single request (unknown model, 404, HTML,
refused credentials), 130 when interrupted (what was stored is kept). Before anything is sent
every endpoint the command uses is checked (:mod:`kyai.evaluation._preflight`); one that fails
ends it with exit 3 and a message leading with its reason (``CandidateUnreachable``,
``CandidateModelNotServed``, ``CandidateKeyRefused``, and the same for ``Judge``). No
traceback reaches the user unless ``--debug`` is given. API keys are read from the environment
variable a flag names (or, for the judge, from the file ``--judge-api-key-file`` names, read
again when it changes), never from a flag's value, and are redacted from everything printed
or stored.

This module is the commands' parser only: their handlers import the phases
(:mod:`kyai.evaluation._cli_run`) when they run, so that parsing ``kyai generate --help``
imports neither an HTTP client nor the graders.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kyai._argtypes import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from kyai._exitcodes import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from kyai.evaluation._gates import add_gate_flags

__all__ = ["EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE"]


def _add_candidate_flags(parser: argparse.ArgumentParser) -> None:
    from kyai.evaluation._serving import add_serving_flags

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
        type=positive_int,
        metavar="TOKENS",
        help="the model's context window when the server does not report max_model_len and no "
        "--model-config is given (default 8192); the server's own figure always wins",
    )
    group.add_argument(
        "--retry-errors",
        action="store_true",
        help="when resuming, ask again for rows whose stored answer is an error",
    )
    add_serving_flags(parser)
    _add_decoding_flags(parser)
    _add_dataset_flags(parser)


def _add_decoding_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "decoding and subset (each changes the comparison key)",
        "Without them no sampling parameter is sent: the server's and the model's generation "
        "defaults (e.g. its generation_config.json) decide.",
    )
    group.add_argument(
        "--temperature",
        type=non_negative_float,
        metavar="T",
        help="sampling temperature sent with every request (0: greedy)",
    )
    group.add_argument(
        "--top-p", type=probability, metavar="P", help="nucleus sampling's top_p (0 < P <= 1)"
    )
    group.add_argument(
        "--seed",
        type=non_negative_int,
        metavar="N",
        help="the sampling seed sent with every request",
    )
    group.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="ask only the first N questions (a smoke test): the result is marked as a subset, "
        "with its own comparison key, never ranked with runs of every question",
    )


def _add_dataset_flags(parser: argparse.ArgumentParser) -> None:
    from kyai.datasets import builtin_names

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
    keys = group.add_mutually_exclusive_group()
    keys.add_argument(
        "--judge-api-key-env",
        metavar="VAR",
        help="environment variable holding the judge's API key",
    )
    keys.add_argument(
        "--judge-api-key-file",
        metavar="PATH",
        help="a file holding the judge's API key, read again whenever it changes (a judge pod "
        "behind the judge gateway: its projected ServiceAccount token, which the kubelet "
        "rotates)",
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
        type=positive_int,
        default=16,
        metavar="N",
        help="requests in flight at most (default 16)",
    )
    parser.add_argument(
        "--request-timeout",
        type=positive_float,
        default=600.0,
        metavar="S",
        help="seconds one request may take (default 600)",
    )
    parser.add_argument(
        "--max-retries",
        type=non_negative_int,
        default=5,
        metavar="N",
        help="retries of a request after 429, 5xx, time-outs and connection "
        "errors, with exponential backoff (default 5); each is said on a line (what failed, "
        "the attempt, the next wait). The endpoint checks before the first request make at "
        "most 4 attempts (1 + N when fewer), 1, 2 and 4 s apart",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print the result line and errors only (no progress or retry lines)",
    )
    parser.add_argument(
        "--check-only",
        action="store_true",
        help="check the input and every endpoint the command would use (each answers "
        "/v1/models, accepts the key, lists the model), then exit: 0 when all pass, else 2 "
        "or 3 as the command would; nothing is sent or stored",
    )
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
        "in DIR/generations.jsonl; running it again resumes where it stopped. The candidate is "
        "checked first (it answers /v1/models, accepts the key, lists --model; up to 4 "
        "attempts, 1, 2 and 4 s apart): a failure exits 3 at once, its message leading with "
        "CandidateUnreachable, CandidateKeyRefused or CandidateModelNotServed.",
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
        "(never calling the candidate) and write DIR/summary.json. The judge is checked before "
        "the answers are read (it answers /v1/models, accepts the key, lists --judge-model): a "
        "failure exits 3 at once, its message leading with JudgeUnreachable, JudgeKeyRefused "
        "or JudgeModelNotServed.",
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
        description="Both phases into one directory: generate, then judge. The candidate and "
        "the judge are checked before anything is sent: a failure exits 3 at once, its "
        "message leading with its reason (CandidateUnreachable, JudgeKeyRefused, ...), "
        "without one generation request.",
    )
    _add_candidate_flags(run)
    _add_judge_flags(run)
    _add_common_flags(run)
    add_gate_flags(run)
    run.set_defaults(handler=_handle_run)


def _handle_generate(args: argparse.Namespace) -> int:
    from kyai.evaluation._cli_run import run_guarded

    return run_guarded(args, ("generate",))


def _handle_judge(args: argparse.Namespace) -> int:
    from kyai.evaluation._cli_run import run_guarded

    return run_guarded(args, ("judge",))


def _handle_run(args: argparse.Namespace) -> int:
    from kyai.evaluation._cli_run import run_guarded

    return run_guarded(args, ("generate", "judge"))
