"""Plan resolution of an EvaluationRun: read its references once, decide everything it needs.

:func:`resolve_plan` reads the Workload, the Snapshot (or the source run of
``spec.generationFrom``) and the judges, and returns a typed :class:`~kyai.builders.plan.Plan`
plus the status facts the run records when it starts. It raises :class:`Waiting` when a
reference is not there yet and :class:`Invalid` when the run can never start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kyai.api import EvaluationRunSpec, EvaluationRunStatus, JudgeSpec, SnapshotStatus
from kyai.api import WorkloadStatus as WorkloadStatusModel
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.builders.plan import JudgesPlan, LLMJudgePlan, Plan, SecretEnv, SecretSource
from kyai.controllers import _conditions as c
from kyai.controllers._services import Services

KIND = "EvaluationRun"


class RunBlocked(Exception):
    """The run cannot start now: ``reason`` and ``message`` go into its conditions."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Waiting(RunBlocked):
    """A dependency is not there yet: the run stays Pending with this reason."""


class Invalid(RunBlocked):
    """The run cannot ever start: it fails with this reason."""


@dataclass(frozen=True)
class Resolved:
    """A resolved run: its plan, and the facts its status records when it starts."""

    plan: Plan
    facts: EvaluationRunStatus
    objects: tuple[dict[str, Any], ...] = ()
    """The Workload and Snapshot as read (the in-use protection starts from them)."""


def _ready(obj: Mapping[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    return status.get("phase") == "Ready"


def _key_secret(env: str, ref: Mapping[str, Any] | None) -> SecretEnv | None:
    """The Secret key of an ``apiKeySecretRef`` as a worker's environment variable."""
    if not ref:
        return None
    return SecretEnv(env=env, secret=ref["name"], key=ref.get("key", "api-key"))


async def _grader_source(svc: Services, namespace: str, judge: JudgeSpec, name: str) -> str:
    spec = judge.python
    assert spec is not None
    ref = spec.config_map_ref
    if ref is None:
        assert spec.source is not None
        return spec.source
    config_map = await svc.kube.get("ConfigMap", namespace, ref.name)
    if config_map is None or ref.key not in (config_map.get("data") or {}):
        raise Waiting(
            c.JUDGE_NOT_READY,
            f"the grader source of judge {name} (ConfigMap {ref.name}, key {ref.key}) "
            "does not exist",
        )
    return str(config_map["data"][ref.key])


async def grader_declaration(
    svc: Services, namespace: str, judge: JudgeSpec, name: str
) -> dict[str, Any]:
    """The seed's declaration of a Python judge, its source read from a ConfigMap if need be."""
    from kyai.graders import GraderDeclarationError, PythonGrader

    spec = judge.python
    assert spec is not None
    grader: dict[str, Any] = {
        "type": "python",
        "contract": spec.contract,
        "metric_id": spec.metric_id,
        "source": await _grader_source(svc, namespace, judge, name),
        "timeout_seconds": spec.timeout_seconds,
        "max_model_calls": spec.max_model_calls,
    }
    if spec.execution is not None:
        grader["execution"] = spec.execution
    if spec.model_access is not None:
        grader["model_access"] = spec.model_access
    if spec.metrics is not None:
        grader["metrics"] = list(spec.metrics)
    declaration = {"grader": grader}
    try:
        PythonGrader.from_declaration(declaration)
    except GraderDeclarationError as exc:
        raise Invalid(c.INVALID_SPEC, f"judge {name}: {exc}") from exc
    return declaration


async def preprocess_declaration(
    svc: Services, namespace: str, spec: EvaluationRunSpec
) -> dict[str, Any] | None:
    """The seed's declaration of ``spec.preprocessors[0]``; None without a preprocessor.

    Its source is read from a ConfigMap if need be, and checked as the worker will load it.
    """
    from kyai.graders import GraderDeclarationError, PythonPreprocessor

    if not spec.preprocessors:
        return None
    pre = spec.preprocessors[0]
    source = pre.source
    if pre.config_map_ref is not None:
        ref = pre.config_map_ref
        config_map = await svc.kube.get("ConfigMap", namespace, ref.name)
        if config_map is None or ref.key not in (config_map.get("data") or {}):
            raise Waiting(
                c.SOURCE_UNAVAILABLE,
                f"the preprocessor source (ConfigMap {ref.name}, key {ref.key}) does not exist",
            )
        source = str(config_map["data"][ref.key])
    declaration = {
        "preprocess": {
            "type": "python",
            "contract": pre.contract,
            "source": source,
            "timeout_seconds": pre.timeout_seconds,
        }
    }
    try:
        PythonPreprocessor.from_declaration(declaration)
    except GraderDeclarationError as exc:
        raise Invalid(c.INVALID_SPEC, f"spec.preprocessors[0]: {exc}") from exc
    return declaration


def _check_builtin(dataset: str | None, builtin_dataset: bool) -> None:
    from kyai.graders import GraderUnavailableError, builtin_grader

    try:
        builtin_grader(dataset if builtin_dataset else None)
    except GraderUnavailableError as exc:
        raise Invalid(c.INVALID_SPEC, f"judge type builtin: {exc}") from exc


async def resolve_judges(
    svc: Services,
    run: Mapping[str, Any],
    judges: list[JudgeSpec],
    *,
    dataset: str | None,
    builtin_dataset: bool,
) -> JudgesPlan:
    """Resolve every judge, each keeping the spec's name; raise Waiting or Invalid."""
    from kyai.graders import PythonGrader

    namespace = run["metadata"]["namespace"]
    by_type: dict[str, list[JudgeSpec]] = {"llm": [], "builtin": [], "python": []}
    for judge in judges:
        by_type[judge.type].append(judge)
    for kind in ("llm", "builtin"):
        if len(by_type[kind]) > 1:
            raise Invalid(c.INVALID_SPEC, f"spec.judges: at most one judge of type {kind}")
    names = {kind: found[0].name or kind for kind, found in by_type.items() if found}
    names.pop("python", None)
    llm = await resolve_llm_judge(svc, run, by_type["llm"][0]) if by_type["llm"] else None
    if by_type["builtin"]:
        _check_builtin(dataset, builtin_dataset)
    graders: dict[str, dict[str, Any]] = {}
    for judge in by_type["python"]:
        name = judge.name or "python"
        graders[name] = await grader_declaration(svc, namespace, judge, name)
    needs_bridge = any(PythonGrader.from_declaration(d).model_access for d in graders.values())
    if needs_bridge and llm is None:
        llm = await resolve_llm_judge(svc, run, JudgeSpec())
    return JudgesPlan(
        llm=llm,
        use_llm=bool(by_type["llm"]),
        builtin=bool(by_type["builtin"]),
        graders=graders,
        names=names,
    )


async def _judge_workload(
    svc: Services, namespace: str, judge: JudgeSpec, workload_name: str
) -> LLMJudgePlan:
    workload = await svc.cached("Workload", namespace, workload_name)
    if workload is None:
        raise Waiting(c.JUDGE_NOT_READY, f"the judge Workload {workload_name} does not exist")
    if not _ready(workload):
        raise Waiting(c.JUDGE_NOT_READY, f"the judge Workload {workload_name} is not Ready")
    status = WorkloadStatusModel.model_validate(workload["status"])
    llm = judge.llm
    assert status.endpoint is not None
    return LLMJudgePlan(
        endpoint=status.endpoint,
        model=(llm.model if llm and llm.model else None)
        or status.served_model_name
        or workload["spec"]["model"],
        secret=_key_secret(
            worker_args.JUDGE_KEY_ENV,
            ((workload.get("spec") or {}).get("endpoint") or {}).get("apiKeySecretRef"),
        ),
        prompt=judge.prompt,
    )


def _default_judge(svc: Services, run: Mapping[str, Any], judge: JudgeSpec) -> LLMJudgePlan:
    namespace = run["metadata"]["namespace"]
    settings = svc.settings
    if not settings.default_judge_endpoint or not settings.default_judge_model:
        raise Invalid(
            c.JUDGE_NOT_CONFIGURED,
            "the run names no judge and the operator has no default judge: set spec.judge.llm "
            "(endpoint and model) or the Helm value defaultJudge",
        )
    copy_from = None
    secret = None
    if settings.default_judge_secret_name:
        source_ns = settings.default_judge_secret_namespace or namespace
        secret = SecretEnv(
            env=worker_args.JUDGE_KEY_ENV,
            secret=settings.default_judge_secret_name,
            key=settings.default_judge_secret_key,
        )
        if source_ns != namespace:
            copy_from = SecretSource(
                namespace=source_ns,
                name=settings.default_judge_secret_name,
                key=settings.default_judge_secret_key,
            )
            secret = SecretEnv(
                env=worker_args.JUDGE_KEY_ENV,
                secret=build.judge_secret_name(run["metadata"]["name"]),
                key="api-key",
            )
    return LLMJudgePlan(
        endpoint=settings.default_judge_endpoint,
        model=settings.default_judge_model,
        secret=secret,
        prompt=judge.prompt,
        copy_secret_from=copy_from,
    )


async def resolve_llm_judge(
    svc: Services, run: Mapping[str, Any], judge: JudgeSpec
) -> LLMJudgePlan:
    """A judge Workload, an endpoint of the spec, or the operator's default judge."""
    if judge.judge_workload is not None:
        namespace = run["metadata"]["namespace"]
        return await _judge_workload(svc, namespace, judge, judge.judge_workload)
    llm = judge.llm
    if llm is not None and llm.endpoint:
        if not llm.model:
            raise Invalid(c.INVALID_SPEC, "spec.judge.llm.model is required with an endpoint")
        ref = llm.api_key_secret_ref
        return LLMJudgePlan(
            endpoint=llm.endpoint,
            model=llm.model,
            secret=SecretEnv(env=worker_args.JUDGE_KEY_ENV, secret=ref.name, key=ref.key)
            if ref
            else None,
            prompt=judge.prompt,
        )
    return _default_judge(svc, run, judge)


async def _source_run(svc: Services, namespace: str, source_name: str) -> EvaluationRunStatus:
    source = await svc.kube.get(KIND, namespace, source_name)
    if source is None:
        raise Waiting(c.SOURCE_RUN_NOT_FOUND, f"the EvaluationRun {source_name} does not exist")
    status = EvaluationRunStatus.model_validate(source.get("status") or {})
    if status.phase != "Succeeded" or not status.results_claim:
        raise Waiting(
            c.SOURCE_RUN_NOT_READY,
            f"the EvaluationRun {source_name} has not succeeded yet "
            f"(phase {status.phase or 'Pending'})",
        )
    return status


async def _rejudge(svc: Services, run: Mapping[str, Any], spec: EvaluationRunSpec) -> Resolved:
    """The plan of a run judging another run's stored answers (``spec.generationFrom``)."""
    assert spec.generation_from is not None
    namespace, name = run["metadata"]["namespace"], run["metadata"]["name"]
    source_name = spec.generation_from.run_ref.name
    source = await _source_run(svc, namespace, source_name)
    assert source.results_claim is not None
    judges = await resolve_judges(
        svc,
        run,
        spec.judge_list(),
        dataset=source.dataset,
        builtin_dataset=source.dataset_version == "v1",
    )
    plan = Plan(
        generate=False,
        results_claim=source.results_claim,
        own_claim=False,
        judges=judges,
        generations_path=source.results_path or worker_args.results_path(source_name),
    )
    facts = EvaluationRunStatus(
        results_claim=source.results_claim, results_path=worker_args.results_path(name)
    )
    for field in ("model", "framework", "dataset", "dataset_version", "dataset_sha256"):
        if getattr(source, field) is not None:
            setattr(facts, field, getattr(source, field))
    return Resolved(plan=plan, facts=facts)


async def _ready_reference(
    svc: Services, kind: str, namespace: str, name: str, reasons: tuple[str, str]
) -> dict[str, Any]:
    """The Workload or Snapshot ``name`` once it is Ready (else Waiting)."""
    obj = await svc.cached(kind, namespace, name)
    if obj is None:
        raise Waiting(
            reasons[0],
            f"the {kind} {name} does not exist in namespace {namespace}; "
            "the run starts once it is Ready",
        )
    if obj["metadata"].get("deletionTimestamp"):
        raise Waiting(reasons[1], f"the {kind} {name} is being deleted")
    if not _ready(obj):
        phase = (obj.get("status") or {}).get("phase") or "Pending"
        raise Waiting(reasons[1], f"the {kind} {name} is {phase}, not Ready")
    return obj


async def _generate(svc: Services, run: Mapping[str, Any], spec: EvaluationRunSpec) -> Resolved:
    """The plan of a run generating answers of a Workload on a Snapshot, then judging them."""
    assert spec.workload_ref is not None and spec.snapshot_ref is not None
    namespace, name = run["metadata"]["namespace"], run["metadata"]["name"]
    workload = await _ready_reference(
        svc, "Workload", namespace, spec.workload_ref.name,
        (c.WORKLOAD_NOT_FOUND, c.WORKLOAD_NOT_READY),
    )  # fmt: skip
    snapshot = await _ready_reference(
        svc, "Snapshot", namespace, spec.snapshot_ref.name,
        (c.SNAPSHOT_NOT_FOUND, c.SNAPSHOT_NOT_READY),
    )  # fmt: skip
    s_status = SnapshotStatus.model_validate(snapshot["status"])
    judges = await resolve_judges(
        svc, run, spec.judge_list(),
        dataset=s_status.dataset, builtin_dataset=s_status.version == "v1",
    )  # fmt: skip
    w_status = WorkloadStatusModel.model_validate(workload["status"])
    w_spec = workload["spec"]
    model = w_status.served_model_name or w_spec.get("servedModelName") or w_spec["model"]
    secret = _key_secret(
        worker_args.CANDIDATE_KEY_ENV, (w_spec.get("endpoint") or {}).get("apiKeySecretRef")
    )
    results_claim = spec.storage.existing_claim or build.results_claim_name(name)
    preprocess = await preprocess_declaration(svc, namespace, spec)
    assert w_status.endpoint is not None
    plan = Plan(
        generate=True,
        generation_args=worker_args.generation_args(
            namespace=namespace, run=name, endpoint=w_status.endpoint, model=model,
            generation=spec.generation, api_key=secret is not None,
            context_window=w_status.max_model_len, preprocess=preprocess is not None,
        ),
        preprocess=preprocess,
        candidate_secret=secret,
        snapshot_config_map=s_status.config_map,
        snapshot_claim=s_status.claim,
        results_claim=results_claim,
        own_claim=spec.storage.existing_claim is None,
        judges=judges,
        generations_path=worker_args.results_path(name),
    )  # fmt: skip
    facts = EvaluationRunStatus(
        model=model, framework=w_spec.get("framework"), dataset=s_status.dataset,
        dataset_version=s_status.version, dataset_sha256=s_status.sha256,
        results_claim=results_claim, results_path=worker_args.results_path(name),
        questions=s_status.rows,
    )  # fmt: skip
    return Resolved(plan=plan, facts=facts, objects=(workload, snapshot))


async def resolve_plan(svc: Services, run: Mapping[str, Any], spec: EvaluationRunSpec) -> Resolved:
    """Resolve the run's references; raise Waiting or Invalid when it cannot start."""
    if spec.generation_from is not None:
        return await _rejudge(svc, run, spec)
    return await _generate(svc, run, spec)


async def missing_secret(
    svc: Services, namespace: str, plan: Plan, *, judge_only: bool = False
) -> Waiting | None:
    """Why a Secret the run's Jobs read is not there yet (a Waiting to report), or None.

    Checked before the run starts and again before the judge Job is created: a worker pod
    whose Secret is missing would sit in CreateContainerConfigError instead.
    """
    wanted: list[tuple[str, str, str, str]] = []  # (what, namespace, name, key)
    if plan.candidate_secret is not None and not judge_only and plan.generate:
        secret = plan.candidate_secret
        wanted.append(("the candidate's API key", namespace, secret.secret, secret.key))
    llm = plan.judges.llm
    if llm is not None and llm.copy_secret_from is not None:
        source = llm.copy_secret_from
        wanted.append(("the default judge's API key", source.namespace, source.name, source.key))
    elif llm is not None and llm.secret is not None:
        wanted.append(("the judge's API key", namespace, llm.secret.secret, llm.secret.key))
    for what, where, name, key in wanted:
        found = await svc.kube.get("Secret", where, name)
        if found is None:
            return Waiting(
                c.SECRET_NOT_FOUND,
                f"the Secret {name} in namespace {where} ({what}) does not exist; "
                "the run goes on once it does",
            )
        if key not in (found.get("data") or {}) and key not in (found.get("stringData") or {}):
            return Waiting(
                c.SECRET_NOT_FOUND,
                f"the Secret {name} in namespace {where} ({what}) has no key {key}; "
                "the run goes on once it has",
            )
    return None
