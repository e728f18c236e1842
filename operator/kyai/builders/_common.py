"""What every child manifest shares: names, labels, owner references, security contexts, hashes.

Everything here is a pure function returning plain dicts (the JSON the API server takes); no
function talks to a cluster.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from kyai.constants import (
    ANNOTATION_SPEC_HASH,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    MANAGER,
)

#: The value of ``app.kubernetes.io/part-of`` on every child object.
PART_OF = "kyai"

#: The unprivileged user and group evaluation workers run as (the distroless "nonroot" uid).
WORKER_UID = 65532

#: Where workers get a writable directory when their root filesystem is read-only.
WORKER_TMP_PATH = "/tmp"
WORKER_TMP_VOLUME = "tmp"

_LABEL_VALUE_MAX = 63
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")

#: Longest name of most kinds (a DNS-1123 subdomain: ConfigMap, Secret, PVC, Role, ...).
SUBDOMAIN_MAX = 253
#: Longest name of a kind whose name becomes a label value or a DNS label: a Job (its pods
#: carry ``job-name=<name>``), a Service.
LABEL_NAME_MAX = 63


class ManifestError(ValueError):
    """A manifest cannot be built from the objects given."""


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dns_label(name: str, *, suffix: str = "") -> str:
    """``name`` + ``suffix`` as an RFC 1035 label (Service names): at most 63 characters.

    A name that already is such a label is returned as it is. Otherwise dots and other
    characters a label may not hold become dashes, a leading digit gets an ``x`` prefix, the
    result is cut to fit and ends with a short hash of the whole: distinct names (``a.b`` and
    ``a-b``, or two long names sharing a prefix) stay distinct.
    """
    whole = f"{name}{suffix}"
    label = _DNS_LABEL.sub("-", whole.lower()).strip("-")
    if not label or not label[0].isalpha():
        label = f"x{label}"
    if label == whole and len(label) <= _LABEL_VALUE_MAX:
        return label
    head = label[: _LABEL_VALUE_MAX - 9].rstrip("-")
    return f"{head}-{_digest(whole, 8)}"


def child_name(parent: str, suffix: str, *, limit: int = SUBDOMAIN_MAX) -> str:
    """``<parent><suffix>`` cut to ``limit`` characters, kept distinct by a short hash.

    A name that fits is returned unchanged. A longer one keeps the head of ``parent``, then
    ``-`` and 8 hex digits of the sha256 of the whole name, then ``suffix`` (so the child's
    role stays readable: ``<head>-1a2b3c4d-generate``), as kubebuilder projects and Helm's
    ``trunc 63`` helpers do. Two parents sharing a long prefix get different names.
    """
    whole = f"{parent}{suffix}"
    if len(whole) <= limit:
        return whole
    room = limit - len(suffix) - 9
    if room < 1:
        raise ManifestError(f"The suffix {suffix!r} leaves no room in a {limit}-character name.")
    head = parent[:room].rstrip("-.")
    return f"{head}-{_digest(whole, 8)}{suffix}"


def label_value(value: str) -> str:
    """``value`` fit for a label: at most 63 characters, cut with a hash suffix if longer."""
    if len(value) <= _LABEL_VALUE_MAX:
        return value
    head = value[: _LABEL_VALUE_MAX - 9].rstrip("-_.")
    return f"{head}-{_digest(value, 8)}"


def standard_labels(
    *,
    name: str,
    instance: str,
    component: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The recommended ``app.kubernetes.io/*`` labels plus ``extra`` (e.g. ``kyai.io/*``).

    ``name`` is the application (e.g. ``vllm``, ``kyai-worker``), ``instance`` the owning
    object's name, ``component`` its role (``engine``, ``generator``, ``judge``).
    """
    labels = {
        LABEL_NAME: label_value(name),
        LABEL_INSTANCE: label_value(instance),
        LABEL_COMPONENT: label_value(component),
        LABEL_PART_OF: PART_OF,
        LABEL_MANAGED_BY: MANAGER,
    }
    for key, value in (extra or {}).items():
        labels[key] = label_value(value)
    return labels


def owner_reference(body: Mapping[str, Any]) -> dict[str, Any]:
    """A controller owner reference to the object ``body`` (a kopf Body or a dict).

    ``controller`` marks the owner as the one managing the child; ``blockOwnerDeletion``
    keeps foreground deletion of the owner waiting for the child.
    """
    metadata = body.get("metadata") or {}
    missing = [
        field_name
        for field_name, value in (
            ("apiVersion", body.get("apiVersion")),
            ("kind", body.get("kind")),
            ("metadata.name", metadata.get("name")),
            ("metadata.uid", metadata.get("uid")),
        )
        if not value
    ]
    if missing:
        raise ManifestError(
            f"Cannot reference the owner: its {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing (pass the object as read from "
            "the API server)."
        )
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``metadata`` of a namespaced child: name, namespace, labels, annotations, owner."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def hashed_object(
    api_version: str,
    kind: str,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A namespaced child whose ``kyai.io/spec-hash`` annotation hashes its ``spec``.

    A reconciler compares the annotation to tell whether the object in the cluster is
    current, without comparing fields the API server (or an admission webhook) added.
    """
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": object_meta(
            name=name,
            namespace=namespace,
            labels=labels,
            owner=owner,
            annotations={ANNOTATION_SPEC_HASH: spec_hash(spec)},
        ),
        "spec": spec,
    }


def _canonical(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(obj, Mapping):
        return {str(key): _canonical(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_canonical(item) for item in obj]
    return obj


def spec_hash(obj: Any, *, length: int = 16) -> str:
    """A stable hash of ``obj`` (a pydantic model, mapping, list or scalar).

    Key order does not matter, unset optional fields of models do not count, so the same
    spec always hashes the same across processes and versions of this code.
    """
    text = json.dumps(
        _canonical(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return _digest(text, length)


# -- security contexts ----------------------------------------------------------------------


def restricted_pod_security_context(
    *, run_as_user: int = WORKER_UID, fs_group: int | None = WORKER_UID
) -> dict[str, Any]:
    """A pod security context meeting the "restricted" Pod Security Standard."""
    context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "runAsGroup": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if fs_group is not None:
        context["fsGroup"] = fs_group
    return context


def restricted_container_security_context(
    *, read_only_root_filesystem: bool = True
) -> dict[str, Any]:
    """A container security context meeting the "restricted" Pod Security Standard."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": read_only_root_filesystem,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def engine_pod_security_context() -> dict[str, Any]:
    """The serving engine's pod security context: RuntimeDefault seccomp, the image's user.

    Not ``runAsNonRoot``: the vLLM, SGLang and TensorRT-LLM images run as root (no ``USER`` in
    their Dockerfiles) and write to root-owned paths at start (``/root/.cache`` for weights,
    Triton and torch.compile caches, ``/tmp`` for IPC), so forcing another uid breaks them.
    The container still drops every capability and may not escalate privileges (see
    :func:`engine_container_security_context`), which leaves root inside the container without
    its usual powers over the node.
    """
    return {"seccompProfile": {"type": "RuntimeDefault"}}


def engine_container_security_context() -> dict[str, Any]:
    """The engine container's security context: no capabilities, no privilege escalation.

    The root filesystem stays writable: the engines compile kernels and write caches under
    paths of the image at start.
    """
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "privileged": False,
        "readOnlyRootFilesystem": False,
    }


@dataclass(frozen=True)
class WorkerSecurity:
    """What an evaluation worker's pod needs to run restricted with a read-only root."""

    pod: dict[str, Any]
    """The pod's ``securityContext``."""
    container: dict[str, Any]
    """Each container's ``securityContext``."""
    volumes: list[dict[str, Any]] = field(default_factory=list)
    """Volumes to add to the pod (an ``emptyDir`` for ``/tmp``)."""
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    """Mounts to add to each container."""


def worker_pod_security_context() -> dict[str, Any]:
    """The evaluation Jobs' pod security context: restricted, uid/gid 65532."""
    return restricted_pod_security_context(run_as_user=WORKER_UID, fs_group=WORKER_UID)


def worker_container_security_context() -> dict[str, Any]:
    """The evaluation Jobs' container security context: restricted, read-only root."""
    return restricted_container_security_context(read_only_root_filesystem=True)


def worker_tmp_volume(*, size_limit: str = "1Gi") -> dict[str, Any]:
    """The ``emptyDir`` giving workers a writable ``/tmp`` under a read-only root."""
    return {"name": WORKER_TMP_VOLUME, "emptyDir": {"sizeLimit": size_limit}}


def worker_tmp_mount() -> dict[str, Any]:
    """The mount of :func:`worker_tmp_volume` at ``/tmp``."""
    return {"name": WORKER_TMP_VOLUME, "mountPath": WORKER_TMP_PATH}


def worker_security_context(*, tmp_size_limit: str = "1Gi") -> WorkerSecurity:
    """Everything a worker pod needs to be restricted: contexts, ``/tmp`` volume and mount."""
    return WorkerSecurity(
        pod=worker_pod_security_context(),
        container=worker_container_security_context(),
        volumes=[worker_tmp_volume(size_limit=tmp_size_limit)],
        volume_mounts=[worker_tmp_mount()],
    )
