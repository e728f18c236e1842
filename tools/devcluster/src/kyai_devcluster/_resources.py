"""Resource types: the built-in kinds the operator needs, and those that CRDs add."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

STANDARD_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True)
class ResourceType:
    """One resource of one group/version, as discovery lists it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = STANDARD_VERBS
    has_generation: bool = False
    custom: bool = False
    schema: Obj | None = field(default=None, compare=False, hash=False)
    printer_columns: tuple[Obj, ...] = field(default=(), compare=False, hash=False)
    selectable_fields: tuple[str, ...] = ()
    scale: Obj | None = field(default=None, compare=False, hash=False)
    storage_version: str = ""

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> tuple[str, str]:
        """The storage key: one store per group and plural, whatever the version."""
        return (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        """The kind of list responses."""
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """``plural.group`` as used in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular_name(self) -> str:
        """The singular name (lower-cased kind when not given)."""
        return self.singular or self.kind.lower()

    def storage_hash(self) -> str:
        """A stable ``storageVersionHash`` for discovery."""
        digest = hashlib.sha256(
            f"{self.group}/{self.storage_version or self.version}/{self.kind}".encode()
        )
        return digest.hexdigest()[:11]


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """A sort key that orders Kubernetes versions as discovery does (GA > beta > alpha)."""
    match = _VERSION_RE.match(version)
    if not match:
        return (0, 0, 0, version)
    major, stage, minor = match.groups()
    level = {None: 3, "beta": 2, "alpha": 1}[stage]
    return (level, int(major), int(minor or 0), "")


def _core(plural: str, kind: str, *, namespaced: bool = True, **kwargs: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, **kwargs)


def _builtin_types() -> list[ResourceType]:
    status = ("status",)
    return [
        _core(
            "namespaces",
            "Namespace",
            namespaced=False,
            short_names=("ns",),
            subresources=("status", "finalize"),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        _core("nodes", "Node", namespaced=False, short_names=("no",), subresources=status),
        _core("configmaps", "ConfigMap", short_names=("cm",)),
        _core("secrets", "Secret", selectable_fields=("type",)),
        _core(
            "services", "Service", short_names=("svc",), subresources=status, categories=("all",)
        ),
        _core(
            "events",
            "Event",
            short_names=("ev",),
            selectable_fields=(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        _core(
            "pods",
            "Pod",
            short_names=("po",),
            subresources=("status", "log"),
            categories=("all",),
            selectable_fields=(
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ),
        ),
        _core(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            short_names=("pvc",),
            subresources=status,
        ),
        _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
        ResourceType(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            True,
            short_names=("deploy",),
            subresources=("status", "scale"),
            has_generation=True,
            categories=("all",),
        ),
        ResourceType(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            True,
            short_names=("rs",),
            subresources=("status", "scale"),
            has_generation=True,
            categories=("all",),
        ),
        ResourceType(
            "batch",
            "v1",
            "jobs",
            "Job",
            True,
            subresources=status,
            has_generation=True,
            categories=("all",),
            selectable_fields=("status.successful",),
        ),
        ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
        ResourceType("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
        ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
        ),
        ResourceType(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            True,
            short_names=("netpol",),
        ),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
        # Stored as the API server stores them (a chart's PodDisruptionBudget); nothing evicts.
        ResourceType(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            True,
            short_names=("pdb",),
            subresources=status,
            has_generation=True,
        ),
        # Create-only reviews, answered by the API server and never stored (_reviews.py).
        ResourceType(
            "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", False, verbs=("create",)
        ),
        ResourceType(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "SelfSubjectReview",
            False,
            verbs=("create",),
        ),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            short_names=("crd", "crds"),
            subresources=status,
            has_generation=True,
        ),
    ]


BUILTIN_TYPES: tuple[ResourceType, ...] = tuple(_builtin_types())


def types_from_crd(crd: Obj) -> list[ResourceType]:
    """The resource types a CRD serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = spec.get("versions") or []
    storage = next((v.get("name", "") for v in versions if v.get("storage")), "")
    types: list[ResourceType] = []
    for version in versions:
        if not version.get("served", True):
            continue
        subresources = version.get("subresources") or {}
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        types.append(
            ResourceType(
                group=str(spec.get("group", "")),
                version=str(version.get("name", "")),
                plural=str(names.get("plural", "")),
                kind=str(names.get("kind", "")),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=tuple(name for name in ("status", "scale") if name in subresources),
                has_generation=True,
                custom=True,
                schema=schema,
                printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                selectable_fields=tuple(
                    str(item.get("jsonPath", "")).lstrip(".")
                    for item in version.get("selectableFields") or []
                ),
                scale=subresources.get("scale"),
                storage_version=storage,
            )
        )
    return types


class Registry:
    """The resource types currently served, by group, version and plural."""

    def __init__(self, types: Iterable[ResourceType] = BUILTIN_TYPES) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        #: versions_of by (group, plural): every request and commit asks for a type's
        #: preferred version (64 times per EvaluationRun in the operator bench), and the
        #: scan of all served types sorted by version priority cost 1 ms per run.
        self._versions: dict[tuple[str, str], tuple[ResourceType, ...]] = {}
        for resource_type in types:
            self.add(resource_type)

    def add(self, resource_type: ResourceType) -> None:
        """Serve a resource type (replacing an earlier definition)."""
        key = (resource_type.group, resource_type.version, resource_type.plural)
        self._types[key] = resource_type
        self._versions.clear()

    def remove_resource(self, group: str, plural: str) -> None:
        """Stop serving every version of a resource."""
        for key in [key for key in self._types if key[0] == group and key[2] == plural]:
            del self._types[key]
        self._versions.clear()

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``/apis/group/version/plural``, if any."""
        return self._types.get((group, version, plural))

    def versions_of(self, group: str, plural: str) -> list[ResourceType]:
        """Every served version of one resource, preferred first."""
        found = self._versions.get((group, plural))
        if found is None:
            matching = [t for (g, _, p), t in self._types.items() if g == group and p == plural]
            matching.sort(key=lambda t: version_priority(t.version), reverse=True)
            found = self._versions[(group, plural)] = tuple(matching)
        return list(found)

    def preferred(self, group: str, plural: str) -> ResourceType | None:
        """The preferred version of a resource."""
        if (group, plural) not in self._versions:
            self.versions_of(group, plural)
        versions = self._versions[(group, plural)]
        return versions[0] if versions else None

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        """The type of ``apiVersion`` + ``kind`` (as in an ownerReference)."""
        group, _, version = api_version.rpartition("/")
        for (g, v, _), resource_type in self._types.items():
            if g == group and v == version and resource_type.kind == kind:
                return resource_type
        return None

    def groups(self) -> dict[str, list[str]]:
        """Every group with its versions, preferred version first."""
        groups: dict[str, set[str]] = {}
        for group, version, _ in self._types:
            groups.setdefault(group, set()).add(version)
        return {
            group: sorted(versions, key=version_priority, reverse=True)
            for group, versions in groups.items()
        }

    def resources(self, group: str, version: str) -> list[ResourceType]:
        """The types of one group/version."""
        return [t for (g, v, _), t in sorted(self._types.items()) if g == group and v == version]

    def all(self) -> list[ResourceType]:
        """Every served type."""
        return list(self._types.values())
