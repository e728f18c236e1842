"""EngineArgsSet and Workload: validate flags; serve the candidate; learn what it serves.

A Workload with ``spec.endpoint`` launches nothing: the operator only reads its
``/v1/models``. Otherwise it gets a Deployment and a Service running the engine's real
command line; once pods are available, ``/v1/models`` gives the served name and the context
window. A changed EngineArgsSet changes the pod template's hash annotation, which rolls the
Deployment.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from kyai.api import (
    EngineArgsSetSpec,
    EngineArgsSetStatus,
    WorkloadSpec,
    WorkloadStatus,
    canonical_flag,
)
from kyai.api.workload import WorkloadPhase
from kyai.builders import ManifestError
from kyai.builders.queue import queue_label_problem, queue_name
from kyai.builders.workload import (
    engine_args_hash,
    engine_image,
    workload_deployment,
    workload_endpoint,
    workload_metrics_url,
    workload_selector,
    workload_service,
)
from kyai.constants import ANNOTATION_SPEC_HASH
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers import _multinode as multinode
from kyai.controllers._conditions import Change
from kyai.controllers._inuse import engine_args_of
from kyai.controllers._kube import KubeError
from kyai.controllers._pods import EngineTrouble, engine_trouble
from kyai.controllers._references import secret_value
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter
from kyai.datasets import route_hub_logs
from kyai.engines import (
    EngineArgsError,
    FlagPlan,
    check_flags,
    engine_for,
    flag_errors_message,
    served_model_name,
)
from kyai.evaluation import (
    ChatClient,
    EndpointUnreachableError,
    RetryPolicy,
    find_card,
    window_from_card,
    window_from_config,
)
from kyai.gateway import RedactingFilter, Redactor

log = logging.getLogger(__name__)

#: How long one /v1/models probe may take.
PROBE_TIMEOUT_S = 10.0

#: The crashed engine container's log lines quoted in the Workload's condition.
LOG_LINES = 20
#: ... each cut to this many characters, and all of them to LOG_MAX (the last kept).
LOG_LINE_MAX = 300
LOG_MAX = 3000

#: Values that look like credentials in an engine's log (HuggingFace tokens, key=... pairs).
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
_KEY_VALUE = re.compile(
    r"(?i)\b((?:api[_-]?key|token|secret|password)[\"']?\s*[=:]\s*[\"']?)[^\s\"',]{6,}"
)


def redact_log(text: str) -> str:
    """An engine's log without what looks like a credential."""
    text = _HF_TOKEN.sub("[REDACTED]", text)
    return _KEY_VALUE.sub(lambda match: match.group(1) + "[REDACTED]", text)


def clip_log(text: str) -> str:
    """Log lines for a condition: each at most LOG_LINE_MAX characters, the last LOG_MAX."""
    lines = [
        line if len(line) <= LOG_LINE_MAX else line[: LOG_LINE_MAX - 1] + "…"
        for line in text.rstrip().splitlines()[-LOG_LINES:]
        if line.strip()
    ]
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > LOG_MAX:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def _engine_args_problem(body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when an EngineArgsSet cannot be used whatever runs it, else None."""
    try:
        spec = EngineArgsSetSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return c.INVALID_SPEC, c.validation_message(exc)
    owned = spec.owned_flags_used()
    if owned:
        return c.OWNED_FLAG, (
            f"spec.args sets {', '.join(owned)}, which the operator sets itself (host, "
            "port, model, served model name): remove them and use the Workload's "
            "spec.model / spec.servedModelName"
        )
    return None


async def engine_args_images(svc: Services, namespace: str, name: str, framework: str) -> set[str]:
    """The images an EngineArgsSet's flags are checked against.

    Those of the Workloads naming it (served ones of its framework), else the operator's
    default image for the framework (when no Workload names it).
    """
    images: set[str] = set()
    for workload in await svc.kube.list("Workload", namespace):
        if engine_args_of(workload) != name:
            continue
        try:
            spec = WorkloadSpec.model_validate(workload.get("spec") or {})
        except ValidationError:
            continue  # the Workload says why itself
        if spec.endpoint is None and spec.framework == framework:
            images.add(engine_image(spec, svc.settings))
    return images or {svc.settings.engine_image(framework)}


def _flag_findings(spec: EngineArgsSetSpec, images: set[str]) -> FlagPlan:
    """The findings of every image's table, each once, in image order."""
    merged = FlagPlan()
    for image in sorted(images):
        plan = check_flags(spec, image)
        for mine, theirs in (
            (merged.errors, plan.errors),
            (merged.warnings, plan.warnings),
            (merged.notes, plan.notes),
        ):
            mine.extend(item for item in theirs if item not in mine)
    return merged


def _checked_against(spec: EngineArgsSetSpec, images: set[str]) -> str:
    tables = sorted({engine_for(spec.framework).table(image).describe() for image in images})
    return ", ".join(tables)


async def reconcile_engine_args(svc: Services, body: Mapping[str, Any]) -> None:
    """Validate an EngineArgsSet and record Ready or Invalid; roll the Workloads using it.

    The flags are checked against the flag table of every engine version the Workloads
    naming it run (the default image's when none does): an unknown flag, a value outside a
    flag's choices or a ``false`` the engine cannot honour is Invalid at once, naming the
    flag (and the nearest known spelling).
    """
    writer = StatusWriter(svc, body)
    problem = _engine_args_problem(body)
    warnings: list[str] = []
    if problem is None:
        spec = EngineArgsSetSpec.model_validate(body.get("spec") or {})
        images = await engine_args_images(svc, writer.namespace, writer.name, spec.framework)
        findings = _flag_findings(spec, images)
        checked = _checked_against(spec, images)
        if findings.errors:
            problem = (
                c.INVALID_FLAGS,
                (f"{flag_errors_message(findings)} (checked against {checked})"),
            )
        warnings = findings.warnings
    if problem is not None:
        reason, message = problem
        conditions = writer.conditions(Change(c.READY, False, reason, message))
        await writer.patch(
            EngineArgsSetStatus(phase="Invalid", message=message, conditions=conditions)
        )
        writer.event("Warning", reason, message)
    else:
        message = f"{len(spec.args)} flags for {spec.framework}, checked against {checked}"
        if findings.notes:
            message += "; " + "; ".join(findings.notes)
        if warnings:
            message += "; warnings: " + "; ".join(warnings)
        conditions = writer.conditions(Change(c.READY, True, c.VALID, message))
        status = EngineArgsSetStatus(phase="Ready", message=message, conditions=conditions)
        if not writer.unchanged(status):
            await writer.patch(status)
            if warnings:
                writer.event("Warning", c.UNCHECKED_FLAGS, message)
    await reconcile_workloads_naming(svc, writer.namespace, writer.name)


async def reconcile_workloads_naming(svc: Services, namespace: str, engine_args: str) -> None:
    """Reconcile the Workloads naming an EngineArgsSet.

    A change rolls their Deployments; once it is deleted, they say so.
    """
    for workload in await svc.kube.list("Workload", namespace):
        if engine_args_of(workload) == engine_args:
            await reconcile_workload(svc, namespace, workload["metadata"]["name"])


async def probe_models(url: str, *, api_key: str | None) -> list[dict[str, Any]]:
    """The server's /v1/models cards (raises EndpointUnreachableError)."""
    async with ChatClient(
        url,
        api_key=api_key,
        timeout_s=PROBE_TIMEOUT_S,
        retry=RetryPolicy(max_retries=0),
        max_connections=1,
    ) as client:
        return await client.list_models()


def engine_args_window(spec: WorkloadSpec, eas_spec: EngineArgsSetSpec | None) -> int | None:
    """The context window the EngineArgsSet caps the engine at (its context-length flag)."""
    if eas_spec is None or spec.framework is None:
        return None
    flag = canonical_flag(engine_for(spec.framework).context_length_flag)
    for name, value in eas_spec.args.items():
        if canonical_flag(name) != flag or isinstance(value, bool):
            continue
        try:
            tokens = int(str(value))
        except ValueError:
            return None
        return tokens if tokens > 0 else None
    return None


#: How long a failed config.json look-up is not tried again.
HUB_RETRY_SECONDS = 600.0

#: model → (window or None, when a failed look-up may be tried again).
_HUB_WINDOWS: dict[str, tuple[int | None, float]] = {}


def hub_config_window(model: str) -> int | None:
    """The context window in the model's HuggingFace config.json (None when unreachable).

    KYAI's rule for servers that report no max_model_len (TensorRT-LLM). Blocking: call it
    from a thread. Air-gapped clusters (HF_HUB_OFFLINE=1, or no route) simply get None.
    """
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        return None  # a path inside the container, not a Hub id
    known = _HUB_WINDOWS.get(model)
    if known is not None and (known[0] is not None or time.monotonic() < known[1]):
        return known[0]
    try:
        from huggingface_hub import hf_hub_download

        route_hub_logs()

        path = hf_hub_download(repo_id=model, filename="config.json")
        tokens: int | None = window_from_config(path)
    except Exception as exc:  # offline, gated, missing: the worker's default applies
        log.info("No config.json for %s from the HuggingFace Hub: %s", model, exc)
        tokens = None
    _HUB_WINDOWS[model] = (tokens, time.monotonic() + HUB_RETRY_SECONDS)
    return tokens


async def fallback_window(
    spec: WorkloadSpec, eas_spec: EngineArgsSetSpec | None
) -> tuple[int | None, str | None]:
    """The window when the server reports none: the engine's flag, then config.json."""
    tokens = engine_args_window(spec, eas_spec)
    if tokens:
        return tokens, "engine-args"
    tokens = await asyncio.to_thread(hub_config_window, spec.model)
    return (tokens, "config") if tokens else (None, None)


class WorkloadReconciler:
    """One reconcile of one Workload."""

    def __init__(
        self, svc: Services, body: dict[str, Any], evicted: dict[str, Any] | None = None
    ) -> None:
        self.svc = svc
        self.eas_spec: EngineArgsSetSpec | None = None
        self.body = body
        self.evicted = evicted
        self.writer = StatusWriter(svc, body)
        self.namespace, self.name = self.writer.namespace, self.writer.name

    async def set_status(
        self, phase: WorkloadPhase, reason: str, message: str, ready: bool, **fields: Any
    ) -> None:
        """Patch the status (unless nothing changes); post an event when the phase changes."""
        previous = self.writer.status.get("phase")
        conditions = self.writer.conditions(Change(c.READY, ready, reason, message))
        status = WorkloadStatus(phase=phase, message=message, conditions=conditions, **fields)
        if self.writer.unchanged(status):
            return
        await self.writer.patch(status)
        if previous != phase:
            self.writer.event("Warning" if phase == "Failed" else "Normal", reason, message)

    async def reconcile(self) -> None:
        """Validate, deploy (unless external), and read /v1/models when serving."""
        try:
            spec = WorkloadSpec.model_validate(self.body.get("spec") or {})
        except ValidationError as exc:
            await self.set_status("Failed", c.INVALID_SPEC, c.validation_message(exc), False)
            return
        if spec.endpoint is not None:
            await self._external(spec)
        elif await self._engine_args(spec):
            await self._deploy(spec)

    async def _external(self, spec: WorkloadSpec) -> None:
        """A model served elsewhere: read its /v1/models (with its API key, if any)."""
        assert spec.endpoint is not None
        key = None
        ref = spec.endpoint.api_key_secret_ref
        if ref is not None:
            key = await secret_value(self.svc, self.namespace, ref.name, ref.key)
            if key is None:
                await self.set_status(
                    "Pending",
                    c.SECRET_NOT_FOUND,
                    f"the Secret {ref.name} (key {ref.key}) in namespace {self.namespace} "
                    "with the endpoint's API key (spec.endpoint.apiKeySecretRef) does not "
                    "exist; the Workload goes on once it does",
                    False,
                )
                return
        await self._observe(spec, spec.endpoint.url, spec.served_name, key)

    async def _engine_args(self, spec: WorkloadSpec) -> bool:
        """Read the EngineArgsSet into ``eas_spec``; False (status written) when unusable."""
        if spec.engine_args_set_ref is None:
            return True
        eas_name = spec.engine_args_set_ref.name
        eas = await self.svc.kube.get("EngineArgsSet", self.namespace, eas_name)
        if eas is None:
            await self.set_status(
                "Pending",
                c.ENGINE_ARGS_NOT_FOUND,
                f"the EngineArgsSet {eas_name} does not exist in namespace {self.namespace}",
                False,
            )
            return False
        try:
            self.eas_spec = EngineArgsSetSpec.model_validate(eas.get("spec") or {})
        except ValidationError as exc:
            await self.set_status(
                "Failed",
                c.ENGINE_ARGS_INVALID,
                f"the EngineArgsSet {eas_name} is invalid: {c.validation_message(exc)}",
                False,
            )
            return False
        if self.eas_spec.framework != spec.framework:
            await self.set_status(
                "Failed",
                c.FRAMEWORK_MISMATCH,
                f"the EngineArgsSet {eas_name} is for {self.eas_spec.framework}, the Workload "
                f"for {spec.framework}",
                False,
            )
            return False
        if spec.endpoint is None:
            image = engine_image(spec, self.svc.settings)
            findings = check_flags(self.eas_spec, image)
            if findings.errors:
                where = engine_for(spec.engine).table(image).describe()
                await self.set_status(
                    "Failed",
                    c.INVALID_FLAGS,
                    f"the EngineArgsSet {eas_name} has flags {where} (the image {image}) does "
                    f"not take: {flag_errors_message(findings)}",
                    False,
                )
                return False
        return True

    async def _deploy(self, spec: WorkloadSpec) -> None:
        """Apply the engine's Service and Deployment; observe it once a replica is available."""
        if (bad_queue := queue_label_problem(self.body)) is not None:  # pods would wait forever
            await self.set_status("Pending", c.INVALID_QUEUE_NAME, bad_queue, False)
            return
        if spec.nodes > 1:  # several nodes a replica: a LeaderWorkerSet (see _multinode)
            await multinode.deploy_groups(self, spec)
            return
        await multinode.remove_groups(self)
        try:
            deployment = workload_deployment(
                self.name, self.namespace, spec, self.eas_spec, self.svc.settings, self.body
            )
            service = workload_service(self.name, self.namespace, spec, self.body)
        except (EngineArgsError, ManifestError) as exc:
            await self.set_status("Failed", c.ENGINE_ARGS_INVALID, str(exc), False)
            return
        await self._apply(service)
        current = await self._apply(deployment)
        available = int((current.get("status") or {}).get("availableReplicas") or 0)
        if available < 1:
            reason, message, phase = await self._why_not_available(spec)
            await self.set_status(
                phase,
                reason,
                message
                or f"waiting for the engine to become ready ({available}/"
                f"{spec.replicas} replicas available; model downloads can take many minutes)",
                False,
                ready_replicas=available,
            )
            return
        await self._observe_engine(spec, ready_replicas=available)

    async def _observe_engine(self, spec: WorkloadSpec, **ready: Any) -> None:
        """Observe the served engine through its Service (its metrics URL when it serves them).

        ``ready`` holds what the status says is ready (``ready_replicas``; ``ready_groups``
        on several nodes). The status records the hash of the EngineArgsSet the engine was
        rendered from (its pods' ``kyai.io/engine-args-hash``): a run records it when it
        starts.
        """
        engine = engine_for(spec.engine)
        metrics = None
        if engine.metrics_path is not None and engine.serves_metrics(self.eas_spec):
            metrics = workload_metrics_url(self.name, self.namespace, engine.metrics_path)
        await self._observe(
            spec,
            workload_endpoint(self.name, self.namespace),
            served_model_name(spec),
            None,
            metrics_url=metrics,
            engine_args_hash=None if self.eas_spec is None else engine_args_hash(self.eas_spec),
            **ready,
        )

    async def _why_not_available(self, spec: WorkloadSpec) -> tuple[str, str, WorkloadPhase]:
        """Why no engine pod is available: (reason, message, phase).

        A missing Secret or claim is a missing reference (Stalled after the grace period);
        an engine pod that cannot serve is reported with the kubelet's or scheduler's own
        words (:meth:`_engine_trouble`); Kueue holding a pod says so. ("", "", Deploying)
        when nothing is wrong but time (the model downloading, the engine loading).
        """
        missing = await self._missing_reference(spec)
        if missing is not None:
            return (*missing, "Deploying")
        selector = ",".join(f"{k}={v}" for k, v in workload_selector(self.name).items())
        pods = await self.svc.kube.list("Pod", self.namespace, label_selector=selector)
        if self.evicted is not None:  # seen as Kueue evicted it: it may be deleted already
            uid = self.evicted["metadata"].get("uid")
            pods = [self.evicted, *(pod for pod in pods if pod["metadata"].get("uid") != uid)]
        held = await self._held_by_kueue(pods)
        if held is not None:
            return (*held, "Deploying")
        trouble = engine_trouble(pods)
        if trouble is None:
            return c.DEPLOYING, "", "Deploying"
        return await self._engine_trouble(spec, trouble)

    async def _engine_trouble(
        self, spec: WorkloadSpec, trouble: EngineTrouble
    ) -> tuple[str, str, WorkloadPhase]:
        """An engine pod that cannot serve, as the Workload's reason, message and phase.

        A crash quotes the exit code, the termination message and the container's last log
        lines (read with the pod log API, secrets redacted); at ``spec.restartLimit``
        restarts the Workload is Failed (Stalled) and the runs waiting on it fail.
        """
        if trouble.kind == "crash":
            message = f"the engine cannot serve: {trouble.describe()}"
            lines = await self._last_log_lines(spec, trouble)
            if lines:
                message += f"; its last log lines:\n{lines}"
            if trouble.restarts >= spec.restart_limit:
                message += (
                    f"\n(it restarted {trouble.restarts} times, spec.restartLimit is "
                    f"{spec.restart_limit}: the Workload stops waiting for it; fix the cause, "
                    "and it is Ready again once the engine serves)"
                )
                return c.ENGINE_CRASHING, message, "Failed"
            return c.ENGINE_CRASHING, message, "Deploying"
        reason = {
            "image": c.IMAGE_PULL_BACK_OFF,
            "unschedulable": c.UNSCHEDULABLE,
        }.get(trouble.kind, c.ENGINE_NOT_STARTING)
        return reason, f"the engine cannot start: {trouble.describe()}", "Deploying"

    async def _last_log_lines(self, spec: WorkloadSpec, trouble: EngineTrouble) -> str:
        """The crashed container's last log lines, secrets redacted, capped ("" if none)."""
        if not trouble.container:
            return ""
        text = ""
        # A container waiting to restart has no log of its own yet: its last run's is
        # `previous`; one that has just ended still has its own.
        for previous in (trouble.restarts > 0, trouble.restarts == 0):
            try:
                text = await self.svc.kube.pod_log(
                    self.namespace, trouble.pod, trouble.container,
                    tail_lines=LOG_LINES, previous=previous,
                )  # fmt: skip
            except KubeError as exc:
                log.info("No log of %s/%s: %s", trouble.pod, trouble.container, exc)
                continue
            if text.strip():
                break
        return clip_log(await self._redact(spec, text))

    async def _redact(self, spec: WorkloadSpec, text: str) -> str:
        """``text`` without the HuggingFace token, bearer credentials, JWTs, key values."""
        redactor = Redactor()
        ref = spec.hf_token_secret_ref
        if ref is not None:
            redactor.add(await secret_value(self.svc, self.namespace, ref.name, ref.key))
        return redact_log(RedactingFilter(redactor).clean(text))

    async def _held_by_kueue(self, pods: list[dict[str, Any]]) -> tuple[str, str] | None:
        """(reason, message) when Kueue holds the engine: a pod evicted or not admitted yet.

        An evicted pod (``TerminationTarget``) is ``Preempted`` with Kueue's message; a pod
        gated by ``kueue.x-k8s.io/admission`` is ``WaitingForQuota`` with its Kueue
        Workload's message, or still ``Preempted`` when the Workload says so already (the
        evicted pod is gone, its replacement is a new Kueue Workload that knows nothing of
        the eviction). None when no pod waits for Kueue.
        """
        for pod in pods:
            evicted = kueue.evicted_message(pod)
            if evicted is not None:
                name = pod["metadata"]["name"]
                wait = kueue.QueueWait(c.PREEMPTED, evicted, None)
                queue = queue_name(pod["metadata"].get("labels") or {})
                return c.PREEMPTED, kueue.describe(wait, f"the engine's pod {name}", queue)
        waiting = sorted(
            (pod for pod in pods if kueue.gated(pod)),
            key=lambda pod: str(pod["metadata"].get("creationTimestamp") or ""),
        )
        if not waiting:
            return None
        pod = waiting[0]
        meta = pod["metadata"]
        held = kueue.queue_wait(
            await kueue.workload_for(self.svc, self.namespace, str(meta.get("uid")))
        )
        if held is None:  # admitted: Kueue removes the gate in a moment
            return None
        what = f"the engine's pod {meta['name']}"
        if held.reason == c.WAITING_FOR_QUOTA and self._ready_reason() == c.PREEMPTED:
            held, what = replace(held, reason=c.PREEMPTED), f"the engine (now {what})"
        queue = queue_name(meta.get("labels") or {})
        return held.reason, kueue.describe(held, what, queue)

    def _ready_reason(self) -> str | None:
        """The reason the Workload's Ready condition gives now (None: no condition yet)."""
        conditions = self.writer.status.get("conditions") or []
        return next((found["reason"] for found in conditions if found.get("type") == c.READY), None)

    async def _missing_reference(self, spec: WorkloadSpec) -> tuple[str, str] | None:
        """(reason, message) for a Secret key or claim the engine's pod needs and lacks."""
        ref = spec.hf_token_secret_ref
        if ref is not None:
            secret = await self.svc.kube.get("Secret", self.namespace, ref.name)
            if secret is None or ref.key not in (secret.get("data") or {}):
                what = "does not exist" if secret is None else f"has no key {ref.key}"
                return c.SECRET_NOT_FOUND, (
                    f"the Secret {ref.name} in namespace {self.namespace} (the HuggingFace "
                    f"token, spec.hfTokenSecretRef) {what}: the engine's pod cannot start "
                    "until it does"
                )
        cache = spec.model_cache
        if cache is not None:
            claim = await self.svc.kube.get("PersistentVolumeClaim", self.namespace,
                                            cache.claim_name)  # fmt: skip
            if claim is None:
                return c.CLAIM_NOT_FOUND, (
                    f"the PersistentVolumeClaim {cache.claim_name} in namespace "
                    f"{self.namespace} (the model cache, spec.modelCache.claimName) does not "
                    "exist: the engine's pod cannot be scheduled until it does"
                )
        return None

    async def _apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` or bring the existing one to it (compared by spec hash)."""
        current, created = await self.svc.kube.create(obj)
        if created:
            return current
        wanted = obj["metadata"]["annotations"][ANNOTATION_SPEC_HASH]
        have = (current["metadata"].get("annotations") or {}).get(ANNOTATION_SPEC_HASH)
        if have == wanted:
            return current
        return await self.svc.kube.patch(
            obj["kind"],
            self.namespace,
            obj["metadata"]["name"],
            {
                "metadata": {
                    "labels": obj["metadata"]["labels"],
                    "annotations": obj["metadata"]["annotations"],
                },
                "spec": obj["spec"],
            },
        )

    async def _observe(
        self, spec: WorkloadSpec, url: str, expected_name: str, key: str | None, **fields: Any
    ) -> None:
        try:
            cards = await probe_models(url, api_key=key)
        except EndpointUnreachableError as exc:
            await self.set_status(
                "Pending" if spec.endpoint is not None else "Deploying",
                c.ENDPOINT_UNREACHABLE,
                str(exc),
                False,
                endpoint=url,
                **fields,
            )
            return
        card = find_card(cards, expected_name)
        if card is None and spec.endpoint is not None:
            # A server elsewhere: it must serve this model, or every request would fail.
            await self.set_status(
                "Pending",
                c.MODEL_NOT_SERVED,
                not_served_message(url, expected_name, cards),
                False,
                endpoint=url,
                **fields,
            )
            return
        if card is None and len(cards) == 1:
            card = cards[0]
        served = str(card.get("id")) if card else expected_name
        window = window_from_card(card) if card else None
        source = "server" if window else None
        if window is None:
            window, source = await fallback_window(spec, self.eas_spec)
        await self.set_status(
            "Ready",
            c.SERVING,
            f"serving {served} at {url}" + (f" (context window {window} tokens)" if window else ""),
            True,
            endpoint=url,
            served_model_name=served,
            max_model_len=window,
            max_model_len_source=source,
            **fields,
        )


def not_served_message(url: str, expected: str, cards: list[dict[str, Any]]) -> str:
    """Why an endpoint Workload is not Ready: the model it names and what the server serves."""
    names = [str(card.get("id")) for card in cards if card.get("id")]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    served = f"it serves {shown}" if names else "it lists no model"
    return (
        f"the server at {url} does not list the model {expected} in /v1/models; {served} "
        "(set spec.servedModelName, or spec.model, to the name it serves)"
    )


async def reconcile_workload(
    svc: Services, namespace: str, name: str, *, pod: dict[str, Any] | None = None
) -> None:
    """Fetch the Workload and reconcile it; nothing to do when it is gone.

    ``pod``: the engine pod whose event asks for it. One Kueue has evicted is read beside
    the listed pods: Kueue deletes it next, and a list made after may not have it.
    """
    evicted = pod if pod is not None and kueue.evicted_message(pod) is not None else None
    async with svc.locked("Workload", namespace, name):
        body = await svc.kube.get("Workload", namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        await WorkloadReconciler(svc, body, evicted).reconcile()
