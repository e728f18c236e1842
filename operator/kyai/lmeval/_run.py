"""Driving the ``lm_eval`` CLI against an OpenAI-compatible server (seed 003's ``run_lm_eval``).

lm-evaluation-harness is an optional extra (``kyai-operator[lm-eval]``): nothing here imports
it. ``lm_eval`` runs as a subprocess (``python -m lm_eval`` with this interpreter unless
``lm_eval_command`` says otherwise); its output is teed to ``<task>_lm_eval.log`` in the
results directory, a non-zero exit raises :class:`subprocess.CalledProcessError`, and the
newest ``results_<timestamp>.json`` (lm-eval nests it under a directory named after the
model) is returned.

The model arguments are those of lm-eval's ``local-chat-completions`` /
``local-completions`` models (``lm_eval/models/openai_completions.py``): ``base_url`` is the
full ``/v1/chat/completions`` or ``/v1/completions`` URL, ``tokenized_requests=False`` and
``tokenizer_backend=None`` keep tokenization on the server, ``num_concurrent`` is the
number of requests in flight. The API key travels in ``OPENAI_API_KEY`` (``EMPTY`` unless one
is given), never on the command line.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

log = logging.getLogger("kyai.lmeval")

#: lm-eval's results file names: ``results_2026-12-01T03-31-59.123456.json``.
_RESULTS_RE = re.compile(r"^results_(?P<stamp>.+)\.json$")
_STAMP_FORMATS = ("%Y-%m-%dT%H-%M-%S.%f", "%Y-%m-%dT%H-%M-%S")


def api_url(base_url: str, *, use_chat: bool) -> str:
    """The full endpoint URL lm-eval posts to, from a server's base URL (with or without /v1).

    ``http://host:8000`` and ``http://host:8000/v1`` both give
    ``http://host:8000/v1/chat/completions`` (or ``/v1/completions``); a URL already ending
    in the route is kept.
    """
    route = "chat/completions" if use_chat else "completions"
    url = base_url.rstrip("/")
    if url.endswith(f"/{route}"):
        return url
    if not url.endswith("/v1"):
        url += "/v1"
    return f"{url}/{route}"


def build_model_args(
    base_url: str,
    model: str,
    *,
    use_chat: bool = True,
    max_concurrent: int = 1,
    max_length: int | None = None,
    max_retries: int | None = None,
    request_timeout_s: int | None = None,
) -> str:
    """The ``--model_args`` string of lm-eval's local(-chat)-completions models."""
    if "," in model or "=" in model:
        raise ValueError(f"model: {model!r} cannot contain ',' or '=' (lm-eval's model_args)")
    parts = [
        f"model={model}",
        f"base_url={api_url(base_url, use_chat=use_chat)}",
        f"num_concurrent={max_concurrent}",
        "tokenized_requests=False",
        "tokenizer_backend=None",
    ]
    if max_length is not None:
        parts.append(f"max_length={max_length}")
    if max_retries is not None:
        parts.append(f"max_retries={max_retries}")
    if request_timeout_s is not None:
        parts.append(f"timeout={request_timeout_s}")
    return ",".join(parts)


def build_argv(
    base_url: str,
    model: str,
    task: str,
    results_dir: str | Path,
    *,
    use_chat: bool = True,
    apply_chat_template: bool | None = None,
    fewshot_as_multiturn: bool = False,
    num_fewshot: int | None = None,
    gen_kwargs: str = "",
    limit: int | float | None = None,
    max_concurrent: int = 1,
    max_length: int | None = None,
    max_retries: int | None = None,
    request_timeout_s: int | None = None,
    include_path: str | Path | None = None,
    log_samples: bool = False,
    extra_args: Sequence[str] = (),
    lm_eval_command: Sequence[str] | None = None,
) -> list[str]:
    """The ``lm_eval`` command line (no secret in it).

    ``apply_chat_template`` defaults to ``use_chat`` (the chat endpoint needs it);
    ``fewshot_as_multiturn`` needs the chat template, as lm-eval requires.
    """
    if apply_chat_template is None:
        apply_chat_template = use_chat
    if fewshot_as_multiturn and not apply_chat_template:
        raise ValueError("fewshot_as_multiturn needs apply_chat_template (lm-eval's rule)")
    command = list(lm_eval_command or (sys.executable, "-m", "lm_eval"))
    argv = [
        *command,
        "--model", "local-chat-completions" if use_chat else "local-completions",
        "--model_args",
        build_model_args(
            base_url, model, use_chat=use_chat, max_concurrent=max_concurrent,
            max_length=max_length, max_retries=max_retries,
            request_timeout_s=request_timeout_s,
        ),
        "--tasks", task,
        "--output_path", str(results_dir),
    ]  # fmt: skip
    if apply_chat_template:
        argv.append("--apply_chat_template")
    if fewshot_as_multiturn:
        argv.append("--fewshot_as_multiturn")
    if num_fewshot is not None:
        argv += ["--num_fewshot", str(num_fewshot)]
    if gen_kwargs:
        argv += ["--gen_kwargs", gen_kwargs]
    if limit is not None:
        argv += ["--limit", str(limit)]
    if include_path is not None:
        argv += ["--include_path", str(include_path)]
    if log_samples:
        argv.append("--log_samples")
    argv += list(extra_args)
    return argv


def _stamp(path: Path) -> datetime | None:
    match = _RESULTS_RE.match(path.name)
    if match is None:
        return None
    for fmt in _STAMP_FORMATS:
        try:
            return datetime.strptime(match["stamp"], fmt)
        except ValueError:
            continue
    return None


def newest_results(results_dir: str | Path) -> Path:
    """The newest ``results_<timestamp>.json`` under ``results_dir`` (any depth).

    Newest by the timestamp lm-eval writes in the name (files whose name carries none are
    ordered by modification time after those that do). Raises FileNotFoundError when
    there is none.
    """
    root = Path(results_dir)
    found = [path for path in root.rglob("results_*.json") if path.is_file()]
    if not found:
        raise FileNotFoundError(f"no results_*.json under {root}")

    def key(path: Path) -> tuple[int, datetime, float]:
        stamp = _stamp(path)
        return (1, stamp, 0.0) if stamp else (0, datetime.min, path.stat().st_mtime)

    return max(found, key=key)


def run_lm_eval(
    base_url: str,
    model: str,
    task: str,
    results_dir: str | Path,
    *,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    echo: bool = True,
    process_timeout_s: float | None = None,
    **options: object,
) -> Path:
    """Run ``lm_eval`` for ``task`` against the server; return the newest results file.

    ``options`` are :func:`build_argv`'s keywords (``use_chat``, ``num_fewshot``,
    ``gen_kwargs``, ``limit``, ``max_concurrent``, ``extra_args``, ``include_path``, ...).
    The output goes to ``<results_dir>/<task>_lm_eval.log`` and, with ``echo``, to this
    process's stdout. Raises :class:`subprocess.CalledProcessError` when lm_eval fails
    (its exit status, the command and the log's tail as ``output``).
    """
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    argv = build_argv(base_url, model, task, out, **options)  # type: ignore[arg-type]
    child_env = {**os.environ, **(env or {})}
    child_env["OPENAI_API_KEY"] = api_key or "EMPTY"
    child_env.setdefault("OPENAI_API_BASE", api_url(base_url, use_chat=True).rsplit("/", 2)[0])
    child_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    log.info("lm_eval %s against %s -> %s", task, base_url, out)
    with tempfile.TemporaryDirectory(prefix="kyai-nltk-") as nltk_data:
        if "NLTK_DATA" not in child_env:
            # lm-eval's IFEval imports nltk and downloads punkt_tab when nltk cannot find it:
            # hand it the bundled model instead (air-gapped clusters, tests offline). In a
            # private directory: nltk refuses to write where other accounts may (a volume).
            from kyai.graders import write_punkt_tab

            write_punkt_tab(Path(nltk_data))
            child_env["NLTK_DATA"] = nltk_data
        code, tail = _run_child(argv, child_env, out / f"{_safe(task)}_lm_eval.log",
                                echo=echo, process_timeout_s=process_timeout_s)  # fmt: skip
    if code != 0:
        raise subprocess.CalledProcessError(code, argv, output="".join(tail))
    return newest_results(out)


#: lm_eval records the git hash of its working directory (`git describe`), which means
#: nothing for a run against a server; outside a checkout git prints this line, dropped.
_GIT_NOISE = "fatal: not a git repository"


def _run_child(
    argv: list[str],
    child_env: dict[str, str],
    log_path: Path,
    *,
    echo: bool,
    process_timeout_s: float | None,
) -> tuple[int, list[str]]:
    """Run lm_eval, teeing its output to ``log_path``; its exit code and last lines."""
    tail: list[str] = []
    with (
        log_path.open("w", encoding="utf-8") as sink,
        subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            text=True,
            errors="replace",
        ) as proc,
    ):
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if line.startswith(_GIT_NOISE):
                    continue
                sink.write(line)
                if echo:
                    sys.stdout.write(line)
                tail.append(line)
                del tail[:-40]
            code = proc.wait(timeout=process_timeout_s)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return code, tail


def _safe(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", task) or "task"
