"""The worker command-line contract: the ``kyai generate`` and ``kyai judge`` argument lists.

The operator starts its Jobs with these arguments and nothing else; the flags are those of
:mod:`kyai.evaluation.cli`. Pure functions, unit-tested without a cluster.
"""

from __future__ import annotations

from kyai.api import GenerationSettings, JudgesPlan
from kyai.gateway import TOKEN_MOUNT_PATH

#: Where the worker containers find things.
SNAPSHOT_MOUNT = "/etc/kyai/snapshot"
RESULTS_MOUNT = "/results"
GRADERS_MOUNT = "/etc/kyai/graders"

#: The graders ConfigMap's key holding spec.preprocessors' declaration (judge names cannot
#: start with "_", so it never meets a grader's key).
PREPROCESS_KEY = "_preprocess.json"

#: Environment variables the workers read secrets from (named by --api-key-env flags).
CANDIDATE_KEY_ENV = "KYAI_CANDIDATE_API_KEY"
JUDGE_KEY_ENV = "KYAI_JUDGE_API_KEY"


def gateway_token_file() -> str:
    """Where a judge pod behind the judge gateway reads its token (``token_mount()``'s file)."""
    return f"{TOKEN_MOUNT_PATH}/token"


def results_path(run: str) -> str:
    """The directory of a run's results inside the results claim."""
    return f"{RESULTS_MOUNT}/{run}"


def _common(generation: GenerationSettings, namespace: str, run: str) -> list[str]:
    return [
        "--concurrency", str(generation.concurrency),
        "--request-timeout", str(generation.request_timeout_seconds),
        "--max-retries", str(generation.max_retries),
        "--report-run", f"{namespace}/{run}",
    ]  # fmt: skip


def generation_args(
    *,
    namespace: str,
    run: str,
    endpoint: str,
    model: str,
    generation: GenerationSettings,
    api_key: bool,
    context_window: int | None,
    preprocess: bool = False,
    server_metrics: str | None = None,
    gpus: int | None = None,
) -> list[str]:
    """``kyai generate`` over the mounted snapshot, answers into the run's results folder.

    Streamed unless ``generation.stream`` is false (``--no-stream``); ``generation.sampling``
    and ``generation.limit`` as ``--temperature``/``--top-p``/``--seed`` and ``--limit``; a
    served Workload adds
    its engine's metrics URL (``--server-metrics``: the engine's own histograms are read
    before and after the phase) and its GPU count (``--gpus``: GPU-seconds of the phase).
    """
    args = [
        "generate",
        "--snapshot", SNAPSHOT_MOUNT,
        "--endpoint", endpoint,
        "--model", model,
        "--output", results_path(run),
        *_common(generation, namespace, run),
    ]  # fmt: skip
    if api_key:
        args += ["--api-key-env", CANDIDATE_KEY_ENV]
    if context_window:  # the server's own figure still wins in the worker
        args += ["--context-window", str(context_window)]
    if preprocess:
        args += ["--preprocess", f"{GRADERS_MOUNT}/{PREPROCESS_KEY}"]
    if not generation.stream:
        args.append("--no-stream")
    sampling = generation.sampling.sent() if generation.sampling is not None else {}
    for name, value in sampling.items():  # --temperature, --top-p, --seed
        args += [f"--{name.replace('_', '-')}", str(value)]
    if generation.limit is not None:
        args += ["--limit", str(generation.limit)]
    if server_metrics:
        args += ["--server-metrics", server_metrics]
    if gpus:
        args += ["--gpus", str(gpus)]
    return args


def judge_args(
    judges: JudgesPlan,
    *,
    namespace: str,
    run: str,
    generations_path: str,
    generation: GenerationSettings,
) -> list[str]:
    """``kyai judge`` of the stored answers, each judge named as the spec names it."""
    args = [
        "judge",
        "--generations", generations_path,
        "--output", results_path(run),
        *_common(generation, namespace, run),
    ]  # fmt: skip
    for kind, wanted in (("llm", judges.use_llm), ("builtin", judges.builtin)):
        if wanted:
            args += ["--judge", kind]
            name = judges.names.get(kind, kind)
            if name != kind:
                args += ["--judge-name", f"{kind}={name}"]
    for name in judges.graders:
        args += ["--grader", f"{GRADERS_MOUNT}/{name}.json"]
    llm = judges.llm
    if llm is not None:
        args += ["--judge-endpoint", llm.endpoint, "--judge-model", llm.model]
        if llm.gateway_token is not None:
            args += ["--judge-api-key-file", gateway_token_file()]
        elif llm.secret is not None:
            args += ["--judge-api-key-env", JUDGE_KEY_ENV]
        if llm.prompt and judges.use_llm:
            args += ["--judge-prompt", llm.prompt]
    return args
