"""``kyai devcluster``: a local Kubernetes API server and simulated kubelet.

A test and demo tool, never a deployment target. It speaks the real protocol over loopback
HTTP (discovery, list and watch with resource versions and bookmarks, the patch formats,
the status subresource, finalizers, owner-reference cascades, CRD schema validation and
enough OpenAPI for ``kubectl apply``), so kopf, the ``kubernetes`` client and ``kubectl``
work against it unmodified. Its kubelet runs pods as local processes or podman containers,
with probes, pod IPs, Service forwarding and names on loopback, and service-account tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from kyai_devcluster._cluster import (
        INITIAL_NAMESPACES,
        DevCluster,
        DevClusterError,
        DevClusterThread,
        kubeconfig,
        write_kubeconfig,
    )
    from kyai_devcluster._errors import FieldError, StatusError
    from kyai_devcluster._images import DEFAULT_ENTRYPOINT, DEFAULT_LOCAL_IMAGES

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._cluster": (
            "INITIAL_NAMESPACES",
            "DevCluster",
            "DevClusterError",
            "DevClusterThread",
            "kubeconfig",
            "write_kubeconfig",
        ),
        "._errors": ("FieldError", "StatusError"),
        "._images": ("DEFAULT_ENTRYPOINT", "DEFAULT_LOCAL_IMAGES"),
    },
)

__all__ = [
    "DEFAULT_ENTRYPOINT",
    "DEFAULT_LOCAL_IMAGES",
    "INITIAL_NAMESPACES",
    "DevCluster",
    "DevClusterError",
    "DevClusterThread",
    "FieldError",
    "StatusError",
    "kubeconfig",
    "write_kubeconfig",
]
