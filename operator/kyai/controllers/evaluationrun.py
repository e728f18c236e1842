"""EvaluationRun: wait for the candidate, the snapshot and the judge; generate; judge; score.

The reconcile is idempotent and reads the actual state every time (the run's status, its
Jobs), so that a restarted operator picks up where it was and never creates a Job twice:
children have deterministic names and an existing one is adopted, not re-created.
Workers report progress and the result into the status; the operator owns phase and
conditions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kyai.api import EvaluationRunSpec, JudgeSpec
from kyai.builders import evaluation as build
from kyai.builders import owner_reference
from kyai.controllers import _conditions as c
from kyai.controllers._kube import KubeError
from kyai.controllers._services import Services, post_event

TERMINAL = ("Succeeded", "Failed")
KIND = "EvaluationRun"


class Waiting(Exception):
    """A dependency is not there yet: the run stays Pending with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Invalid(Exception):
    """The run cannot ever start: it fails with this reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class JudgePlan:
    """A resolved LLM judge."""

    endpoint: str
    model: str
    secret: build.SecretEnv | None
    prompt: str | None
    copy_secret_from: tuple[str, str, str] | None = None  # (namespace, name, key)


@dataclass(frozen=True)
class JudgesPlan:
    """Every judge of a run: at most one LLM judge, the built-in grader, Python graders."""

    llm: JudgePlan | None
    use_llm: bool
    builtin: bool
    graders: dict[str, dict[str, Any]]
    names: dict[str, str]  # the judge CLI's names -> the spec's names

    @property
    def model(self) -> str:
        """What status.judgeModel shows: the LLM judge, else the first grader."""
        if self.use_llm and self.llm is not None:
            return self.llm.model
        if self.builtin:
            return "builtin"
        return next(iter(self.graders), "python")


@dataclass(frozen=True)
class Plan:
    """Everything a started run needs, resolved once and kept in its status."""

    generate: bool
    generation_args: list[str]
    candidate_secret: build.SecretEnv | None
    snapshot_config_map: str | None
    results_claim: str
    own_claim: bool
    judge: JudgesPlan
    generations_path: str
    status: dict[str, Any]


def _ready(obj: Mapping[str, Any] | None) -> bool:
    status = (obj or {}).get("status") or {}
    return status.get("phase") == "Ready"


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A stable hash of a spec."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


async def _grader_declaration(
    svc: Services, namespace: str, judge: JudgeSpec, name: str
) -> dict[str, Any]:
    """The seed's declaration of a Python judge, its source read from a ConfigMap if need be."""
    from kyai.graders import GraderDeclarationError, PythonGrader

    spec = judge.python
    assert spec is not None
    source = spec.source
    if spec.config_map_ref is not None:
        ref = spec.config_map_ref
        config_map = await svc.kube.get("ConfigMap", namespace, ref.name)
        if config_map is None or ref.key not in (config_map.get("data") or {}):
            raise Waiting(
                c.JUDGE_NOT_READY,
                f"the grader source of judge {name} (ConfigMap {ref.name}, key {ref.key}) "
                "does not exist",
            )
        source = config_map["data"][ref.key]
    grader: dict[str, Any] = {
        "type": "python",
        "contract": spec.contract,
        "metric_id": spec.metric_id,
        "source": source,
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


async def _resolve_judges(
    svc: Services,
    run: Mapping[str, Any],
    judges: list[JudgeSpec],
    *,
    dataset: str | None,
    builtin_dataset: bool,
) -> JudgesPlan:
    """Resolve every judge; raise Waiting or Invalid."""
    from kyai.graders import GraderUnavailableError, PythonGrader, builtin_grader

    namespace = run["metadata"]["namespace"]
    by_type: dict[str, list[JudgeSpec]] = {"llm": [], "builtin": [], "python": []}
    for judge in judges:
        by_type[judge.type].append(judge)
    for kind in ("llm", "builtin"):
        if len(by_type[kind]) > 1:
            raise Invalid(c.INVALID_SPEC, f"spec.judges: at most one judge of type {kind}")
    names: dict[str, str] = {}
    llm_plan = None
    if by_type["llm"]:
        llm_plan = await _resolve_judge(svc, run, by_type["llm"][0])
        names["llm"] = by_type["llm"][0].name or "llm"
    if by_type["builtin"]:
        try:
            builtin_grader(dataset if builtin_dataset else None)
        except GraderUnavailableError as exc:
            raise Invalid(c.INVALID_SPEC, f"judge type builtin: {exc}") from exc
        names["builtin"] = by_type["builtin"][0].name or "builtin"
    graders: dict[str, dict[str, Any]] = {}
    needs_bridge = False
    for judge in by_type["python"]:
        name = judge.name or "python"
        declaration = await _grader_declaration(svc, namespace, judge, name)
        needs_bridge |= PythonGrader.from_declaration(declaration).model_access
        cli_name = name if name not in ("llm", "builtin") else f"python-{name}"
        graders[cli_name] = declaration
        names[cli_name] = name
    if needs_bridge and llm_plan is None:
        llm_plan = await _resolve_judge(svc, run, JudgeSpec())
    return JudgesPlan(
        llm=llm_plan,
        use_llm=bool(by_type["llm"]),
        builtin=bool(by_type["builtin"]),
        graders=graders,
        names=names,
    )


async def _resolve_judge(svc: Services, run: Mapping[str, Any], judge: JudgeSpec) -> JudgePlan:
    namespace = run["metadata"]["namespace"]
    llm = judge.llm
    workload_name = judge.judge_workload
    if workload_name is not None:
        workload = await svc.kube.get("Workload", namespace, workload_name)
        if workload is None:
            raise Waiting(c.JUDGE_NOT_READY, f"the judge Workload {workload_name} does not exist")
        if not _ready(workload):
            raise Waiting(c.JUDGE_NOT_READY, f"the judge Workload {workload_name} is not Ready")
        status = workload["status"]
        endpoint_spec = (workload.get("spec") or {}).get("endpoint") or {}
        secret_ref = endpoint_spec.get("apiKeySecretRef")
        return JudgePlan(
            endpoint=status["endpoint"],
            model=(llm.model if llm and llm.model else None)
            or status.get("servedModelName")
            or workload["spec"]["model"],
            secret=build.SecretEnv(
                build.JUDGE_KEY_ENV, secret_ref["name"], secret_ref.get("key", "api-key")
            )
            if secret_ref
            else None,
            prompt=judge.prompt,
        )
    if llm is not None and llm.endpoint:
        if not llm.model:
            raise Invalid(c.INVALID_SPEC, "spec.judge.llm.model is required with an endpoint")
        ref = llm.api_key_secret_ref
        return JudgePlan(
            endpoint=llm.endpoint,
            model=llm.model,
            secret=build.SecretEnv(build.JUDGE_KEY_ENV, ref.name, ref.key) if ref else None,
            prompt=judge.prompt,
        )
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
        if source_ns == namespace:
            secret = build.SecretEnv(
                build.JUDGE_KEY_ENV,
                settings.default_judge_secret_name,
                settings.default_judge_secret_key,
            )
        else:
            copy_from = (
                source_ns,
                settings.default_judge_secret_name,
                settings.default_judge_secret_key,
            )
            secret = build.SecretEnv(
                build.JUDGE_KEY_ENV, f"{run['metadata']['name']}-judge-key", "api-key"
            )
    return JudgePlan(
        endpoint=settings.default_judge_endpoint,
        model=settings.default_judge_model,
        secret=secret,
        prompt=judge.prompt,
        copy_secret_from=copy_from,
    )


async def make_plan(svc: Services, run: Mapping[str, Any], spec: EvaluationRunSpec) -> Plan:
    """Resolve the run's references; raise Waiting or Invalid when it cannot start."""
    meta = run["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    judges = spec.judge_list()
    generation = spec.generation
    status: dict[str, Any] = {}
    if spec.generation_from is not None:
        source_name = spec.generation_from.run_ref.name
        source = await svc.kube.get(KIND, namespace, source_name)
        if source is None:
            raise Waiting(c.SOURCE_RUN_NOT_FOUND, f"the EvaluationRun {source_name} does not exist")
        source_status = source.get("status") or {}
        if source_status.get("phase") != "Succeeded" or not source_status.get("resultsClaim"):
            raise Waiting(
                c.SOURCE_RUN_NOT_READY,
                f"the EvaluationRun {source_name} has not succeeded yet "
                f"(phase {source_status.get('phase') or 'Pending'})",
            )
        for key in ("model", "framework", "dataset", "datasetVersion", "datasetSha256"):
            if source_status.get(key) is not None:
                status[key] = source_status[key]
        results_claim = source_status["resultsClaim"]
        generations_path = (
            source_status.get("resultsPath") or f"{build.RESULTS_MOUNT}/{source_name}"
        )
        judge = await _resolve_judges(
            svc,
            run,
            judges,
            dataset=source_status.get("dataset"),
            builtin_dataset=source_status.get("datasetVersion") == "v1",
        )
        status.update(resultsClaim=results_claim, resultsPath=f"{build.RESULTS_MOUNT}/{name}")
        return Plan(False, [], None, None, results_claim, False, judge, generations_path, status)

    assert spec.workload_ref is not None and spec.snapshot_ref is not None
    workload = await svc.kube.get("Workload", namespace, spec.workload_ref.name)
    if workload is None:
        raise Waiting(
            c.WORKLOAD_NOT_FOUND,
            f"the Workload {spec.workload_ref.name} does not exist in namespace {namespace}; "
            "the run starts once it is Ready",
        )
    if not _ready(workload):
        phase = (workload.get("status") or {}).get("phase") or "Pending"
        raise Waiting(
            c.WORKLOAD_NOT_READY,
            f"the Workload {spec.workload_ref.name} is {phase}, not Ready",
        )
    snapshot = await svc.kube.get("Snapshot", namespace, spec.snapshot_ref.name)
    if snapshot is None:
        raise Waiting(
            c.SNAPSHOT_NOT_FOUND,
            f"the Snapshot {spec.snapshot_ref.name} does not exist in namespace {namespace}; "
            "the run starts once it is Ready",
        )
    if not _ready(snapshot):
        phase = (snapshot.get("status") or {}).get("phase") or "Pending"
        raise Waiting(
            c.SNAPSHOT_NOT_READY, f"the Snapshot {spec.snapshot_ref.name} is {phase}, not Ready"
        )
    judge = await _resolve_judges(
        svc,
        run,
        judges,
        dataset=snapshot["status"].get("dataset"),
        builtin_dataset=snapshot["status"].get("version") == "v1",
    )
    w_status, w_spec = workload["status"], workload["spec"]
    s_status = snapshot["status"]
    model = w_status.get("servedModelName") or w_spec.get("servedModelName") or w_spec["model"]
    secret_ref = (w_spec.get("endpoint") or {}).get("apiKeySecretRef")
    candidate_secret = (
        build.SecretEnv(
            build.CANDIDATE_KEY_ENV, secret_ref["name"], secret_ref.get("key", "api-key")
        )
        if secret_ref
        else None
    )
    own_claim = spec.storage.existing_claim is None
    results_claim = spec.storage.existing_claim or build.results_claim_name(name)
    results_path = f"{build.RESULTS_MOUNT}/{name}"
    args = [
        "generate",
        "--snapshot", build.SNAPSHOT_MOUNT,
        "--endpoint", w_status["endpoint"],
        "--model", model,
        "--output", results_path,
        "--concurrency", str(generation.concurrency),
        "--request-timeout", str(generation.request_timeout_seconds),
        "--max-retries", str(generation.max_retries),
        "--report-run", f"{namespace}/{name}",
    ]  # fmt: skip
    if candidate_secret is not None:
        args += ["--api-key-env", build.CANDIDATE_KEY_ENV]
    if w_status.get("maxModelLen"):  # the server's own figure still wins in the worker
        args += ["--context-window", str(w_status["maxModelLen"])]
    status.update(
        model=model,
        framework=w_spec.get("framework"),
        dataset=s_status.get("dataset"),
        datasetVersion=s_status.get("version"),
        datasetSha256=s_status.get("sha256"),
        resultsClaim=results_claim,
        resultsPath=results_path,
        questions=s_status.get("rows"),
    )
    return Plan(
        True,
        args,
        candidate_secret,
        s_status.get("configMap"),
        results_claim,
        own_claim,
        judge,
        results_path,
        status,
    )


def _secret_list(secret: build.SecretEnv | None) -> list[str] | None:
    return None if secret is None else [secret.env, secret.secret, secret.key]


def _secret_env(value: Any) -> build.SecretEnv | None:
    return None if not value else build.SecretEnv(*value)


def _plan_to_status(plan: Plan) -> dict[str, Any]:
    llm = plan.judge.llm
    return {
        "generate": plan.generate,
        "generationArgs": plan.generation_args,
        "candidateSecret": _secret_list(plan.candidate_secret),
        "snapshotConfigMap": plan.snapshot_config_map,
        "resultsClaim": plan.results_claim,
        "ownClaim": plan.own_claim,
        "generationsPath": plan.generations_path,
        "judges": {
            "llm": None
            if llm is None
            else {
                "endpoint": llm.endpoint,
                "model": llm.model,
                "secret": _secret_list(llm.secret),
                "prompt": llm.prompt,
                "copySecretFrom": list(llm.copy_secret_from) if llm.copy_secret_from else None,
            },
            "useLlm": plan.judge.use_llm,
            "builtin": plan.judge.builtin,
            "graders": plan.judge.graders,
            "names": plan.judge.names,
        },
    }


def _endpoint_ports(plan: Plan) -> list[int]:
    """The TCP port of the judge endpoint, when the judge pod needs one."""
    from urllib.parse import urlsplit

    if plan.judge.llm is None:
        return []
    parts = urlsplit(plan.judge.llm.endpoint)
    return [parts.port or (443 if parts.scheme == "https" else 80)]


def _triple(value: Any) -> tuple[str, str, str] | None:
    if not value:
        return None
    namespace, name, key = value
    return str(namespace), str(name), str(key)


def _plan_from_status(data: Mapping[str, Any]) -> Plan:
    judges = data["judges"]
    llm = judges.get("llm")
    return Plan(
        generate=data["generate"],
        generation_args=list(data["generationArgs"]),
        candidate_secret=_secret_env(data.get("candidateSecret")),
        snapshot_config_map=data.get("snapshotConfigMap"),
        results_claim=data["resultsClaim"],
        own_claim=data["ownClaim"],
        judge=JudgesPlan(
            llm=None
            if llm is None
            else JudgePlan(
                endpoint=llm["endpoint"],
                model=llm["model"],
                secret=_secret_env(llm.get("secret")),
                prompt=llm.get("prompt"),
                copy_secret_from=_triple(llm.get("copySecretFrom")),
            ),
            use_llm=bool(judges.get("useLlm")),
            builtin=bool(judges.get("builtin")),
            graders=dict(judges.get("graders") or {}),
            names=dict(judges.get("names") or {}),
        ),
        generations_path=data["generationsPath"],
        status={},
    )


#: Where the judge Job finds the Python graders' declarations.
GRADERS_MOUNT = "/etc/kyai/graders"


def graders_config_map_name(run: str) -> str:
    """The ConfigMap holding a run's Python grader declarations."""
    return f"{run}-graders"


def judge_args(run: Mapping[str, Any], plan: Plan, spec: EvaluationRunSpec) -> list[str]:
    """The judge worker's command line."""
    meta = run["metadata"]
    judges = plan.judge
    args = [
        "judge",
        "--generations", plan.generations_path,
        "--output", f"{build.RESULTS_MOUNT}/{meta['name']}",
        "--concurrency", str(spec.generation.concurrency),
        "--request-timeout", str(spec.generation.request_timeout_seconds),
        "--max-retries", str(spec.generation.max_retries),
        "--report-run", f"{meta['namespace']}/{meta['name']}",
    ]  # fmt: skip
    if judges.use_llm:
        args += ["--judge", "llm"]
    if judges.builtin:
        args += ["--judge", "builtin"]
    for name in judges.graders:
        args += ["--grader", f"{GRADERS_MOUNT}/{name}.json"]
    if judges.llm is not None:
        args += ["--judge-endpoint", judges.llm.endpoint, "--judge-model", judges.llm.model]
        if judges.llm.secret is not None:
            args += ["--judge-api-key-env", build.JUDGE_KEY_ENV]
        if judges.llm.prompt and judges.use_llm:
            args += ["--judge-prompt", judges.llm.prompt]
    return args


def _job_state(job: Mapping[str, Any] | None) -> tuple[str, str]:
    """("missing" | "running" | "succeeded" | "failed", message) of a Job."""
    if job is None:
        return "missing", ""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            return "failed", condition.get("message") or condition.get("reason") or "the Job failed"
    if (status.get("succeeded") or 0) >= 1:
        return "succeeded", ""
    return "running", ""


class RunReconciler:
    """The state machine of one EvaluationRun."""

    def __init__(self, svc: Services, run: dict[str, Any]) -> None:
        self.svc = svc
        self.run = run
        self.meta = run["metadata"]
        self.namespace = self.meta["namespace"]
        self.name = self.meta["name"]
        self.status: dict[str, Any] = dict(run.get("status") or {})
        self.generation = self.meta.get("generation")

    async def patch_status(self, fields: Mapping[str, Any]) -> None:
        """Merge ``fields`` into the status (and into our copy)."""
        body = {**fields, "observedGeneration": self.generation}
        self.status.update(body)
        updated = await self.svc.kube.patch(
            KIND, self.namespace, self.name, {"status": body}, subresource="status"
        )
        self.run = updated
        self.svc.metrics.observe(updated)

    def conditions(self, *changes: tuple[str, bool | None, str, str]) -> list[dict[str, Any]]:
        """The status conditions with ``changes`` applied."""
        conditions = self.status.get("conditions") or []
        for type_, value, reason, message in changes:
            conditions = c.set_condition(
                conditions, type_, value, reason, message, generation=self.generation
            )
        return conditions

    async def fail(self, reason: str, message: str) -> None:
        """End the run Failed."""
        await self.patch_status(
            {
                "phase": "Failed",
                "message": message,
                "completedAt": c.now(),
                "conditions": self.conditions(
                    (c.READY, False, reason, message),
                    (c.PROGRESSING, False, reason, message),
                ),
            }
        )
        post_event(self.run, type_="Warning", reason=reason, message=message)

    async def reconcile(self) -> None:
        """One step of the state machine (call it again on any change)."""
        phase = self.status.get("phase")
        if phase in TERMINAL or self.meta.get("deletionTimestamp"):
            return
        accepted = self.status.get("acceptedSpec")
        try:
            spec = EvaluationRunSpec.model_validate(accepted or self.run.get("spec") or {})
        except ValidationError as exc:
            await self.fail(c.INVALID_SPEC, c.validation_message(exc))
            return
        if accepted is not None and spec_hash(self.run.get("spec") or {}) != self.status.get(
            "specHash"
        ):
            await self._note_spec_change()
        if accepted is None:
            await self._start(spec)
            if self.status.get("phase") not in ("Generating", "Judging"):
                return
        plan = _plan_from_status(self.status["plan"])
        if self.status.get("phase") == "Generating":
            await self._generating(plan)
        if self.status.get("phase") == "Judging":
            await self._judging(plan, spec)

    async def _note_spec_change(self) -> None:
        condition = c.get_condition(self.status.get("conditions"), c.DEGRADED)
        if condition is not None and condition.get("reason") == c.SPEC_IMMUTABLE:
            return
        message = (
            "the spec changed after the run started; the change is ignored (a run's spec is "
            "immutable once started): create a new EvaluationRun instead"
        )
        await self.patch_status(
            {"conditions": self.conditions((c.DEGRADED, True, c.SPEC_IMMUTABLE, message))}
        )
        post_event(self.run, type_="Warning", reason=c.SPEC_IMMUTABLE, message=message)

    async def _start(self, spec: EvaluationRunSpec) -> None:
        try:
            plan = await make_plan(self.svc, self.run, spec)
        except Waiting as wait:
            changed = self.status.get("phase") != "Pending" or self.status.get("message") != (
                wait.message
            )
            if changed:
                await self.patch_status(
                    {
                        "phase": "Pending",
                        "message": wait.message,
                        "conditions": self.conditions(
                            (c.READY, False, wait.reason, wait.message),
                            (c.PROGRESSING, False, wait.reason, wait.message),
                        ),
                    }
                )
                post_event(self.run, type_="Normal", reason=wait.reason, message=wait.message)
            return
        except Invalid as invalid:
            await self.fail(invalid.reason, invalid.message)
            return
        phase = "Generating" if plan.generate else "Judging"
        reason = c.GENERATING if plan.generate else c.JUDGING
        message = (
            f"generating answers of {plan.status.get('model')} on {plan.status.get('dataset')}"
            if plan.generate
            else f"judging the stored answers of {spec.generation_from.run_ref.name}"  # type: ignore[union-attr]
        )
        await self.patch_status(
            {
                **plan.status,
                "phase": phase,
                "message": message,
                "startedAt": c.now(),
                "acceptedSpec": spec.to_k8s(),
                "specHash": spec_hash(self.run.get("spec") or {}),
                "plan": _plan_to_status(plan),
                "judgeModel": plan.judge.model,
                "generationJob": build.generation_job_name(self.name) if plan.generate else None,
                "judgeJob": build.judge_job_name(self.name),
                "conditions": self.conditions(
                    (c.READY, False, reason, message), (c.PROGRESSING, True, reason, message)
                ),
            }
        )
        post_event(self.run, type_="Normal", reason=reason, message=message)

    async def _ensure_common(self, plan: Plan) -> None:
        kube = self.svc.kube
        for obj in build.worker_rbac(self.run):
            await kube.create(obj)
        if plan.own_claim and plan.generate:
            spec = EvaluationRunSpec.model_validate(self.status["acceptedSpec"])
            await kube.create(
                build.results_claim(
                    self.run,
                    size=spec.storage.size,
                    storage_class=spec.storage.storage_class_name,
                )
            )
        llm = plan.judge.llm
        if llm is not None and llm.copy_secret_from is not None and llm.secret is not None:
            await self._copy_judge_secret(llm)
        if plan.judge.graders or plan.judge.builtin:
            await kube.create(build.judge_network_policy(self.run, _endpoint_ports(plan)))
        if plan.judge.graders:
            await kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": graders_config_map_name(self.name),
                        "namespace": self.namespace,
                        "labels": build.run_labels(self.name, "judge"),
                        "ownerReferences": [owner_reference(self.run)],
                    },
                    "data": {
                        f"{name}.json": json.dumps(declaration, indent=2)
                        for name, declaration in plan.judge.graders.items()
                    },
                }
            )

    async def _copy_judge_secret(self, judge: JudgePlan) -> None:
        assert judge.copy_secret_from is not None and judge.secret is not None
        source_ns, source_name, source_key = judge.copy_secret_from
        if await self.svc.kube.get("Secret", self.namespace, judge.secret.secret):
            return
        source = await self.svc.kube.get("Secret", source_ns, source_name)
        if source is None or source_key not in (source.get("data") or {}):
            raise KubeError(
                f"the default judge's Secret {source_ns}/{source_name} (key {source_key}) "
                "cannot be read"
            )
        await self.svc.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": judge.secret.secret,
                    "namespace": self.namespace,
                    "labels": build.run_labels(self.name, "judge"),
                    "ownerReferences": [owner_reference(self.run)],
                },
                "data": {"api-key": source["data"][source_key]},
            }
        )

    def _job(self, job: build.WorkerJob, spec: EvaluationRunSpec, plan: Plan) -> dict[str, Any]:
        settings = self.svc.settings
        return build.worker_job(
            self.run,
            job,
            image=settings.worker_image,
            image_pull_policy=settings.worker_image_pull_policy,
            results_claim=plan.results_claim,
            backoff_limit=spec.jobs.backoff_limit,
            active_deadline_seconds=spec.jobs.active_deadline_seconds,
        )

    async def _job_outcome(
        self, job: build.WorkerJob, spec: EvaluationRunSpec, plan: Plan, reason: str, what: str
    ) -> bool:
        """Create the Job unless it exists; True once it succeeded (the run fails with it)."""
        current = await self.svc.kube.get("Job", self.namespace, job.name)
        if current is None:
            # What the Job needs is made right before it, once per Job (not every reconcile).
            await self._ensure_common(plan)
            current, _ = await self.svc.kube.create(self._job(job, spec, plan))
        state, message = _job_state(current)
        if state == "failed":
            await self.fail(
                reason,
                f"the {what} Job {job.name} failed: {message}; see `kubectl logs job/{job.name}`",
            )
        return state == "succeeded"

    async def _generating(self, plan: Plan) -> None:
        spec = EvaluationRunSpec.model_validate(self.status["acceptedSpec"])
        job = build.WorkerJob(
            name=build.generation_job_name(self.name),
            component="generate",
            args=plan.generation_args,
            secrets=[plan.candidate_secret] if plan.candidate_secret else [],
            snapshot_config_map=plan.snapshot_config_map,
        )
        if await self._job_outcome(job, spec, plan, c.GENERATION_FAILED, "generation"):
            text = f"judging the answers with {plan.judge.model}"
            await self.patch_status(
                {
                    "phase": "Judging",
                    "message": text,
                    "conditions": self.conditions(
                        (c.READY, False, c.JUDGING, text), (c.PROGRESSING, True, c.JUDGING, text)
                    ),
                }
            )
            post_event(self.run, type_="Normal", reason=c.JUDGING, message=text)

    async def _judging(self, plan: Plan, spec: EvaluationRunSpec) -> None:
        graders = bool(plan.judge.graders)
        llm = plan.judge.llm
        job = build.WorkerJob(
            name=build.judge_job_name(self.name),
            component="judge",
            args=judge_args(self.run, plan, spec),
            secrets=[llm.secret] if llm is not None and llm.secret else [],
            extra_volumes=[
                {"name": "graders", "configMap": {"name": graders_config_map_name(self.name)}}
            ]
            if graders
            else (),
            extra_mounts=[{"name": "graders", "mountPath": GRADERS_MOUNT, "readOnly": True}]
            if graders
            else (),
        )
        if await self._job_outcome(job, spec, plan, c.JUDGING_FAILED, "judge"):
            await self._complete(spec, plan)

    async def _complete(self, spec: EvaluationRunSpec, plan: Plan) -> None:
        fresh = await self.svc.kube.get(KIND, self.namespace, self.name)
        status = (fresh or {}).get("status") or {}
        self.status.update(status)
        score = status.get("avgScore")
        if not isinstance(score, int | float):
            await self.fail(
                c.RESULT_MISSING,
                "the judge Job succeeded but reported no avgScore into the status",
            )
            return
        questions = status.get("questions") or 0
        error_count = status.get("errorCount") or 0
        message = (
            f"avgScore {score:.4f} over {questions} questions ({error_count} errors), "
            f"comparison key {status.get('comparisonKey')}"
        )
        changes: list[tuple[str, bool | None, str, str]] = [
            (c.READY, True, c.SUCCEEDED, message),
            (c.PROGRESSING, False, c.SUCCEEDED, message),
        ]
        thresholds = spec.thresholds
        if thresholds is not None and (
            thresholds.avg_score is not None or thresholds.max_error_rate is not None
        ):
            misses = []
            if thresholds.avg_score is not None and score < thresholds.avg_score:
                misses.append(f"avgScore {score:.4f} < {thresholds.avg_score}")
            rate = error_count / questions if questions else 0.0
            if thresholds.max_error_rate is not None and rate > thresholds.max_error_rate:
                misses.append(f"error rate {rate:.4f} > {thresholds.max_error_rate}")
            if misses:
                changes.append((c.PASSED, False, c.THRESHOLDS_MISSED, "; ".join(misses)))
            else:
                changes.append((c.PASSED, True, c.THRESHOLDS_MET, "every threshold is met"))
        final: dict[str, Any] = {
            "phase": "Succeeded",
            "message": message,
            "completedAt": c.now(),
            "conditions": self.conditions(*changes),
        }
        names = plan.judge.names
        if status.get("judges"):  # the worker names judges as its CLI does: use the spec's
            final["judges"] = [
                {**judge, "name": names.get(judge["name"], judge["name"])}
                for judge in status["judges"]
            ]
            pairs = (status.get("agreement") or {}).get("pairs") or []
            final["agreement"] = {
                "pairs": [
                    {**pair, "judges": [names.get(n, n) for n in pair.get("judges", [])]}
                    for pair in pairs
                ]
            }
        await self.patch_status(final)
        post_event(self.run, type_="Normal", reason=c.SUCCEEDED, message=message)


async def reconcile_run(svc: Services, namespace: str, name: str) -> None:
    """Fetch the run and take one step; nothing to do when it is gone."""
    async with svc.locked(KIND, namespace, name):
        run = await svc.kube.get(KIND, namespace, name)
        if run is None:
            return
        await RunReconciler(svc, run).reconcile()
