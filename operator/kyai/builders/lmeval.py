"""The lm-eval Job of an EvaluationRun with ``spec.lmEval``: its plan, arguments and volumes.

Pure functions. The Job runs ``kyai lm-eval`` (:mod:`kyai.lmeval.cli`) in the lm-eval worker
image (the chart's ``lmEvalWorkerImage``: the project's image with the ``lm-eval`` extra),
once for all the run's tasks, against the Workload's endpoint; the worker writes the metrics
into ``status.metrics`` (``--report-run``) and the operator gates them
(``spec.thresholds.metrics``). Data files come from ConfigMaps or PVCs mounted read-only
under ``/etc/kyai/lmeval/<n>``.
"""

from __future__ import annotations

from typing import Any

from kyai.api import LmEvalDataFile, LmEvalPlan, LmEvalSpec, SecretEnv
from kyai.builders._common import LABEL_NAME_MAX, child_name
from kyai.builders.evaluation import results_claim_name
from kyai.builders.worker_args import CANDIDATE_KEY_ENV, results_path

#: Where the lm-eval worker finds its data files.
LMEVAL_DATA_MOUNT = "/etc/kyai/lmeval"


def lmeval_job_name(run: str) -> str:
    """The lm-eval Job's name (at most 63 characters, like the other worker Jobs)."""
    return child_name(run, "-lmeval", limit=LABEL_NAME_MAX)


def lmeval_plan(
    spec: LmEvalSpec,
    *,
    namespace: str,
    run: str,
    endpoint: str,
    model: str,
    concurrency: int,
    request_timeout_seconds: int,
    candidate_secret: SecretEnv | None,
    existing_claim: str | None = None,
) -> LmEvalPlan:
    """The plan of ``spec``: the ``kyai lm-eval`` arguments and the data files' volumes.

    The results go to ``existing_claim`` when the spec names one, else to the claim the
    operator creates for the run.
    """
    args = [
        "lm-eval",
        "--endpoint", endpoint,
        "--model", model,
        "--output", results_path(run),
        "--concurrency", str(concurrency),
        "--request-timeout", str(request_timeout_seconds),
        "--report-run", f"{namespace}/{run}",
        "--quiet",
    ]  # fmt: skip
    if not spec.chat:
        args.append("--completions")
    if spec.fewshot_as_multiturn:
        args.append("--fewshot-as-multiturn")
    if candidate_secret is not None:
        args += ["--api-key-env", CANDIDATE_KEY_ENV]
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for task in spec.tasks:
        args += ["--task", task.name]
        for option, value in (
            ("limit", task.limit),
            ("num_fewshot", task.num_fewshot),
            ("gen_kwargs", task.gen_kwargs),
        ):
            if value is not None and value != "":
                args += ["--task-option", f"{task.name}:{option}={value}"]
        for data in task.data_files or []:
            volume, mount, path = _data_file(data, len(volumes))
            volumes.append(volume)
            mounts.append(mount)
            args += ["--data-file", f"{task.name}:{data.split}={path}"]
    return LmEvalPlan(
        results_claim=existing_claim or results_claim_name(run),
        own_claim=existing_claim is None,
        args=args,
        tasks=[task.name for task in spec.tasks],
        volumes=volumes,
        mounts=mounts,
        candidate_secret=candidate_secret,
    )


def _data_file(data: LmEvalDataFile, index: int) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The volume of a task's data file, its read-only mount, and the file's path there."""
    volume = f"lmeval-data-{index}"
    where = f"{LMEVAL_DATA_MOUNT}/{index}"
    mount = {"name": volume, "mountPath": where, "readOnly": True}
    if data.config_map_ref is not None:
        ref = data.config_map_ref
        items = [{"key": ref.key, "path": "data.jsonl"}]
        return (
            {"name": volume, "configMap": {"name": ref.name, "items": items}},
            mount,
            f"{where}/data.jsonl",
        )
    pvc = data.persistent_volume_claim
    assert pvc is not None
    claim = {"claimName": pvc.claim_name, "readOnly": True}
    return {"name": volume, "persistentVolumeClaim": claim}, mount, f"{where}/{pvc.path}"
