"""LeaderWorkerSet emulation (``kyai devcluster --lws``): its CRD, webhooks and controllers.

It follows LeaderWorkerSet v0.10.0 (``crds/lws/SOURCE.md``): the labels, annotations,
environment variables, names, conditions, reasons and messages below are that release's,
taken from ``api/leaderworkerset/v1/leaderworkerset_types.go``, ``pkg/webhooks``
(``leaderworkerset_webhook.go``, ``pod_webhook.go``), ``pkg/controllers``
(``leaderworkerset_controller.go``, ``pod_controller.go``) and ``pkg/utils``. What it leaves
out or does differently is in the README ("LeaderWorkerSet emulation"); the main departure:
no StatefulSets, the controller creates the pods the two StatefulSets would (leader pod
``<name>-<group>`` owned by the LeaderWorkerSet, worker pods ``<name>-<group>-<index>`` owned
by their leader pod), with the StatefulSet pod identity (``spec.hostname``/``subdomain``,
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index``).

Three parts:

* :func:`lws_webhook` — the mutating and validating webhooks: LeaderWorkerSet defaulting and
  validation (``mleaderworkerset.kb.io`` / ``vleaderworkerset.kb.io``), and the pod
  defaulting of ``mpod.kb.io`` (group index, group key, worker index, ``LWS_*`` env);
* :class:`LeaderWorkerSetController` — groups (leader and workers), the headless Service,
  ``RecreateGroupOnPodRestart``, scaling, rolling update and status;
* :func:`install_crds` — the CRD, read from the package data.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import re
from collections.abc import Hashable, Iterable
from importlib import resources
from typing import Any

import yaml

from kyai._json import clone
from kyai_devcluster._controllers import (
    PODS,
    Controller,
    controller_ref,
    pod_template_hash,
    record_event,
)
from kyai_devcluster._errors import FieldError, StatusError, forbidden
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._store import CRDS, FOREGROUND, Event, Store, meta, now_rfc3339

Obj = dict[str, Any]

#: The LeaderWorkerSet release this emulation follows.
LWS_VERSION = "v0.10.0"
GROUP = "leaderworkerset.x-k8s.io"
API_VERSION = f"{GROUP}/v1"
LEADERWORKERSETS = (GROUP, "leaderworkersets")
SERVICES = ("", "services")

# api/leaderworkerset/v1/leaderworkerset_types.go
EXCLUSIVE_KEY_ANNOTATION = "leaderworkerset.sigs.k8s.io/exclusive-topology"
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
REPLICAS_ANNOTATION = "leaderworkerset.sigs.k8s.io/replicas"
GROUP_UNIQUE_HASH_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
LEADER_POD_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
SUBDOMAIN_POLICY_ANNOTATION = "leaderworkerset.sigs.k8s.io/subdomainPolicy"
RECREATE_GROUP_AFTER_START_ANNOTATION = (
    "leaderworkerset.sigs.k8s.io/experimental-recreate-group-after-start"
)
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"
RECREATE_GROUP_ON_POD_RESTART = "RecreateGroupOnPodRestart"
RECREATE_GROUP_AFTER_START = "RecreateGroupAfterStart"
SUBDOMAIN_SHARED = "Shared"
SUBDOMAIN_UNIQUE_PER_REPLICA = "UniquePerReplica"
LEADER_READY_STARTUP = "LeaderReady"
# The labels the StatefulSet controller puts on its pods (k8s.io/api/apps/v1).
STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
STS_POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
# pkg/controllers: event reasons.
GROUPS_PROGRESSING = "GroupsProgressing"
GROUPS_UPDATING = "GroupsUpdating"
# The webhooks' names (kubebuilder markers of pkg/webhooks).
_LWS_VALIDATING = "vleaderworkerset.kb.io"
_POD_MUTATING = "mpod.kb.io"

_CRD_FILE = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
_STATEFUL_POD = re.compile(r"(.*)-([0-9]+)$")
_PERCENT = re.compile(r"^[0-9]+%$")


# -- CRD -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _crd_text() -> Obj:
    folder = resources.files("kyai_devcluster").joinpath("crds", "lws")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document: Obj = yaml.load(folder.joinpath(_CRD_FILE).read_text(), Loader=loader)
    return document


def crd_document() -> Obj:
    """LeaderWorkerSet's CRD (a fresh copy), as its release ships it."""
    return clone(_crd_text())


def install_crds(store: Store) -> None:
    """Create the LeaderWorkerSet CRD in ``store`` (validated as any CRD)."""
    store.create(store.type_for(*CRDS), None, crd_document())


# -- helpers ---------------------------------------------------------------------------------


def parent_and_ordinal(name: str) -> tuple[str, int]:
    """``statefulsetutils.GetParentNameAndOrdinal``: ``("", -1)`` when not ``<parent>-<n>``."""
    match = _STATEFUL_POD.fullmatch(name)
    if match is None:
        return "", -1
    return match.group(1), int(match.group(2))


def sha1_hash(text: str) -> str:
    """``utils.Sha1Hash``: the 40-character hex SHA-1."""
    return hashlib.sha1(text.encode()).hexdigest()


def revision_key(lws: Obj) -> str:
    """The ``template-revision-hash`` of an LWS's current template.

    LWS hashes a ControllerRevision of ``spec.leaderWorkerTemplate`` (and networkConfig) with
    FNV over Go's ``%#v``; the value cannot be reproduced, only its role: it changes exactly
    when the template does.
    """
    spec = lws.get("spec") or {}
    return pod_template_hash(
        {
            "leaderWorkerTemplate": spec.get("leaderWorkerTemplate") or {},
            "networkConfig": spec.get("networkConfig") or {},
        }
    )


def _labels(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def _pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def container_restarted(pod: Obj) -> bool:
    """``podutils.ContainerRestarted``: a running or pending pod with a restarted container."""
    status = pod.get("status") or {}
    if status.get("phase") not in ("Running", "Pending"):
        return False
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    return any(int(item.get("restartCount") or 0) > 0 for item in statuses)


def _scaled(value: Any, total: int, *, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``."""
    if isinstance(value, str) and value.endswith("%"):
        amount = int(value[:-1]) * total / 100
        return math.ceil(amount) if round_up else math.floor(amount)
    return int(value or 0)


def _spec_values(lws: Obj) -> tuple[int, int, str, Obj]:
    """``(replicas, size, restartPolicy, rollingUpdateConfiguration)`` with LWS's defaults."""
    spec = lws.get("spec") or {}
    template = spec.get("leaderWorkerTemplate") or {}
    rolling = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    return (
        int(spec.get("replicas", 1)),
        int(template.get("size", 1)),
        str(template.get("restartPolicy") or RECREATE_GROUP_ON_POD_RESTART),
        rolling,
    )


def _group_pod(
    lws: Obj,
    template: Obj,
    pod_name: str,
    subdomain: str,
    labels: Obj,
    annotations: dict[str, str],
    *,
    owner: Obj,
) -> Obj:
    """A group's pod made from ``template``.

    Its name, hostname, subdomain, labels, annotations (the set's exclusive-placement key
    passed on) and its controller: the set for a leader, the leader for a worker.
    """
    exclusive = (meta(lws).get("annotations") or {}).get(EXCLUSIVE_KEY_ANNOTATION)
    if exclusive:
        annotations = {**annotations, EXCLUSIVE_KEY_ANNOTATION: exclusive}
    spec = clone(template.get("spec") or {})
    spec["hostname"] = pod_name
    spec["subdomain"] = subdomain
    return {
        "metadata": {
            "name": pod_name,
            "namespace": meta(lws)["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [controller_ref(owner)],
        },
        "spec": spec,
    }


def _subdomain_policy(lws: Obj) -> str:
    network = (lws.get("spec") or {}).get("networkConfig") or {}
    return str(network.get("subdomainPolicy") or SUBDOMAIN_SHARED)


# -- webhooks --------------------------------------------------------------------------------


def lws_webhook(rt: ResourceType, obj: Obj, old: Obj | None) -> None:
    """LWS's webhooks: LeaderWorkerSet defaulting and validation; pod defaulting at create."""
    if rt.group_resource == LEADERWORKERSETS:
        _default_lws(obj)
        _validate_lws(obj)
    elif rt.group_resource == PODS and old is None:
        _default_pod(obj)


def _default_lws(lws: Obj) -> None:
    """``LeaderWorkerSetWebhook.Default``."""
    spec = lws.setdefault("spec", {})
    template = spec.setdefault("leaderWorkerTemplate", {})
    if not template.get("restartPolicy"):
        template["restartPolicy"] = RECREATE_GROUP_ON_POD_RESTART
    if template.get("restartPolicy") == "Default":
        template["restartPolicy"] = "None"
    rollout = spec.setdefault("rolloutStrategy", {})
    if not rollout.get("type"):
        rollout["type"] = "RollingUpdate"
    if rollout["type"] == "RollingUpdate" and rollout.get("rollingUpdateConfiguration") is None:
        rollout["rollingUpdateConfiguration"] = {
            "maxUnavailable": 1,
            "maxSurge": 0,
            "partition": 0,
        }
    network = spec.get("networkConfig")
    if network is None:
        spec["networkConfig"] = {"subdomainPolicy": SUBDOMAIN_SHARED}
    elif network.get("subdomainPolicy") is None:
        network["subdomainPolicy"] = SUBDOMAIN_SHARED


def _validate_lws(lws: Obj) -> None:
    """``LeaderWorkerSetWebhook.generalValidate`` (the checks the CRD schema does not make)."""
    spec = lws.get("spec") or {}
    replicas = int(spec.get("replicas", 1))
    size = int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
    rolling = (spec.get("rolloutStrategy") or {}).get("rollingUpdateConfiguration") or {}
    errors: list[FieldError] = []
    name = str(meta(lws).get("name") or "")
    if name and not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        errors.append(
            FieldError.invalid(
                "metadata.name",
                name,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character "
                "(e.g. 'my-name',  or 'abc-123', regex used for validation is "
                "'[a-z]([-a-z0-9]*[a-z0-9])?')",
            )
        )
    if replicas < 0:
        errors.append(
            FieldError.invalid(
                "spec.replicas", replicas, "replicas must be equal or greater than 0"
            )
        )
    if size < 1:
        errors.append(
            FieldError.invalid(
                "spec.leaderWorkerTemplate.size", size, "size must be equal or greater than 1"
            )
        )
    base = "spec.rolloutStrategy.rollingUpdateConfiguration"
    values: dict[str, int] = {}
    for key, round_up in (("maxUnavailable", False), ("maxSurge", True)):
        value = rolling.get(key, 1 if key == "maxUnavailable" else 0)
        if isinstance(value, str):
            if not _PERCENT.fullmatch(value):
                errors.append(
                    FieldError.invalid(
                        f"{base}.{key}",
                        value,
                        "a valid percent string must be a numeric string followed by an ending "
                        "'%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    )
                )
                continue
            if int(value[:-1]) > 100:
                errors.append(
                    FieldError.invalid(f"{base}.{key}", value, "must not be greater than 100%")
                )
        elif int(value) < 0:
            errors.append(
                FieldError.invalid(f"{base}.{key}", value, "must be greater than or equal to 0")
            )
        values[key] = _scaled(value, replicas, round_up=round_up)
    partition = int(rolling.get("partition", 0) or 0)
    if partition < 0:
        errors.append(
            FieldError.invalid(f"{base}.partition", partition, "must be greater than or equal to 0")
        )
    if values.get("maxUnavailable") == 0 and values.get("maxSurge") == 0 and replicas != 0:
        errors.append(
            FieldError.invalid(
                f"{base}.maxUnavailable",
                rolling.get("maxUnavailable"),
                "must not be 0 when `maxSurge` is 0",
            )
        )
    if errors:
        rendered = [error.render() for error in errors]
        joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
        raise forbidden(f'admission webhook "{_LWS_VALIDATING}" denied the request: {joined}')


def _deny_pod(message: str) -> StatusError:
    return forbidden(f'admission webhook "{_POD_MUTATING}" denied the request: {message}')


def _default_pod(pod: Obj) -> None:
    """``PodWebhook.Default``: group and worker indexes, group key, ``LWS_*`` variables."""
    metadata = meta(pod)
    labels = metadata.get("labels") or {}
    if SET_NAME_LABEL not in labels:
        return
    name = str(metadata.get("name") or "")
    namespace = str(metadata.get("namespace") or "default")
    annotations = metadata.get("annotations") or {}
    if SIZE_ANNOTATION not in annotations:
        raise _deny_pod(f"size annotation is unexpectedly missing for pod {name}")
    spec = pod.setdefault("spec", {})
    if labels.get(WORKER_INDEX_LABEL) == "0":
        if GROUP_INDEX_LABEL not in labels:
            _, group_index = parent_and_ordinal(name)
            if group_index == -1:
                raise _deny_pod(f"parsing pod ordinal for pod {name}")
            labels[GROUP_INDEX_LABEL] = str(group_index)
        if annotations.get(SUBDOMAIN_POLICY_ANNOTATION) == SUBDOMAIN_UNIQUE_PER_REPLICA:
            spec["subdomain"] = name
        if GROUP_UNIQUE_HASH_LABEL not in labels:
            labels[GROUP_UNIQUE_HASH_LABEL] = sha1_hash(f"{namespace}/{name}")
    else:
        _, worker_index = parent_and_ordinal(name)
        if worker_index == -1:
            raise _deny_pod(f"parsing pod ordinal for pod {name}")
        labels[WORKER_INDEX_LABEL] = str(worker_index)
    metadata["labels"] = labels
    # podutils.AddLWSVariables: the three variables first, in this order, in every container.
    address = (
        f"{labels[SET_NAME_LABEL]}-{labels.get(GROUP_INDEX_LABEL, '')}."
        f"{spec.get('subdomain', '')}.{namespace}"
    )
    if GROUP_INDEX_LABEL not in labels:
        raise _deny_pod(
            "Failure constructing environment variables, no group index label found for pod "
            f"{namespace}/{name}"
        )
    injected = [
        {"name": LWS_LEADER_ADDRESS, "value": address},
        {"name": LWS_GROUP_SIZE, "value": str(annotations[SIZE_ANNOTATION])},
        {"name": LWS_WORKER_INDEX, "value": str(labels[WORKER_INDEX_LABEL])},
    ]
    names = {entry["name"] for entry in injected}
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            kept = [e for e in container.get("env") or [] if e.get("name") not in names]
            container["env"] = [dict(e) for e in injected] + kept


# -- controller ------------------------------------------------------------------------------


class LeaderWorkerSetController(Controller):
    """The LeaderWorkerSet and pod reconcilers of LWS, without the StatefulSets in between."""

    name = "leaderworkersets"

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        #: The leaderWorkerTemplate of each revision seen (the ControllerRevisions' data):
        #: workers are created from their leader's revision, as LWS does.
        self._revisions: dict[tuple[str, str, str], Obj] = {}
        #: Pods of a group that went away since the last reconcile, by LWS key.
        self._deleted: dict[tuple[str, str], list[Obj]] = {}

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        namespace = str(meta(event.obj).get("namespace") or "")
        if event.group_resource == LEADERWORKERSETS:
            return [(namespace, meta(event.obj)["name"])]
        if event.group_resource in (PODS, SERVICES):
            owner = _labels(event.obj).get(SET_NAME_LABEL)
            if not owner:
                return []
            if event.group_resource == PODS and event.type == "DELETED":
                self._deleted.setdefault((namespace, owner), []).append(event.obj)
            return [(namespace, owner)]
        return []

    # -- reconcile ---------------------------------------------------------------------------

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        deleted = self._deleted.pop((namespace, name), [])
        lws_rt = self.store.type_for(*LEADERWORKERSETS)
        lws = self.store.find(lws_rt, namespace, name)
        if lws is None or meta(lws).get("deletionTimestamp"):
            return
        replicas, size, restart_policy, rolling = _spec_values(lws)
        current = revision_key(lws)
        template = clone((lws.get("spec") or {}).get("leaderWorkerTemplate") or {})
        self._revisions[(namespace, name, current)] = template
        pods_rt = self.store.type_for(*PODS)
        if restart_policy in (RECREATE_GROUP_ON_POD_RESTART, RECREATE_GROUP_AFTER_START):
            after_start = (
                restart_policy == RECREATE_GROUP_AFTER_START
                or RECREATE_GROUP_AFTER_START_ANNOTATION in (meta(lws).get("annotations") or {})
            )
            # A pod deleted here is gone at once (no graceful deletion): its DELETED event
            # stands for the deletionTimestamp LWS's pod reconciler reacts to.
            restarted = [
                pod
                for pod in self._group_pods(namespace, name)
                if container_restarted(pod) or meta(pod).get("deletionTimestamp")
            ]
            for pod in deleted + restarted:
                self._restart_group(lws, pod, size, after_start=after_start)
        self._headless_service(lws)
        leaders = {
            meta(pod)["name"]: pod for pod in self._group_pods(namespace, name, leaders_only=True)
        }
        # Scale down: the leader StatefulSet deletes the highest ordinals (parallel policy).
        for pod_name, pod in list(leaders.items()):
            _, index = parent_and_ordinal(pod_name)
            if index >= replicas and not meta(pod).get("deletionTimestamp"):
                self._delete(pods_rt, pod)
                leaders.pop(pod_name)
        self._roll(lws, leaders, replicas, size, rolling, current)
        for index in range(replicas):
            pod_name = f"{name}-{index}"
            if pod_name not in leaders:
                leaders[pod_name] = self._create_leader(lws, index, size, current, template)
        for leader in leaders.values():
            self._workers(lws, leader, size)
        self._update_status(lws, replicas, size, current, rolling)

    def _group_pods(self, namespace: str, name: str, *, leaders_only: bool = False) -> list[Obj]:
        pods_rt = self.store.type_for(*PODS)
        found = []
        for pod in self.store.objects(pods_rt, namespace):
            labels = _labels(pod)
            if labels.get(SET_NAME_LABEL) != name:
                continue
            if leaders_only and labels.get(WORKER_INDEX_LABEL) != "0":
                continue
            found.append(pod)
        return found

    def _delete(self, rt: ResourceType, pod: Obj, propagation: str | None = None) -> None:
        with contextlib.suppress(StatusError):
            self.store.delete(
                rt, meta(pod).get("namespace"), meta(pod)["name"], propagation=propagation
            )

    def _restart_group(self, lws: Obj, pod: Obj, size: int, *, after_start: bool) -> None:
        """``PodReconciler.handleRestartPolicy``: delete the group's leader (foreground)."""
        namespace = meta(pod)["namespace"]
        pods_rt = self.store.type_for(*PODS)
        labels = _labels(pod)
        if after_start and self._pending_in_group(namespace, labels, size):
            return
        if labels.get(WORKER_INDEX_LABEL) != "0":
            leader_name, ordinal = parent_and_ordinal(meta(pod)["name"])
            if ordinal == -1:
                return
            leader = self.store.find(pods_rt, namespace, leader_name)
            if leader is None:
                return
            if _labels(leader).get(REVISION_LABEL) != labels.get(REVISION_LABEL):
                return
            # workerPodBelongsToLeader: a worker of an earlier incarnation of the group (its
            # leader replaced since) must not recreate the new group.
            owners = [r for r in meta(pod).get("ownerReferences") or [] if r.get("controller")]
            if not owners or owners[0].get("uid") != meta(leader)["uid"]:
                return
        else:
            leader = self.store.find(pods_rt, namespace, meta(pod)["name"])
            if leader is None or meta(leader)["uid"] != meta(pod)["uid"]:
                return
        if meta(leader).get("deletionTimestamp"):
            return
        self._delete(pods_rt, leader, FOREGROUND)
        record_event(
            self.store,
            lws,
            "Normal",
            "RecreateGroup",
            f"Worker pod {meta(pod)['name']} failed, deleted leader pod {meta(leader)['name']} "
            f"to recreate group {_labels(leader).get(GROUP_INDEX_LABEL, '')}",
        )

    def _pending_in_group(self, namespace: str, labels: dict[str, str], size: int) -> bool:
        group = [
            pod
            for pod in self._group_pods(namespace, labels.get(SET_NAME_LABEL, ""))
            if _labels(pod).get(GROUP_INDEX_LABEL) == labels.get(GROUP_INDEX_LABEL)
        ]
        return len(group) != size or any(
            (pod.get("status") or {}).get("phase", "Pending") == "Pending" for pod in group
        )

    def _headless_service(self, lws: Obj) -> None:
        """``reconcileHeadlessServices``: one headless Service ``<name>`` (Shared policy)."""
        if _subdomain_policy(lws) != SUBDOMAIN_SHARED:
            return
        name, namespace = meta(lws)["name"], meta(lws)["namespace"]
        self._ensure_service(lws, name, namespace, {SET_NAME_LABEL: name}, lws)

    def _ensure_service(
        self, lws: Obj, service: str, namespace: str, selector: dict[str, str], owner: Obj
    ) -> None:
        services = self.store.type_for(*SERVICES)
        if self.store.find(services, namespace, service) is not None:
            return
        body = {
            "metadata": {
                "name": service,
                "namespace": namespace,
                "labels": {SET_NAME_LABEL: meta(lws)["name"]},
                "ownerReferences": [controller_ref(owner)],
            },
            "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True},
        }
        with contextlib.suppress(StatusError):
            self.store.create(services, namespace, body)

    def _create_leader(self, lws: Obj, index: int, size: int, revision: str, lwt: Obj) -> Obj:
        """The leader StatefulSet's pod ``<name>-<index>`` (``constructLeaderStatefulSet...``)."""
        name, namespace = meta(lws)["name"], meta(lws)["namespace"]
        template = clone(lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {})
        template_meta = template.get("metadata") or {}
        pod_name = f"{name}-{index}"
        labels = {
            **(template_meta.get("labels") or {}),
            WORKER_INDEX_LABEL: "0",
            SET_NAME_LABEL: name,
            REVISION_LABEL: revision,
            STS_POD_NAME_LABEL: pod_name,
            STS_POD_INDEX_LABEL: str(index),
        }
        annotations = {**(template_meta.get("annotations") or {}), SIZE_ANNOTATION: str(size)}
        if _subdomain_policy(lws) == SUBDOMAIN_UNIQUE_PER_REPLICA:
            annotations[SUBDOMAIN_POLICY_ANNOTATION] = SUBDOMAIN_UNIQUE_PER_REPLICA
        body = _group_pod(lws, template, pod_name, name, labels, annotations, owner=lws)
        created = self.store.create(self.store.type_for(*PODS), namespace, body).obj
        if _subdomain_policy(lws) == SUBDOMAIN_UNIQUE_PER_REPLICA:
            self._ensure_service(
                lws,
                pod_name,
                namespace,
                {SET_NAME_LABEL: name, GROUP_INDEX_LABEL: str(index)},
                created,
            )
        return created

    def _workers(self, lws: Obj, leader: Obj, size: int) -> None:
        """The worker StatefulSet of one leader: pods ``<leader>-1`` … ``<leader>-<size-1>``."""
        if size <= 1 or meta(leader).get("deletionTimestamp"):
            return
        spec = lws.get("spec") or {}
        if spec.get("startupPolicy") == LEADER_READY_STARTUP and not _pod_ready(leader):
            return
        name, namespace = meta(lws)["name"], meta(lws)["namespace"]
        leader_labels = _labels(leader)
        revision = leader_labels.get(REVISION_LABEL, "")
        lwt = self._revisions.get((namespace, name, revision)) or spec.get(
            "leaderWorkerTemplate", {}
        )
        template = clone(lwt.get("workerTemplate") or {})
        template_meta = template.get("metadata") or {}
        pods_rt = self.store.type_for(*PODS)
        subdomain = (
            meta(leader)["name"] if _subdomain_policy(lws) == SUBDOMAIN_UNIQUE_PER_REPLICA else name
        )
        for index in range(1, size):
            pod_name = f"{meta(leader)['name']}-{index}"
            existing = self.store.find(pods_rt, namespace, pod_name)
            if existing is not None:
                continue
            labels = {
                **(template_meta.get("labels") or {}),
                GROUP_INDEX_LABEL: leader_labels.get(GROUP_INDEX_LABEL, ""),
                SET_NAME_LABEL: name,
                GROUP_UNIQUE_HASH_LABEL: leader_labels.get(GROUP_UNIQUE_HASH_LABEL, ""),
                REVISION_LABEL: revision,
                STS_POD_NAME_LABEL: pod_name,
                STS_POD_INDEX_LABEL: str(index),
            }
            annotations = {
                **(template_meta.get("annotations") or {}),
                SIZE_ANNOTATION: str(size),
                LEADER_POD_NAME_ANNOTATION: meta(leader)["name"],
            }
            body = _group_pod(lws, template, pod_name, subdomain, labels, annotations, owner=leader)
            with contextlib.suppress(StatusError):
                self.store.create(pods_rt, namespace, body)

    def _group_state(self, lws: Obj, leader: Obj, size: int, current: str) -> tuple[bool, bool]:
        """``(ready, updated)`` of the group of ``leader``."""
        namespace = meta(leader)["namespace"]
        pods_rt = self.store.type_for(*PODS)
        workers = [
            self.store.find(pods_rt, namespace, f"{meta(leader)['name']}-{index}")
            for index in range(1, size)
        ]
        uid = meta(leader)["uid"]
        live = [
            w
            for w in workers
            if w is not None
            and not meta(w).get("deletionTimestamp")
            and any(r.get("uid") == uid for r in meta(w).get("ownerReferences") or [])
        ]
        ready = _pod_ready(leader) and len(live) == size - 1 and all(_pod_ready(w) for w in live)
        updated = _labels(leader).get(REVISION_LABEL) == current and all(
            _labels(w).get(REVISION_LABEL) == current for w in live
        )
        return ready, updated

    def _roll(
        self,
        lws: Obj,
        leaders: dict[str, Obj],
        replicas: int,
        size: int,
        rolling: Obj,
        current: str,
    ) -> None:
        """Rolling update: recreate outdated groups, highest index first, within maxUnavailable."""
        pods_rt = self.store.type_for(*PODS)
        partition = int(rolling.get("partition", 0) or 0)
        budget = max(_scaled(rolling.get("maxUnavailable", 1), replicas, round_up=False), 1)
        states = {name: self._group_state(lws, pod, size, current) for name, pod in leaders.items()}
        unavailable = sum(1 for ready, _ in states.values() if not ready)
        missing = max(replicas - len(leaders), 0)
        outdated = sorted(
            (
                (parent_and_ordinal(name)[1], name)
                for name, pod in leaders.items()
                if _labels(pod).get(REVISION_LABEL) != current
                and not meta(pod).get("deletionTimestamp")
                and parent_and_ordinal(name)[1] >= partition
            ),
            reverse=True,
        )
        for index, name in outdated:
            ready, _ = states[name]
            if ready:
                if unavailable + missing >= budget:
                    continue
                unavailable += 1
            self._delete(pods_rt, leaders.pop(name))
            record_event(self.store, lws, "Normal", GROUPS_UPDATING, f"Updating replica {index}")

    def _update_status(
        self, lws: Obj, replicas: int, size: int, current: str, rolling: Obj
    ) -> None:
        """``updateStatus`` / ``updateConditions``."""
        namespace, name = meta(lws)["namespace"], meta(lws)["name"]
        leaders = [
            pod
            for pod in self._group_pods(namespace, name, leaders_only=True)
            if not meta(pod).get("deletionTimestamp")
        ]
        partition = int(rolling.get("partition", 0) or 0)
        ready_count = updated_count = ready_non_burst = 0
        current_non_burst = updated_non_burst = updated_and_ready = 0
        for pod in leaders:
            index = int(_labels(pod).get(GROUP_INDEX_LABEL, "-1") or -1)
            ready, updated = self._group_state(lws, pod, size, current)
            if 0 <= index < replicas and index >= partition:
                current_non_burst += 1
            if ready:
                ready_count += 1
            if updated:
                updated_count += 1
                if partition <= index < replicas:
                    updated_non_burst += 1
            if 0 <= index < replicas:
                if ready:
                    ready_non_burst += 1
                if index >= partition and ready and updated:
                    updated_and_ready += 1
        generation = int(meta(lws).get("generation", 1))
        if updated_non_burst < current_non_burst:
            wanted = [
                ("UpdateInProgress", GROUPS_UPDATING, "Rolling Upgrade is in progress"),
                ("Progressing", GROUPS_PROGRESSING, "Replicas are progressing"),
            ]
        elif ready_non_burst == replicas and updated_and_ready == current_non_burst:
            wanted = [("Available", "AllGroupsReady", "All replicas are ready")]
        else:
            wanted = [("Progressing", GROUPS_PROGRESSING, "Replicas are progressing")]
        old_status = lws.get("status") or {}
        conditions = [dict(c) for c in old_status.get("conditions") or []]
        changed = _set_conditions(conditions, wanted, generation)
        status: Obj = {
            "conditions": conditions,
            "readyReplicas": ready_count,
            "updatedReplicas": updated_count,
            "replicas": len(leaders),
            "hpaPodSelector": f"{SET_NAME_LABEL}={name},{WORKER_INDEX_LABEL}=0",
            "observedGeneration": generation,
        }
        status = {k: v for k, v in status.items() if v not in (0, [], "")}
        if status != old_status:
            self.store.write_status(self.store.type_for(*LEADERWORKERSETS), lws, status)
        if changed:
            record_event(
                self.store,
                lws,
                "Normal",
                wanted[0][1],
                f"{wanted[0][2]}, with {ready_count} groups ready of total {replicas} groups",
            )


_EXCLUSIVE = ({"Available", "Progressing"}, {"Available", "UpdateInProgress"})


def _set_conditions(conditions: list[Obj], wanted: list[tuple[str, str, str]], gen: int) -> bool:
    """``setConditions``: set each wanted condition True; Available excludes the others."""
    now = now_rfc3339()
    changed = False
    for kind, reason, message in wanted:
        new = {
            "type": kind,
            "status": "True",
            "lastTransitionTime": now,
            "observedGeneration": gen,
            "reason": reason,
            "message": message,
        }
        found = False
        for index, existing in enumerate(conditions):
            if existing.get("type") == kind:
                found = True
                if existing.get("status") != "True" or existing.get("observedGeneration") != gen:
                    conditions[index] = dict(new)
                    changed = True
            elif {kind, existing.get("type")} in _EXCLUSIVE and existing.get("status") == "True":
                existing.update(status="False", lastTransitionTime=now, observedGeneration=gen)
                changed = True
        if not found:
            conditions.append(dict(new))
            changed = True
    for existing in conditions:
        if existing.get("observedGeneration") != gen:
            existing["observedGeneration"] = gen
            changed = True
    return changed


__all__ = [
    "API_VERSION",
    "GROUP_INDEX_LABEL",
    "GROUP_UNIQUE_HASH_LABEL",
    "LEADER_POD_NAME_ANNOTATION",
    "LWS_GROUP_SIZE",
    "LWS_LEADER_ADDRESS",
    "LWS_VERSION",
    "LWS_WORKER_INDEX",
    "REVISION_LABEL",
    "SET_NAME_LABEL",
    "SIZE_ANNOTATION",
    "WORKER_INDEX_LABEL",
    "LeaderWorkerSetController",
    "crd_document",
    "install_crds",
    "lws_webhook",
]
