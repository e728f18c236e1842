"""Manifest builders: pure functions from specs to the dicts the API server takes.

No function here calls the Kubernetes API; controllers create, compare and patch what these
return. :mod:`kyai.builders.workload` builds a Workload's engine Deployment and Service; the
helpers in ``_common`` give every child the same labels, owner reference, security contexts
and spec hash.
"""

from __future__ import annotations

from kyai.builders._common import (
    LABEL_NAME_MAX,
    PART_OF,
    SUBDOMAIN_MAX,
    WORKER_UID,
    ManifestError,
    WorkerSecurity,
    child_name,
    dns_label,
    engine_container_security_context,
    engine_pod_security_context,
    label_value,
    object_meta,
    owner_reference,
    restricted_container_security_context,
    restricted_pod_security_context,
    spec_hash,
    standard_labels,
    worker_container_security_context,
    worker_pod_security_context,
    worker_security_context,
    worker_tmp_mount,
    worker_tmp_volume,
)
from kyai.builders.workload import (
    engine_args_hash,
    engine_name,
    workload_deployment,
    workload_endpoint,
    workload_labels,
    workload_selector,
    workload_service,
)

__all__ = [
    "LABEL_NAME_MAX",
    "PART_OF",
    "SUBDOMAIN_MAX",
    "WORKER_UID",
    "ManifestError",
    "WorkerSecurity",
    "child_name",
    "dns_label",
    "engine_args_hash",
    "engine_container_security_context",
    "engine_name",
    "engine_pod_security_context",
    "label_value",
    "object_meta",
    "owner_reference",
    "restricted_container_security_context",
    "restricted_pod_security_context",
    "spec_hash",
    "standard_labels",
    "worker_container_security_context",
    "worker_pod_security_context",
    "worker_security_context",
    "worker_tmp_mount",
    "worker_tmp_volume",
    "workload_deployment",
    "workload_endpoint",
    "workload_labels",
    "workload_selector",
    "workload_service",
]
