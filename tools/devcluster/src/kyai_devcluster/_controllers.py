"""Simulated controllers: garbage collection, namespaces, CRD cleanup, Deployments, Jobs.

Each controller keeps a work queue of keys fed by the store's change events and reconciles
one key at a time on the server's event loop, so its reads and writes are atomic.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Hashable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kyai._clock import parse_time
from kyai._json import clone
from kyai_devcluster._errors import StatusError
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._selectors import selector_from_object
from kyai_devcluster._store import (
    CRD_CLEANUP_FINALIZER,
    CRDS,
    FOREGROUND,
    NAMESPACES,
    ORPHAN,
    Event,
    Store,
    meta,
    now_rfc3339,
)

Obj = dict[str, Any]
logger = logging.getLogger("kyai_devcluster")

PODS = ("", "pods")
JOBS = ("batch", "jobs")
DEPLOYMENTS = ("apps", "deployments")
REPLICASETS = ("apps", "replicasets")
PVCS = ("", "persistentvolumeclaims")
EVENTS = ("", "events")
SERVICE_ACCOUNTS = ("", "serviceaccounts")

#: Reason and message of pods and Jobs whose image cannot run here.
UNSUPPORTED_IMAGE = "UnsupportedImage"


def controller_ref(owner: Obj) -> Obj:
    """An ownerReference marking ``owner`` as the controller."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta(owner)["name"],
        "uid": meta(owner)["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_of(obj: Obj, kind: str) -> str | None:
    """The name of the controlling owner of ``kind``, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return str(ref.get("name"))
    return None


def set_condition(
    conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: str
) -> list[Obj]:
    """Set one condition, keeping ``lastTransitionTime`` when the status did not change."""
    result = [dict(condition) for condition in conditions]
    for condition in result:
        if condition.get("type") == kind:
            if condition.get("status") != status:
                condition["lastTransitionTime"] = now
            condition.update(status=status, reason=reason, message=message, lastUpdateTime=now)
            return result
    result.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
    )
    return result


def record_event(store: Store, involved: Obj, kind: str, reason: str, message: str) -> None:
    """Post a core/v1 Event about ``involved``, as a controller does."""
    metadata = meta(involved)
    namespace = metadata.get("namespace") or "default"
    now = now_rfc3339()
    rt = store.type_for(*EVENTS)
    body = {
        "metadata": {"generateName": f"{metadata['name']}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": metadata["name"],
            "namespace": metadata.get("namespace", ""),
            "uid": metadata.get("uid"),
            "resourceVersion": metadata.get("resourceVersion"),
        },
        "type": kind,
        "reason": reason,
        "message": message,
        "source": {"component": "kyai-devcluster"},
        "reportingComponent": "kyai-devcluster",
        "reportingInstance": "devcluster",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    with contextlib.suppress(StatusError):
        store.create(rt, namespace, body)


class Controller:
    """A work queue of keys and a worker reconciling them one at a time."""

    name = "controller"

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: asyncio.Queue[Hashable] = asyncio.Queue()
        self._pending: set[Hashable] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._task: asyncio.Task[None] | None = None

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        """The keys to reconcile after ``event``."""
        return ()

    def on_event(self, event: Event) -> None:
        """Store listener: enqueue the keys this change concerns."""
        for key in self.keys_for(event):
            self.enqueue(key)

    def enqueue(self, key: Hashable) -> None:
        """Reconcile ``key`` soon (once, however often it is enqueued before)."""
        if key not in self._pending:
            self._pending.add(key)
            self._queue.put_nowait(key)

    def enqueue_after(self, key: Hashable, delay: float) -> None:
        """Reconcile ``key`` after ``delay`` seconds."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            self.enqueue(key)

        handle = loop.call_later(max(delay, 0.0), fire)
        self._timers.add(handle)

    def reconcile(self, key: Hashable) -> None:
        """Bring the world in line for one key."""

    def start(self) -> None:
        """Start the worker."""
        self._task = asyncio.create_task(self._run(), name=f"devcluster-{self.name}")

    async def stop(self) -> None:
        """Stop the worker and pending timers."""
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            try:
                self.reconcile(key)
            except StatusError as error:
                logger.debug("%s: %s: %s", self.name, key, error)
            except Exception:
                logger.exception("%s failed to reconcile %s", self.name, key)


class GarbageCollector(Controller):
    """Owner references: background and foreground cascades, orphaning, dangling owners."""

    name = "garbage-collector"

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        metadata = meta(event.obj)
        uid = metadata.get("uid", "")
        keys: list[Hashable] = []
        if event.type == "DELETED":
            keys.append(("gone", uid))
            keys.extend(("owner", ref.get("uid")) for ref in metadata.get("ownerReferences") or [])
        elif metadata.get("deletionTimestamp") and {FOREGROUND, ORPHAN} & set(
            metadata.get("finalizers") or []
        ):
            keys.append(("owner", uid))
        if event.type == "ADDED" and metadata.get("ownerReferences"):
            keys.append(("dangling", uid))
        return keys

    def _dependents(self, owner_uid: str) -> list[tuple[ResourceType, Obj]]:
        found: list[tuple[ResourceType, Obj]] = []
        for group_resource, obj in self.store.dependents(owner_uid):
            rt = self.store.registry.preferred(*group_resource)
            if rt is not None:
                found.append((rt, obj))
        return found

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        action, uid = key
        if action == "gone":
            for dep_rt, dependent in self._dependents(uid):
                self._release(dep_rt, dependent, uid, cascade="Background")
        elif action == "owner":
            located = self.store.by_uid(uid)
            if located is None:
                return
            group_resource, owner = located
            owner_rt = self.store.registry.preferred(*group_resource)
            finalizers = meta(owner).get("finalizers") or []
            if owner_rt is None or not meta(owner).get("deletionTimestamp"):
                return
            if ORPHAN in finalizers:
                for dep_rt, dependent in self._dependents(uid):
                    self._drop_ref(dep_rt, dependent, uid)
                self.store.remove_finalizer(owner_rt, owner, ORPHAN)
            elif FOREGROUND in finalizers:
                dependents = self._dependents(uid)
                for dep_rt, dependent in dependents:
                    if not meta(dependent).get("deletionTimestamp"):
                        self._delete(dep_rt, dependent, "Foreground")
                if not self._dependents(uid):
                    self.store.remove_finalizer(owner_rt, owner, FOREGROUND)
        elif action == "dangling":
            located = self.store.by_uid(uid)
            if located is None:
                return
            group_resource, obj = located
            refs = meta(obj).get("ownerReferences") or []
            if refs and all(self.store.by_uid(str(ref.get("uid"))) is None for ref in refs):
                obj_rt = self.store.registry.preferred(*group_resource)
                if obj_rt is not None:
                    self._delete(obj_rt, obj, "Background")

    def _release(self, rt: ResourceType, dependent: Obj, owner_uid: str, *, cascade: str) -> None:
        refs = meta(dependent).get("ownerReferences") or []
        others = [r for r in refs if r.get("uid") != owner_uid]
        if any(self.store.by_uid(str(r.get("uid"))) is not None for r in others):
            self._drop_ref(rt, dependent, owner_uid)
        elif not meta(dependent).get("deletionTimestamp"):
            self._delete(rt, dependent, cascade)

    def _drop_ref(self, rt: ResourceType, dependent: Obj, owner_uid: str) -> None:
        updated = clone(dependent)
        refs = [r for r in meta(updated).get("ownerReferences") or [] if r.get("uid") != owner_uid]
        if refs:
            meta(updated)["ownerReferences"] = refs
        else:
            meta(updated).pop("ownerReferences", None)
        with contextlib.suppress(StatusError):
            self.store.write_spec(rt, dependent, updated)

    def _delete(self, rt: ResourceType, obj: Obj, propagation: str) -> None:
        with contextlib.suppress(StatusError):
            self.store.delete(
                rt, meta(obj).get("namespace"), meta(obj)["name"], propagation=propagation
            )


class NamespaceController(Controller):
    """Default service accounts; emptying and removing terminating namespaces."""

    name = "namespaces"

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        if event.group_resource == NAMESPACES:
            return [meta(event.obj)["name"]]
        namespace = meta(event.obj).get("namespace")
        if event.type == "DELETED" and namespace:
            return [namespace]
        return []

    def reconcile(self, key: Hashable) -> None:
        name = str(key)
        namespaces = self.store.type_for(*NAMESPACES)
        ns = self.store.find(namespaces, None, name)
        if ns is None:
            return
        if not meta(ns).get("deletionTimestamp"):
            accounts = self.store.type_for(*SERVICE_ACCOUNTS)
            if self.store.find(accounts, name, "default") is None:
                with contextlib.suppress(StatusError):
                    self.store.create(accounts, name, {"metadata": {"name": "default"}})
            return
        types = {rt.group_resource: rt for rt in self.store.registry.all() if rt.namespaced}
        for rt in types.values():
            for obj in list(self.store.objects(rt, name)):
                if not meta(obj).get("deletionTimestamp"):
                    with contextlib.suppress(StatusError):
                        self.store.delete(rt, name, meta(obj)["name"], propagation="Background")
        if not any(self.store.objects(rt, name) for rt in types.values()):
            self.store.finalize_namespace(name)


class CRDController(Controller):
    """Deleting a CRD deletes its objects, then the CRD."""

    name = "crd-cleanup"

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        if event.group_resource == CRDS:
            return [meta(event.obj)["name"]]
        if event.type == "DELETED" and event.group_resource[0]:
            return [f"{event.group_resource[1]}.{event.group_resource[0]}"]
        return []

    def reconcile(self, key: Hashable) -> None:
        crds = self.store.type_for(*CRDS)
        crd = self.store.find(crds, None, str(key))
        if crd is None or not meta(crd).get("deletionTimestamp"):
            return
        spec = crd.get("spec") or {}
        rt = self.store.registry.preferred(spec.get("group", ""), spec["names"]["plural"])
        left = list(self.store.objects(rt)) if rt is not None else []
        for obj in left:
            if rt is not None and not meta(obj).get("deletionTimestamp"):
                with contextlib.suppress(StatusError):
                    self.store.delete(rt, meta(obj).get("namespace"), meta(obj)["name"])
        if rt is None or not self.store.objects(rt):
            self.store.remove_finalizer(crds, crd, CRD_CLEANUP_FINALIZER)


class PersistentVolumeClaimController(Controller):
    """Claims bind at once to a directory under the workdir."""

    name = "pvc-binder"

    def __init__(self, store: Store, *, claim_dir: Callable[[str, str], Any]) -> None:
        super().__init__(store)
        self._claim_dir = claim_dir

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        if event.group_resource == PVCS and event.type != "DELETED":
            return [(meta(event.obj)["namespace"], meta(event.obj)["name"])]
        return []

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        rt = self.store.type_for(*PVCS)
        claim = self.store.find(rt, key[0], key[1])
        if claim is None or (claim.get("status") or {}).get("phase") == "Bound":
            return
        self._claim_dir(key[0], key[1])
        spec = claim.get("spec") or {}
        if not spec.get("volumeName"):
            updated = clone(claim)
            updated["spec"]["volumeName"] = f"pvc-{meta(claim)['uid']}"
            claim = self.store.write_spec(rt, claim, updated) or claim
        status = {
            "phase": "Bound",
            "accessModes": list(spec.get("accessModes") or []),
            "capacity": dict((spec.get("resources") or {}).get("requests") or {}),
        }
        self.store.write_status(rt, claim, status)


def pod_template_hash(template: Obj) -> str:
    """The ``pod-template-hash`` label value of a template."""
    digest = hashlib.sha256(repr(sorted(_flatten(template))).encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[byte % len(alphabet)] for byte in digest[:10])


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        items: list[tuple[str, str]] = []
        for key, item in value.items():
            items.extend(_flatten(item, f"{prefix}.{key}"))
        return items
    if isinstance(value, list):
        items = []
        for index, item in enumerate(value):
            items.extend(_flatten(item, f"{prefix}[{index}]"))
        return items
    return [(prefix, repr(value))]


def _pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _pod_finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in {"Succeeded", "Failed"}


class DeploymentController(Controller):
    """A Deployment owns one ReplicaSet per template; its status sums theirs."""

    name = "deployments"

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        namespace = meta(event.obj).get("namespace", "")
        if event.group_resource == DEPLOYMENTS:
            return [(namespace, meta(event.obj)["name"])]
        if event.group_resource == REPLICASETS:
            owner = owner_of(event.obj, "Deployment")
            return [(namespace, owner)] if owner else []
        return []

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        deployments = self.store.type_for(*DEPLOYMENTS)
        replicasets = self.store.type_for(*REPLICASETS)
        deployment = self.store.find(deployments, namespace, name)
        if deployment is None or meta(deployment).get("deletionTimestamp"):
            return
        spec = deployment.get("spec") or {}
        uid = meta(deployment)["uid"]
        replicas = int(spec.get("replicas", 1))
        template = clone(spec.get("template") or {})
        template_hash = pod_template_hash(template)
        owned = self.store.controlled(replicasets, uid)
        current = next(
            (
                rs
                for rs in owned
                if (meta(rs).get("labels") or {}).get("pod-template-hash") == template_hash
            ),
            None,
        )
        revision = 1 + max(
            (
                int((meta(rs).get("annotations") or {}).get("deployment.kubernetes.io/revision", 0))
                for rs in owned
            ),
            default=0,
        )
        if current is None:
            template_meta = template.setdefault("metadata", {})
            labels = dict(template_meta.get("labels") or {})
            labels["pod-template-hash"] = template_hash
            template_meta["labels"] = labels
            selector = clone(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = template_hash
            body = {
                "metadata": {
                    "name": f"{name}-{template_hash}",
                    "labels": labels,
                    "annotations": {
                        "deployment.kubernetes.io/revision": str(revision),
                        "deployment.kubernetes.io/desired-replicas": str(replicas),
                    },
                    "ownerReferences": [controller_ref(deployment)],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": template},
            }
            current = self.store.create(replicasets, namespace, body).obj
            record_event(
                self.store,
                deployment,
                "Normal",
                "ScalingReplicaSet",
                f"Scaled up replica set {meta(current)['name']} from 0 to {replicas}",
            )
        elif int((current.get("spec") or {}).get("replicas", 1)) != replicas:
            updated = clone(current)
            updated["spec"]["replicas"] = replicas
            current = self.store.write_spec(replicasets, current, updated) or current
        for rs in owned:
            if rs is not current and int((rs.get("spec") or {}).get("replicas", 0)) != 0:
                updated = clone(rs)
                updated["spec"]["replicas"] = 0
                self.store.write_spec(replicasets, rs, updated)
        owned = self.store.controlled(replicasets, uid)

        def total(field: str, sets: list[Obj]) -> int:
            return sum(int((rs.get("status") or {}).get(field, 0)) for rs in sets)

        current_now = next((rs for rs in owned if meta(rs)["uid"] == meta(current)["uid"]), current)
        available = total("availableReplicas", owned)
        updated_replicas = total("replicas", [current_now])
        now = now_rfc3339()
        old_status = deployment.get("status") or {}
        conditions = list(old_status.get("conditions") or [])
        if available >= replicas:
            conditions = set_condition(
                conditions,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                now,
            )
        else:
            conditions = set_condition(
                conditions,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                now,
            )
        rs_name = meta(current)["name"]
        if total("availableReplicas", [current_now]) >= replicas:
            conditions = set_condition(
                conditions,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.',
                now,
            )
        else:
            conditions = set_condition(
                conditions,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" is progressing.',
                now,
            )
        status: Obj = {
            "observedGeneration": meta(deployment).get("generation", 1),
            "replicas": total("replicas", owned),
            "updatedReplicas": updated_replicas,
            "readyReplicas": total("readyReplicas", owned),
            "availableReplicas": available,
            "conditions": conditions,
        }
        if status["replicas"] > available:
            status["unavailableReplicas"] = status["replicas"] - available
        status = {k: v for k, v in status.items() if v != 0 or k == "observedGeneration"}
        if _without_times(status) != _without_times(old_status):
            self.store.write_status(deployments, deployment, status)


def _without_times(status: Obj) -> Obj:
    copied = clone(status)
    for condition in copied.get("conditions") or []:
        condition.pop("lastUpdateTime", None)
        condition.pop("lastTransitionTime", None)
        condition.pop("lastProbeTime", None)
    return copied


class ReplicaSetController(Controller):
    """A ReplicaSet keeps ``replicas`` pods; its status counts the ready ones."""

    name = "replicasets"

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        namespace = meta(event.obj).get("namespace", "")
        if event.group_resource == REPLICASETS:
            return [(namespace, meta(event.obj)["name"])]
        if event.group_resource == PODS:
            owner = owner_of(event.obj, "ReplicaSet")
            return [(namespace, owner)] if owner else []
        return []

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        replicasets = self.store.type_for(*REPLICASETS)
        pods = self.store.type_for(*PODS)
        rs = self.store.find(replicasets, namespace, name)
        if rs is None or meta(rs).get("deletionTimestamp"):
            return
        spec = rs.get("spec") or {}
        uid = meta(rs)["uid"]
        wanted = int(spec.get("replicas", 1))
        live = [
            pod
            for pod in self.store.controlled(pods, uid)
            if not meta(pod).get("deletionTimestamp") and not _pod_finished(pod)
        ]
        template = spec.get("template") or {}
        for _ in range(wanted - len(live)):
            body = {
                "metadata": {
                    "generateName": f"{name}-",
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [controller_ref(rs)],
                },
                "spec": clone(template.get("spec") or {}),
            }
            self.store.create(pods, namespace, body)
        for pod in sorted(live, key=lambda p: meta(p)["creationTimestamp"], reverse=True)[
            : max(len(live) - wanted, 0)
        ]:
            with contextlib.suppress(StatusError):
                self.store.delete(pods, namespace, meta(pod)["name"])
        live = [
            pod
            for pod in self.store.controlled(pods, uid)
            if not meta(pod).get("deletionTimestamp")
        ]
        labels_selector = selector_from_object(spec.get("selector"))
        ready = sum(1 for pod in live if _pod_ready(pod))
        status = {
            "replicas": len(live),
            "fullyLabeledReplicas": sum(
                1 for pod in live if labels_selector.matches(meta(pod).get("labels"))
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": meta(rs).get("generation", 1),
        }
        status = {k: v for k, v in status.items() if v != 0 or k == "replicas"}
        if status != (rs.get("status") or {}):
            self.store.write_status(replicasets, rs, status)


class FinishedPod(NamedTuple):
    """What the Job controller remembers of a finished pod it has seen."""

    phase: str
    time: float
    reason: str
    message: str
    #: Whether the failure counts against ``backoffLimit`` (not after an ``Ignore`` rule).
    counts: bool = True
    #: The Job's failure message when the pod matched a ``FailJob`` rule.
    fail_job: str | None = None


def _terminated(statuses: Any) -> list[tuple[str, int]]:
    """(name, exit code) of each terminated container status, in order."""
    found: list[tuple[str, int]] = []
    for status in statuses or []:
        terminated = ((status or {}).get("state") or {}).get("terminated")
        if isinstance(terminated, dict):
            found.append((str(status.get("name")), int(terminated.get("exitCode") or 0)))
    return found


def _exit_code_match(pod: Obj, requirement: Obj) -> tuple[str, int] | None:
    """The first terminated container (app containers, then init ones) meeting ``requirement``.

    As Kubernetes' ``matchOnExitCodes``: a container still running has no exit code to match,
    and a container that exited 0 is left out whatever the operator.
    """
    status = pod.get("status") or {}
    name = requirement.get("containerName")
    values = set(requirement.get("values") or [])
    operator = requirement.get("operator")
    for key in ("containerStatuses", "initContainerStatuses"):
        for container, code in _terminated(status.get(key)):
            if (name is not None and name != container) or code == 0:
                continue
            if (operator == "In" and code in values) or (
                operator == "NotIn" and code not in values
            ):
                return container, code
    return None


def _condition_match(pod: Obj, patterns: list[Obj]) -> str | None:
    """The type of the first pod condition one of ``patterns`` (type and status) matches."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        for pattern in patterns:
            if (condition.get("type"), condition.get("status")) == (
                pattern.get("type"),
                pattern.get("status"),
            ):
                return str(condition.get("type"))
    return None


def match_pod_failure_policy(policy: Obj | None, pod: Obj) -> tuple[str | None, bool, str | None]:
    """(FailJob message, counts against backoffLimit, action) of a failed pod.

    Kubernetes' ``matchPodFailurePolicy`` (pkg/controller/job/pod_failure_policy.go): the
    rules in order, the first that matches decides; ``Ignore`` does not count the failure,
    ``FailJob`` fails the Job with the message naming the container, its exit code (or the
    pod's condition) and the rule's index, ``Count`` counts it as without a policy.
    ``FailIndex`` counts it too: the devcluster runs no Indexed Job (and its validation
    refuses ``FailIndex`` without ``backoffLimitPerIndex``, as Kubernetes does).
    """
    if not policy:
        return None, True, None
    namespace, name = meta(pod).get("namespace", ""), meta(pod).get("name", "")
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if action not in ("Ignore", "Count", "FailJob", "FailIndex"):
            continue  # an unknown action: the rule is skipped, as the API documents
        if rule.get("onExitCodes") is not None:
            matched = _exit_code_match(pod, rule["onExitCodes"])
            if matched is None:
                continue
            container, code = matched
            message = (
                f"Container {container} for pod {namespace}/{name} failed with exit code "
                f"{code} matching {action} rule at index {index}"
            )
        elif rule.get("onPodConditions"):
            kind = _condition_match(pod, rule["onPodConditions"])
            if kind is None:
                continue
            message = (
                f"Pod {namespace}/{name} has condition {kind} matching {action} rule at "
                f"index {index}"
            )
        else:
            continue
        if action == "Ignore":
            return None, False, action
        if action == "FailJob":
            return message, True, action
        return None, True, action
    return None, True, None


class JobController(Controller):
    """Jobs: pods until enough succeed, backoff and ``backoffLimit``, deadlines, TTL."""

    name = "jobs"

    def __init__(
        self, store: Store, *, backoff_seconds: float = 0.2, max_backoff_seconds: float = 2.0
    ) -> None:
        super().__init__(store)
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        # Finished pods seen per Job uid: pod uid -> what was seen (FinishedPod).
        self._counted: dict[str, dict[str, FinishedPod]] = {}

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        namespace = meta(event.obj).get("namespace", "")
        if event.group_resource == JOBS:
            if event.type == "DELETED":
                self._counted.pop(meta(event.obj).get("uid", ""), None)
                return []
            return [(namespace, meta(event.obj)["name"])]
        if event.group_resource == PODS:
            owner = owner_of(event.obj, "Job")
            return [(namespace, owner)] if owner else []
        return []

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        jobs = self.store.type_for(*JOBS)
        pods_rt = self.store.type_for(*PODS)
        job = self.store.find(jobs, namespace, name)
        if job is None or meta(job).get("deletionTimestamp"):
            return
        spec = job.get("spec") or {}
        status = clone(job.get("status") or {})
        uid = meta(job)["uid"]
        now = time.time()
        now_text = now_rfc3339()
        pods = self.store.controlled(pods_rt, uid)
        counted = self._counted.setdefault(uid, {})
        for pod in pods:
            if _pod_finished(pod) and meta(pod)["uid"] not in counted:
                counted[meta(pod)["uid"]] = self._finished_pod(spec, pod, now)
        active = [p for p in pods if not _pod_finished(p) and not meta(p).get("deletionTimestamp")]
        succeeded = sum(1 for seen in counted.values() if seen.phase == "Succeeded")
        # Every failure delays the next pod (Kubernetes' backoff record takes them all); only
        # those no Ignore rule matched count against backoffLimit and in status.failed.
        failures = [seen for seen in counted.values() if seen.phase == "Failed"]
        failed = sum(1 for seen in failures if seen.counts)
        conditions: list[Obj] = list(status.get("conditions") or [])
        if _finished(conditions):
            self._after_finish(job, spec, status, active)
            return
        if spec.get("suspend"):
            for pod in active:
                self._delete_pod(pods_rt, pod)
            status["active"] = 0
            status["conditions"] = set_condition(
                conditions, "Suspended", "True", "JobSuspended", "Job suspended", now_text
            )
            self._write(jobs, job, status)
            return
        suspended = next((c for c in conditions if c.get("type") == "Suspended"), None)
        if suspended is not None and suspended.get("status") == "True":
            # Resumed: the condition turns False and the start time is reset (as Kubernetes).
            conditions = set_condition(
                conditions, "Suspended", "False", "JobResumed", "Job resumed", now_text
            )
            status.update(conditions=conditions, startTime=now_text)
            record_event(self.store, job, "Normal", "Resumed", "Job resumed")
        status.setdefault("startTime", now_text)
        started = parse_time(status["startTime"])
        elapsed = now - started.timestamp() if started else 0.0
        completions = int(spec.get("completions") or 1)
        parallelism = int(spec.get("parallelism", 1))
        backoff_limit = int(spec.get("backoffLimit", 6))
        deadline = spec.get("activeDeadlineSeconds")
        unsupported = next(
            (info for info in counted.values() if info.reason == UNSUPPORTED_IMAGE), None
        )
        fail_job = next((seen.fail_job for seen in failures if seen.fail_job), None)
        failure: tuple[str, str] | None = None
        if unsupported is not None:
            failure = (UNSUPPORTED_IMAGE, unsupported.message)
        elif fail_job is not None:
            failure = ("PodFailurePolicy", fail_job)
        elif deadline is not None and elapsed >= float(deadline):
            failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
        elif failed > backoff_limit:
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if failure is not None:
            for pod in active:
                self._delete_pod(pods_rt, pod)
            reason, message = failure
            for kind in ("FailureTarget", "Failed"):
                conditions = _job_condition(conditions, kind, reason, message, now_text)
            status.update(conditions=conditions, active=0, ready=0)
            self._write(jobs, job, status, succeeded=succeeded, failed=failed)
            record_event(self.store, job, "Warning", reason, message)
            self._schedule_ttl(job, spec)
            return
        if succeeded >= completions:
            for pod in active:
                self._delete_pod(pods_rt, pod)
            message = "Reached expected number of succeeded pods"
            for kind in ("SuccessCriteriaMet", "Complete"):
                conditions = _job_condition(
                    conditions, kind, "CompletionsReached", message, now_text
                )
            status.update(conditions=conditions, active=0, ready=0, completionTime=now_text)
            self._write(jobs, job, status, succeeded=succeeded, failed=failed)
            record_event(self.store, job, "Normal", "Completed", "Job completed")
            self._schedule_ttl(job, spec)
            return
        wanted = min(parallelism, completions - succeeded) - len(active)
        if wanted > 0:
            delay = 0.0
            if failures:
                last_failure = max(seen.time for seen in failures)
                backoff = min(
                    self.backoff_seconds * 2 ** (len(failures) - 1), self.max_backoff_seconds
                )
                delay = last_failure + backoff - now
            if delay > 0:
                self.enqueue_after(key, delay)
            else:
                for _ in range(wanted):
                    active.append(self._create_pod(pods_rt, job))
        if deadline is not None:
            self.enqueue_after(key, float(deadline) - elapsed + 0.01)
        status["active"] = len(active)
        status["ready"] = sum(1 for pod in active if _pod_ready(pod))
        self._write(jobs, job, status, succeeded=succeeded, failed=failed)

    @staticmethod
    def _finished_pod(spec: Obj, pod: Obj, now: float) -> FinishedPod:
        """What is kept of a pod seen finished: a failed one matched to ``podFailurePolicy``."""
        status = pod.get("status") or {}
        phase = str(status["phase"])
        counts, fail_job = True, None
        if phase == "Failed":
            fail_job, counts, _ = match_pod_failure_policy(spec.get("podFailurePolicy"), pod)
        return FinishedPod(
            phase=phase,
            time=now,
            reason=str(status.get("reason", "")),
            message=str(status.get("message", "")),
            counts=counts,
            fail_job=fail_job,
        )

    def _after_finish(self, job: Obj, spec: Obj, status: Obj, active: list[Obj]) -> None:
        pods_rt = self.store.type_for(*PODS)
        for pod in active:
            self._delete_pod(pods_rt, pod)
        ttl = spec.get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = parse_time(
            status.get("completionTime")
            or next(
                (
                    c.get("lastTransitionTime")
                    for c in status.get("conditions") or []
                    if c.get("type") in {"Complete", "Failed"}
                ),
                None,
            )
        )
        remaining = (
            float(ttl) - (datetime.now(UTC) - finished_at).total_seconds() if finished_at else 0.0
        )
        if remaining <= 0:
            jobs = self.store.type_for(*JOBS)
            with contextlib.suppress(StatusError):
                self.store.delete(
                    jobs, meta(job)["namespace"], meta(job)["name"], propagation="Background"
                )
        else:
            self.enqueue_after((meta(job)["namespace"], meta(job)["name"]), remaining)

    def _schedule_ttl(self, job: Obj, spec: Obj) -> None:
        if spec.get("ttlSecondsAfterFinished") is not None:
            self.enqueue((meta(job)["namespace"], meta(job)["name"]))

    def _write(
        self,
        jobs: ResourceType,
        job: Obj,
        status: Obj,
        *,
        succeeded: int | None = None,
        failed: int | None = None,
    ) -> None:
        if succeeded is not None:
            status["succeeded"] = succeeded
        if failed is not None:
            status["failed"] = failed
        status.setdefault("ready", 0)
        status.setdefault("terminating", 0)
        status.setdefault("uncountedTerminatedPods", {})
        for field in ("active", "succeeded", "failed"):
            if status.get(field) == 0:
                status.pop(field)
        if status != (job.get("status") or {}):
            self.store.write_status(jobs, job, status)

    def _create_pod(self, pods_rt: ResourceType, job: Obj) -> Obj:
        template = (job.get("spec") or {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        body = {
            "metadata": {
                "generateName": f"{meta(job)['name']}-",
                "labels": dict(template_meta.get("labels") or {}),
                "annotations": dict(template_meta.get("annotations") or {}),
                "ownerReferences": [controller_ref(job)],
            },
            "spec": clone(template.get("spec") or {}),
        }
        pod = self.store.create(pods_rt, meta(job)["namespace"], body).obj
        record_event(
            self.store, job, "Normal", "SuccessfulCreate", f"Created pod: {meta(pod)['name']}"
        )
        return pod

    def _delete_pod(self, pods_rt: ResourceType, pod: Obj) -> None:
        with contextlib.suppress(StatusError):
            self.store.delete(pods_rt, meta(pod)["namespace"], meta(pod)["name"])


def _finished(conditions: list[Obj]) -> bool:
    return any(
        c.get("type") in {"Complete", "Failed"} and c.get("status") == "True" for c in conditions
    )


def _job_condition(
    conditions: list[Obj], kind: str, reason: str, message: str, now: str
) -> list[Obj]:
    result = [c for c in conditions if c.get("type") != kind]
    result.append(
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
    )
    return result
