"""kyai lm-eval: lm-evaluation-harness tasks against a server, gated by thresholds.

Writes summary.json in --output: the metrics as "<task>/<metric>,<filter>", the lm-eval
version, each task's version and config hash, and a verdict per --threshold. The server's
/v1/models is read first: a server that cannot be reached, or that does not serve --model,
stops the command at once (exit status 3) instead of after lm_eval's retries.

--data-file SPLIT=PATH runs a task offline on local files in the task's native format
(gsm8k: question/answer; IFEval: key/prompt/instruction_id_list/kwargs, split train). With
--report-run NAMESPACE/NAME the metrics are also written into that EvaluationRun's
status.metrics (the operator's lm-eval Job).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kyai._exitcodes import (
    EXIT_FAILURE,
    EXIT_GATE_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)

log = logging.getLogger("kyai.lmeval")


class UsageError(Exception):
    """A flag's value cannot be used; the message names the flag."""


class ServerError(Exception):
    """The server cannot be reached, or does not serve the model (exit status 3)."""


#: Seconds the /v1/models probe may take.
PROBE_TIMEOUT_S = 30.0


def probe_server(endpoint: str, model: str, api_key: str | None) -> None:
    """Check that ``endpoint`` answers ``/v1/models`` and serves ``model`` (ServerError).

    lm_eval itself retries a dead server for minutes and then fails with a traceback; a
    look at the server's model list first says what is wrong at once.
    """
    import httpx

    from kyai.lmeval._run import api_url

    url = api_url(endpoint, use_chat=True).removesuffix("/chat/completions")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        response = httpx.get(f"{url}/models", headers=headers, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ServerError(f"--endpoint {endpoint}: cannot reach {url}/models: {exc}") from None
    if response.status_code != 200:
        raise ServerError(
            f"--endpoint {endpoint}: {url}/models answered HTTP {response.status_code}"
            + (" (check --api-key-env)" if response.status_code in (401, 403) else "")
        )
    try:
        served = [str(card.get("id")) for card in response.json().get("data") or []]
    except (ValueError, AttributeError):
        raise ServerError(f"--endpoint {endpoint}: {url}/models is not a model list") from None
    if served and model not in served:
        raise ServerError(
            f"--model {model}: the server at {url} does not serve it; it serves "
            + ", ".join(served[:10])
        )


def _assignment(flag: str, text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise UsageError(f"{flag} {text!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def parse_thresholds(items: Sequence[str], tasks: Sequence[str]) -> dict[str, float]:
    """``--threshold`` values as ``{"task/metric,filter": value}``.

    A key without ``task/`` applies to the only task (an error when there are several); a
    key without ``,filter`` means filter ``none``.
    """
    from kyai.lmeval._metrics import split_key

    out: dict[str, float] = {}
    for item in items:
        key, raw = _assignment("--threshold", item)
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"--threshold {item!r}: {raw!r} is not a number") from None
        if "/" not in key:
            if len(tasks) != 1:
                raise UsageError(f"--threshold {item!r}: name the task (TASK/{key}) of several")
            key = f"{tasks[0]}/{key}"
        try:
            task, metric, filt = split_key(key)
        except ValueError as exc:
            raise UsageError(f"--threshold {item!r}: {exc}") from None
        if task not in tasks:
            raise UsageError(f"--threshold {item!r}: task {task!r} is not among --task")
        out[f"{task}/{metric},{filt}"] = value
    return out


def parse_data_files(items: Sequence[str], tasks: Sequence[str]) -> dict[str, dict[str, str]]:
    """``--data-file [TASK:]SPLIT=PATH`` values as ``{task: {split: path}}``."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, path = _assignment("--data-file", item)
        task, sep, split = key.rpartition(":")
        if not sep:
            if len(tasks) != 1:
                raise UsageError(f"--data-file {item!r}: name the task (TASK:{key}=...) of several")
            task = tasks[0]
        if task not in tasks:
            raise UsageError(f"--data-file {item!r}: task {task!r} is not among --task")
        out.setdefault(task, {})[split] = path
    return out


_TASK_OPTIONS = ("limit", "num_fewshot", "gen_kwargs")


def parse_task_options(items: Sequence[str], tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--task-option TASK:KEY=VALUE`` values as ``{task: {key: value}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        task, sep, rest = item.partition(":")
        key, eq, value = rest.partition("=")
        if not sep or not eq or not task or not value:
            raise UsageError(f"--task-option {item!r}: expected TASK:KEY=VALUE")
        if task not in tasks:
            raise UsageError(f"--task-option {item!r}: task {task!r} is not among --task")
        if key not in _TASK_OPTIONS:
            raise UsageError(f"--task-option {item!r}: KEY is one of {', '.join(_TASK_OPTIONS)}")
        parsed: Any = value
        if key != "gen_kwargs":
            try:
                parsed = int(value)
            except ValueError:
                raise UsageError(
                    f"--task-option {item!r}: {value!r} is not a whole number"
                ) from None
            if parsed < (1 if key == "limit" else 0):
                raise UsageError(f"--task-option {item!r}: {parsed} is too small")
        out.setdefault(task, {})[key] = parsed
    return out


def register(subparsers: Any) -> None:
    """Add ``kyai lm-eval``."""
    parser = subparsers.add_parser(
        "lm-eval",
        help="run lm-evaluation-harness tasks against a server and gate on their metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--endpoint", required=True, help="the server's OpenAI-compatible URL")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument(
        "--task", action="append", required=True, help="an lm-eval task (repeatable)"
    )
    parser.add_argument("--output", required=True, type=Path, help="the results directory")
    parser.add_argument("--limit", type=int, help="at most this many documents per task")
    parser.add_argument("--num-fewshot", type=int, help="few-shot examples per prompt")
    parser.add_argument("--gen-kwargs", default="", help="lm-eval --gen_kwargs (k=v,k=v)")
    parser.add_argument(
        "--data-file",
        action="append",
        default=[],
        metavar="[TASK:]SPLIT=PATH",
        help="run offline on a local file in the task's native format (repeatable)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="[TASK/]METRIC,FILTER=VALUE",
        help="the lowest acceptable value of a metric (repeatable); exit 4 below it",
    )
    parser.add_argument(
        "--task-option",
        action="append",
        default=[],
        metavar="TASK:KEY=VALUE",
        help="a per-task limit, num_fewshot or gen_kwargs (repeatable; wins over the flags)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight")
    parser.add_argument(
        "--request-timeout", type=int, default=None, help="seconds one request may take"
    )
    parser.add_argument(
        "--completions",
        action="store_true",
        help="use /v1/completions (local-completions) instead of the chat endpoint",
    )
    parser.add_argument("--fewshot-as-multiturn", action="store_true")
    parser.add_argument(
        "--api-key-env", metavar="VAR", help="the environment variable holding the API key"
    )
    parser.add_argument(
        "--report-run", metavar="NAMESPACE/NAME", help="also write status.metrics of this run"
    )
    parser.add_argument("--quiet", action="store_true", help="do not echo lm_eval's output")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``kyai lm-eval`` handler."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except UsageError as exc:
        print(f"kyai lm-eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ServerError as exc:
        print(f"kyai lm-eval: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except subprocess.CalledProcessError as exc:
        tail = (exc.output or "").strip().splitlines()[-5:]
        print(
            f"kyai lm-eval: lm_eval failed with exit status {exc.returncode}; see the log in "
            f"{args.output}:\n  " + "\n  ".join(tail),
            file=sys.stderr,
        )
        return EXIT_FAILURE


def _run(args: argparse.Namespace) -> int:
    tasks: list[str] = list(dict.fromkeys(args.task))
    thresholds = parse_thresholds(args.threshold, tasks)
    data_files = parse_data_files(args.data_file, tasks)
    task_options = parse_task_options(args.task_option, tasks)
    api_key = _checked_api_key(args)
    probe_server(args.endpoint, args.model, api_key)
    output: Path = args.output
    output.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, float] = {}
    task_info: dict[str, Any] = {}
    lm_eval_version = None
    for task in tasks:
        found, info, version = _run_task(
            args, task, task_options.get(task, {}), data_files.get(task), thresholds, api_key
        )
        metrics.update({f"{task}/{key}": value for key, value in sorted(found.items())})
        lm_eval_version = version or lm_eval_version
        task_info[task] = info
    return _finish(args, metrics, thresholds, task_info, lm_eval_version)


def _checked_api_key(args: argparse.Namespace) -> str | None:
    """The API key of ``--api-key-env``, after the numeric flags are checked."""
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"--api-key-env {args.api_key_env}: the variable is not set")
    for flag, value in (("--limit", args.limit), ("--concurrency", args.concurrency)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.num_fewshot is not None and args.num_fewshot < 0:
        raise UsageError(f"--num-fewshot {args.num_fewshot}: must be at least 0")
    return api_key


def _run_task(
    args: argparse.Namespace,
    task: str,
    options: Mapping[str, Any],
    data_file: Mapping[str, str] | None,
    thresholds: Mapping[str, float],
    api_key: str | None,
) -> tuple[dict[str, float], dict[str, Any], str | None]:
    """Run one task; its metrics, its line of ``tasks`` in summary.json, lm-eval's version."""
    from kyai.lmeval._metrics import load_results, resolve_metric, task_metrics
    from kyai.lmeval._run import run_lm_eval
    from kyai.lmeval._runners import RUNNERS
    from kyai.lmeval._tasks import TaskError, derive_local_task

    output: Path = args.output
    num_fewshot = options.get("num_fewshot", args.num_fewshot)
    run_name, include_path = task, None
    if data_file is not None:
        try:
            local = derive_local_task(task, data_file, output / "tasks", num_fewshot=num_fewshot)
        except TaskError as exc:
            raise UsageError(str(exc)) from None
        run_name, include_path = local.name, local.include_path
    path = run_lm_eval(
        args.endpoint,
        args.model,
        run_name,
        output / task,
        api_key=api_key,
        echo=not args.quiet,
        use_chat=not args.completions,
        fewshot_as_multiturn=args.fewshot_as_multiturn,
        num_fewshot=num_fewshot,
        gen_kwargs=options.get("gen_kwargs", args.gen_kwargs),
        limit=options.get("limit", args.limit),
        max_concurrent=args.concurrency,
        request_timeout_s=args.request_timeout,
        include_path=include_path,
        env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"} if include_path else None,
    )
    results = load_results(path)
    found = task_metrics(results, run_name)
    wanted = set(RUNNERS[task].metric_keys) if task in RUNNERS else set()
    wanted |= {key.split("/", 1)[1] for key in thresholds if key.startswith(f"{task}/")}
    found.update(resolve_metric(results, run_name, sorted(wanted - set(found))))
    config = (results.get("configs") or {}).get(run_name)
    info = {
        "lm_eval_task": run_name,
        "version": (results.get("versions") or {}).get(run_name),
        "config_sha256": _config_hash(config),
        "samples": (results.get("n-samples") or {}).get(run_name),
        "results_file": str(path),
    }
    return found, info, results.get("lm_eval_version")


def _finish(
    args: argparse.Namespace,
    metrics: dict[str, float],
    thresholds: Mapping[str, float],
    task_info: dict[str, Any],
    lm_eval_version: str | None,
) -> int:
    """Gate the metrics, write summary.json, print the verdicts, report to the run."""
    from kyai.lmeval._metrics import gate

    verdicts = gate(metrics, thresholds)
    passed = all(verdict.passed for verdict in verdicts)
    summary = {
        "kind": "lm-eval",
        "endpoint": args.endpoint,
        "model": args.model,
        "lm_eval_version": lm_eval_version,
        "tasks": task_info,
        "metrics": metrics,
        "thresholds": [verdict.to_dict() for verdict in verdicts],
        "passed": passed,
    }
    output: Path = args.output
    (output / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for key, value in metrics.items():
        print(f"{key} = {value:.4f}")
    for verdict in verdicts:
        print(f"{'PASS' if verdict.passed else 'FAIL'} {verdict.key}: {verdict.reason}")
    if args.report_run:
        _report(args.report_run, summary)
    return EXIT_OK if passed else EXIT_GATE_FAILED


def _config_hash(config: Mapping[str, Any] | None) -> str | None:
    if not isinstance(config, Mapping):
        return None
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _report(target: str, summary: Mapping[str, Any]) -> None:
    from kyai.lmeval._report import report_metrics

    namespace, sep, name = target.partition("/")
    if not sep or not namespace or not name:
        raise UsageError(f"--report-run {target!r}: expected NAMESPACE/NAME")
    report_metrics(namespace, name, summary)
