"""What the kinds of run read when a run starts: references, the candidate, judges, Secrets.

Shared by the kinds (:mod:`kyai.controllers.kinds`): a Workload or Snapshot once it is Ready,
what a Ready Workload serves, the judges of a spec, the source run of a re-judge, and the
Secret keys the workers will read. They raise :class:`~kyai.controllers.runkind.Waiting`
when a reference is not there yet and :class:`~kyai.controllers.runkind.Invalid` when the
run can never start.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pydantic import ValidationError

from kyai.api import (
    EvaluationRunSpec,
    EvaluationRunStatus,
    GatewayToken,
    JudgedPlan,
    JudgeSpec,
    JudgesPlan,
    LLMJudgePlan,
    SecretEnv,
    SecretKeyReference,
    WorkloadSpec,
    WorkloadStatus,
)
from kyai.builders import evaluation as build
from kyai.builders import worker_args
from kyai.controllers import _conditions as c
from kyai.controllers._services import Services
from kyai.controllers.runkind import Invalid, SecretNeed, Waiting
from kyai.label_selector import LabelSelector
from kyai.settings import OperatorSettings

KIND = "EvaluationRun"


def _ready(obj: Mapping[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    return status.get("phase") == "Ready"


def key_secret(env: str, ref: SecretKeyReference | None) -> SecretEnv | None:
    """The Secret key of an ``apiKeySecretRef`` as a worker's environment variable."""
    if ref is None:
        return None
    return SecretEnv(env=env, secret=ref.name, key=ref.key)


@dataclass(frozen=True)
class Served:
    """What a Ready Workload serves: where, which model, with which API key."""

    endpoint: str
    model: str
    framework: str | None
    context_window: int | None
    api_key: SecretKeyReference | None
    metrics_url: str | None = None
    """The engine's Prometheus metrics (a served Workload whose engine exports them)."""
    gpus: int | None = None
    """GPUs serving the model (a served Workload's GPUs per node × nodes × replicas; None
    for an endpoint, or a CPU-only engine)."""
    engine_args_set: str | None = None
    """The EngineArgsSet a served Workload names (None: none; an endpoint never names one)."""
    engine_args_hash: str | None = None
    """The hash of that set's spec its engine was rendered from (its status.engineArgsHash)."""

    def record_engine_args(self, facts: EvaluationRunStatus) -> None:
        """Record in a run's ``facts`` the EngineArgsSet and its hash (those known).

        The run keeps them in its status, so what served it is known once the Workload is
        gone (a sweep's derived Workloads are deleted when their cells end).
        """
        if self.engine_args_set is not None:
            facts.engine_args_set = self.engine_args_set
        if self.engine_args_hash is not None:
            facts.engine_args_hash = self.engine_args_hash


def served_by(workload: Mapping[str, Any]) -> Served:
    """What the Ready ``workload`` serves (its status, else its spec, names the model)."""
    name = workload["metadata"]["name"]
    try:
        spec = WorkloadSpec.model_validate(workload.get("spec") or {})
        status = WorkloadStatus.model_validate(workload.get("status") or {})
    except ValidationError as exc:
        raise Waiting(c.WORKLOAD_NOT_READY, f"the Workload {name} cannot be read: {exc}") from exc
    if status.endpoint is None:
        raise Waiting(c.WORKLOAD_NOT_READY, f"the Workload {name} reports no endpoint yet")
    served = spec.endpoint is None
    gpus = spec.resources.gpus * spec.nodes * spec.replicas if served else 0
    return Served(
        endpoint=status.endpoint,
        model=status.served_model_name or spec.served_name,
        framework=spec.framework,
        context_window=status.max_model_len,
        api_key=spec.endpoint.api_key_secret_ref if spec.endpoint is not None else None,
        metrics_url=status.metrics_url if served else None,
        gpus=gpus or None,
        engine_args_set=None if spec.engine_args_set_ref is None else spec.engine_args_set_ref.name,
        engine_args_hash=status.engine_args_hash,
    )


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
    from kyai.graders import SPEC_CHOICES, GraderUnavailableError, builtin_grader

    try:
        builtin_grader(dataset if builtin_dataset else None, choices=SPEC_CHOICES)
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
    served = served_by(workload)
    llm = judge.llm
    return LLMJudgePlan(
        endpoint=served.endpoint,
        model=(llm.model if llm and llm.model else None) or served.model,
        secret=key_secret(worker_args.JUDGE_KEY_ENV, served.api_key),
        prompt=judge.prompt,
    )


NOT_CONFIGURED = (
    "the run names no judge and the operator has no default judge: set spec.judge.llm "
    "(endpoint and model) or the Helm value defaultJudge"
)


def namespace_refusal(
    selector: LabelSelector, namespace: str, labels: Mapping[str, str] | None
) -> Waiting | None:
    """Why a run of ``namespace`` may not use the default judge, or None when it may.

    ``labels`` are the namespace's (None: it was not found), ``selector`` the chart's
    ``defaultJudge.namespaceSelector``; an empty selector lets every namespace in.
    """
    if selector.empty or (labels is not None and selector.matches(labels)):
        return None
    return Waiting(
        c.DEFAULT_JUDGE_NOT_ALLOWED,
        f"the run names no judge, and namespace {namespace} may not use the default judge: "
        f"its labels do not match the Helm value defaultJudge.namespaceSelector "
        f"({selector.describe()}); the run starts once the namespace is labelled to match "
        "(kubectl label namespace), or name a judge in spec.judge",
    )


def default_judge_plan(
    settings: OperatorSettings, namespace: str, judge: JudgeSpec
) -> LLMJudgePlan:
    """The default judge for a run of ``namespace``: through the gateway when one is set.

    Through the gateway, the judge pod holds no key at all: it shows the gateway its projected
    ServiceAccount token. Without one, only a key Secret of the run's own namespace will do:
    the platform's key is never copied into a tenant's namespace, so a run of another
    namespace waits, Stalled at once (``DefaultJudgeNeedsGateway``), for the gateway.
    """
    model = settings.default_judge_model
    if settings.default_judge_gateway and model:
        token = GatewayToken(
            audience=settings.default_judge_gateway_audience,
            expiration_seconds=settings.default_judge_gateway_token_seconds,
        )
        return LLMJudgePlan(
            endpoint=settings.default_judge_gateway,
            model=model,
            prompt=judge.prompt,
            gateway_token=token,
        )
    if not settings.default_judge_endpoint or not model:
        raise Invalid(c.JUDGE_NOT_CONFIGURED, NOT_CONFIGURED)
    secret = None
    if settings.default_judge_secret_name:
        source_ns = settings.default_judge_secret_namespace or namespace
        if source_ns != namespace:
            raise Waiting(
                c.DEFAULT_JUDGE_NEEDS_GATEWAY,
                f"the run names no judge, and the default judge's API key is in namespace "
                f"{source_ns} (Secret {settings.default_judge_secret_name}): the key is never "
                "copied into a tenant's namespace, so runs of other namespaces reach the "
                "default judge only through the judge gateway (the operator's "
                "KYAI_DEFAULT_JUDGE_GATEWAY setting, which the Helm chart sets whenever "
                "defaultJudge.endpoint is set), or name a judge in spec.judge",
            )
        secret = SecretEnv(
            env=worker_args.JUDGE_KEY_ENV,
            secret=settings.default_judge_secret_name,
            key=settings.default_judge_secret_key,
        )
    return LLMJudgePlan(
        endpoint=settings.default_judge_endpoint,
        model=model,
        secret=secret,
        prompt=judge.prompt,
    )


async def _default_judge(svc: Services, run: Mapping[str, Any], judge: JudgeSpec) -> LLMJudgePlan:
    namespace = str(run["metadata"]["namespace"])
    settings = svc.settings
    if not settings.default_judge_model or not (
        settings.default_judge_gateway or settings.default_judge_endpoint
    ):
        raise Invalid(c.JUDGE_NOT_CONFIGURED, NOT_CONFIGURED)
    selector = settings.default_judge_namespace_selector
    if not selector.empty:
        found = await svc.kube.get("Namespace", "", namespace)
        labels = ((found or {}).get("metadata") or {}).get("labels")
        refusal = namespace_refusal(
            selector, namespace, (labels or {}) if found is not None else None
        )
        if refusal is not None:
            raise refusal
    return default_judge_plan(settings, namespace, judge)


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
    return await _default_judge(svc, run, judge)


#: How many runs the chain of a waiting re-judge's sources is followed through looking for a
#: circle (a longer chain is waited for as any source that has not succeeded).
SOURCE_CHAIN_LIMIT = 16

Reader = Callable[[str], Awaitable[Mapping[str, Any] | None]]


def _waiting_source(run: Mapping[str, Any]) -> str | None:
    """The source a re-judge that has not started names (None: not a re-judge, or started).

    A started run's source has succeeded: a chain of sources ends there.
    """
    if ((run.get("status") or {}).get("phase") or "Pending") != "Pending":
        return None
    ref = ((run.get("spec") or {}).get("generationFrom") or {}).get("runRef") or {}
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return str(name) if name else None


async def source_circle(
    run: str, source: str, read: Reader, *, limit: int = SOURCE_CHAIN_LIMIT
) -> list[str] | None:
    """``run``, its source, that run's source, ... up to the first run met again; else None.

    The chain ends (None) at a run that does not exist, is not a re-judge or has started, or
    after ``limit`` runs. ``[a, a]``: ``a`` re-judges itself; ``[a, b, a]``: ``a`` and ``b``
    re-judge each other; ``[u, a, b, a]``: ``u`` waits on the circle of ``a`` and ``b``.
    """
    chain = [run]
    name = source
    while name not in chain:
        if len(chain) > limit:
            return None
        found = await read(name)
        following = _waiting_source(found) if found is not None else None
        if following is None:
            return None
        chain.append(name)
        name = following
    return [*chain, name]


def circle_message(chain: Sequence[str]) -> str:
    """What a run whose chain of sources is ``chain`` (:func:`source_circle`) is told."""
    met = chain[-1]
    circle = list(chain[chain.index(met) : -1])
    steps = ", ".join(
        f"{name} re-judges {'itself' if name == source else source}"
        for name, source in pairwise(chain)
    )
    another = "another run, one that generated answers (or a re-judge of one)"
    if chain[0] == met and len(circle) == 1:
        return (
            f"{steps}: it would wait for its own answers forever; "
            f"spec.generationFrom.runRef.name must name {another}"
        )
    if chain[0] == met:
        return (
            f"{steps}: re-judges in a circle wait for each other's answers forever; "
            f"spec.generationFrom.runRef.name of one of them must name {another}"
        )
    return (
        f"{steps}: its source waits in a circle of re-judges forever; "
        f"spec.generationFrom.runRef.name of {' or '.join(circle)} must name {another}"
    )


async def source_run(
    svc: Services, namespace: str, source_name: str, *, run: str
) -> EvaluationRunStatus:
    """The status of the Succeeded run ``run`` re-judges; Waiting while it is not there.

    A source that Failed, or a chain of sources that comes round again
    (:func:`source_circle`), is a wait no time ends: Stalled at once.
    """
    source = await svc.kube.get(KIND, namespace, source_name)
    if source is None:
        raise Waiting(c.SOURCE_RUN_NOT_FOUND, f"the EvaluationRun {source_name} does not exist")
    status = EvaluationRunStatus.model_validate(source.get("status") or {})
    if status.phase == "Failed":
        raise Waiting(
            c.SOURCE_RUN_FAILED,
            f"the EvaluationRun {source_name} failed, so its answers cannot be judged again: "
            f"{status.message or 'no message'} (re-create it, or point "
            "spec.generationFrom.runRef at a run that succeeded)",
        )
    if status.phase != "Succeeded" or not status.results_claim:

        async def read(name: str) -> Mapping[str, Any] | None:
            return source if name == source_name else await svc.cached(KIND, namespace, name)

        circle = await source_circle(run, source_name, read)
        if circle is not None:
            raise Waiting(c.CIRCULAR_REJUDGE, circle_message(circle))
        raise Waiting(
            c.SOURCE_RUN_NOT_READY,
            f"the EvaluationRun {source_name} has not succeeded yet "
            f"(phase {status.phase or 'Pending'})",
        )
    return status


def generations_of(status: EvaluationRunStatus, source_name: str) -> str:
    """Where the answers a Succeeded run was judged on are (a re-judge re-judges them too).

    A run's judge read them where its plan says: a generating run's own results, a
    re-judge's source's (a re-judge's own results hold only its judgements).
    """
    if isinstance(status.plan, JudgedPlan):
        return status.plan.generations_path
    return status.results_path or worker_args.results_path(source_name)


async def ready_reference(
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
        status = obj.get("status") or {}
        phase = status.get("phase") or "Pending"
        if kind == "Workload" and stalled(obj):
            # It cannot serve until someone changes something (a crash-looping engine past
            # spec.restartLimit, flags its version refuses): the run fails now, naming it,
            # rather than waiting for it without end.
            said = _ready_message(status) or phase
            raise Invalid(c.WORKLOAD_FAILED, f"the Workload {name} cannot serve: {said}")
        if kind == "Snapshot":
            raise snapshot_waiting(name, phase, status, reasons[1])
        raise Waiting(reasons[1], f"the {kind} {name} is {phase}, not Ready")
    return obj


def snapshot_waiting(name: str, phase: str, status: Mapping[str, Any], reason: str) -> Waiting:
    """A run waiting for a Snapshot that is not Ready: the Snapshot's own reason and words.

    What its source said (``SourceNotFound``, ``SourceForbidden``: Stalled as the Snapshot
    is; ``SourceUnreachable``) becomes the run's reason; otherwise ``reason``
    (``SnapshotNotReady``). The Snapshot's message is quoted either way.
    """
    for condition in status.get("conditions") or []:
        if condition.get("type") == c.READY and condition.get("message"):
            said = str(condition.get("reason") or "")
            passed = said if said in c.SOURCE_FAILURES else reason
            told = f"the Snapshot {name} is {phase}, not Ready ({said}): {condition['message']}"
            return Waiting(passed, told)
    return Waiting(reason, f"the Snapshot {name} is {phase}, not Ready")


def stalled(obj: Mapping[str, Any] | None) -> bool:
    """Whether kstatus' ``Stalled`` condition is True in ``obj``'s status."""
    return any(
        isinstance(condition, Mapping)
        and condition.get("type") == c.STALLED
        and condition.get("status") == "True"
        for condition in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def _ready_message(status: Mapping[str, Any]) -> str:
    """The ``Ready`` condition's reason and message (``EngineCrashing: ...``)."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == c.READY and condition.get("status") != "True":
            reason, message = condition.get("reason"), condition.get("message")
            return f"{reason}: {message}" if reason and message else str(message or reason or "")
    return str(status.get("message") or "")


def judge_secrets(judges: JudgesPlan, namespace: str) -> tuple[SecretNeed, ...]:
    """The Secret key the judge pod reads (none behind the judge gateway)."""
    llm = judges.llm
    if llm is not None and llm.secret is not None:
        secret = llm.secret
        return (SecretNeed("the judge's API key", namespace, secret.secret, secret.key),)
    return ()


def candidate_secrets(secret: SecretEnv | None, namespace: str) -> tuple[SecretNeed, ...]:
    """The Secret key holding the candidate's API key, if it has one."""
    if secret is None:
        return ()
    return (SecretNeed("the candidate's API key", namespace, secret.secret, secret.key),)


async def secret_value(svc: Services, namespace: str, name: str, key: str) -> str | None:
    """The text of a Secret's key (stripped), None when the Secret or the key is missing."""
    secret = await svc.kube.get("Secret", namespace, name)
    data = (secret or {}).get("data") or {}
    if key not in data:
        return None
    return base64.b64decode(data[key]).decode("utf-8").strip()


async def missing_secret(svc: Services, needs: tuple[SecretNeed, ...]) -> Waiting | None:
    """Why a Secret key in ``needs`` is not there yet (a Waiting to report), or None."""
    for need in needs:
        found = await svc.kube.get("Secret", need.namespace, need.name)
        where = f"the Secret {need.name} in namespace {need.namespace} ({need.what})"
        if found is None:
            return Waiting(
                c.SECRET_NOT_FOUND, f"{where} does not exist; the run goes on once it does"
            )
        if need.key not in (found.get("data") or {}) and need.key not in (
            found.get("stringData") or {}
        ):
            return Waiting(
                c.SECRET_NOT_FOUND, f"{where} has no key {need.key}; the run goes on once it has"
            )
    return None


def results_claim_of(spec: EvaluationRunSpec, run: str) -> str:
    """The claim the run's results go to: the spec's existing one, else the run's own."""
    return spec.storage.existing_claim or build.results_claim_name(run)
