"""The manifest of a Snapshot's child: the immutable ConfigMap holding its resolved rows."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from kyai.builders._common import (
    LABEL_NAME_MAX,
    WORKER_TMP_PATH,
    child_name,
    label_value,
    owner_reference,
    worker_security_context,
)
from kyai.builders.evaluation import fail_at_once_policy
from kyai.constants import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_SNAPSHOT,
    MANAGER,
    TERMINATION_MESSAGE_ENV,
)


def config_map_name(snapshot: str) -> str:
    """The ConfigMap holding a Snapshot's resolved rows."""
    return child_name(snapshot, "-rows")


def load_job_name(snapshot: str) -> str:
    """The Job writing a large Snapshot's rows into its PVC (at most 63 characters)."""
    return child_name(snapshot, "-load", limit=LABEL_NAME_MAX)


#: Where the load Job mounts the Snapshot's PVC.
LOAD_MOUNT = "/var/lib/kyai/snapshot"


def _labels(snapshot: str) -> dict[str, str]:
    return {
        LABEL_NAME: "kyai",
        LABEL_COMPONENT: "snapshot",
        LABEL_PART_OF: "kyai-operator",
        LABEL_MANAGED_BY: MANAGER,
        LABEL_SNAPSHOT: label_value(snapshot),
    }


def _meta(owner: Mapping[str, Any], name: str) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "name": name,
        "namespace": meta["namespace"],
        "labels": _labels(meta["name"]),
        "ownerReferences": [owner_reference(owner)],
    }


def snapshot_claim(
    owner: Mapping[str, Any], *, size_bytes: int, storage_class: str | None = None
) -> dict[str, Any]:
    """The PVC holding a large Snapshot's resolved files (named as its ConfigMap would be).

    ``size_bytes`` is what the files take; the claim asks for twice that plus 64 MiB, in MiB.
    """
    mebibytes = (2 * size_bytes) // (1024 * 1024) + 64
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{mebibytes}Mi"}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(owner, config_map_name(owner["metadata"]["name"])),
        "spec": spec,
    }


def snapshot_load_job(
    owner: Mapping[str, Any],
    *,
    image: str,
    image_pull_policy: str,
    expect_sha256: str,
    queue: Mapping[str, str] | None = None,
    suspend: bool = False,
) -> dict[str, Any]:
    """The Job running ``kyai snapshot-load``: fetch the source, check it, write the files.

    The Snapshot's spec (a URL source: small) goes in as JSON; the Job resolves the rows as the
    operator did and refuses a result whose sha256 differs from ``expect_sha256``. ``queue``
    and ``suspend``: Kueue's labels and a suspended start, as for a run's Jobs.

    Like a run's worker Jobs it fails at once when ``kyai snapshot-load`` exits 2 (bad
    ``--spec`` or flags: a retry reads the same) or 3 (which it documents as a server no request
    can reach; a source it could not fetch exits 1 and is retried).
    """
    meta = owner["metadata"]
    security = worker_security_context()
    claim = config_map_name(meta["name"])
    spec_json = json.dumps(owner.get("spec") or {}, separators=(",", ":"), sort_keys=True)
    container = {
        "name": "load",
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "args": [
            "snapshot-load", "--name", meta["name"], "--spec", spec_json,
            "--expect-sha256", expect_sha256, "--output", LOAD_MOUNT,
        ],
        "env": [
            {"name": "HOME", "value": WORKER_TMP_PATH},
            {"name": TERMINATION_MESSAGE_ENV, "value": "/dev/termination-log"},
        ],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": "rows", "mountPath": LOAD_MOUNT}, *security.volume_mounts],
        "securityContext": security.container,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }  # fmt: skip
    metadata = _meta(owner, load_job_name(meta["name"]))
    metadata["labels"].update(queue or {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            **({"suspend": True} if suspend else {}),
            "backoffLimit": 2,
            "podFailurePolicy": fail_at_once_policy(container),
            "template": {
                "metadata": {"labels": _labels(meta["name"])},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": security.pod,
                    "containers": [container],
                    "volumes": [
                        {"name": "rows", "persistentVolumeClaim": {"claimName": claim}},
                        *security.volumes,
                    ],
                },
            },
        },
    }


def snapshot_config_map(
    owner: Mapping[str, Any], text: Mapping[str, str], binary: Mapping[str, bytes]
) -> dict[str, Any]:
    """The immutable ConfigMap of a Snapshot: text files in data, compressed ones in binaryData."""
    meta = owner["metadata"]
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": _labels(meta["name"]),
            "ownerReferences": [owner_reference(owner)],
        },
        "immutable": True,
        "data": dict(text),
    }
    if binary:
        config_map["binaryData"] = {
            key: base64.b64encode(value).decode("ascii") for key, value in binary.items()
        }
    return config_map
