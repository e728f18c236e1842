"""In-use protection of what a running EvaluationRun reads (its Snapshot and Workload).

As Kubernetes protects a PVC that a pod mounts (``kubernetes.io/pvc-protection``): a run
that starts puts :data:`~kyai.constants.IN_USE_FINALIZER` on its Snapshot and Workload, and
on the EngineArgsSet its Workload names. The finalizer stays while nobody deletes the object
(no write per run); once the object is being deleted, it is removed as soon as no started,
unfinished run uses the object (for an EngineArgsSet: no such run uses a Workload naming it),
and the deletion completes. Without it, deleting a Snapshot garbage-collects its rows
ConfigMap and a retried worker pod waits forever in CreateContainerConfigError; deleting an
EngineArgsSet turns the Workload a run measures NotReady under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kyai.api import RunStatusHead
from kyai.constants import IN_USE_FINALIZER
from kyai.controllers._kube import JSON_PATCH, KubeError
from kyai.controllers._services import Services

#: The kinds a run protects, and the spec field naming each.
PROTECTED = {"Snapshot": "snapshotRef", "Workload": "workloadRef"}

#: Protected through the Workload that names it (``spec.engineArgsSetRef``).
ENGINE_ARGS = "EngineArgsSet"

#: Phases of a run that uses its references.
USING_PHASES = ("Generating", "Judging")


def engine_args_of(workload: Mapping[str, Any] | None) -> str | None:
    """The name of the EngineArgsSet a Workload names, if any."""
    ref = ((workload or {}).get("spec") or {}).get("engineArgsSetRef") or {}
    return str(ref["name"]) if ref.get("name") else None


def to_protect(
    run: Mapping[str, Any], read: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """(kind, name) of what a starting run protects: its references and its EngineArgsSet.

    The EngineArgsSet is the one the Workload in ``read`` (the objects as just read, by kind)
    names.
    """
    found = references(run)
    engine_args = engine_args_of(read.get("Workload"))
    if engine_args is not None:
        found.append((ENGINE_ARGS, engine_args))
    return found


def references(run: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) of the protected objects ``run`` names (its accepted spec if it has one)."""
    accepted = RunStatusHead.model_validate(run.get("status") or {}).accepted_spec
    spec = accepted or run.get("spec") or {}
    found = []
    for kind, field in PROTECTED.items():
        ref = spec.get(field) or {}
        if ref.get("name"):
            found.append((kind, str(ref["name"])))
    return found


def _uses(run: Mapping[str, Any], kind: str, name: str) -> bool:
    meta = run.get("metadata") or {}
    phase = RunStatusHead.model_validate(run.get("status") or {}).phase
    return (
        phase in USING_PHASES
        and not meta.get("deletionTimestamp")
        and (kind, name) in references(run)
    )


async def protect(
    svc: Services, kind: str, namespace: str, name: str, read: Mapping[str, Any] | None = None
) -> str | None:
    """Put the in-use finalizer on the object; a message when it cannot be used (deleted).

    ``read`` is the object as just read (saves a GET when it carries the finalizer already).
    """
    for attempt in range(3):
        obj = (
            read if attempt == 0 and read is not None else await svc.kube.get(kind, namespace, name)
        )
        if obj is None:
            return f"the {kind} {name} does not exist any more"
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return f"the {kind} {name} is being deleted"
        finalizers = list(meta.get("finalizers") or [])
        if IN_USE_FINALIZER in finalizers:
            return None
        operations: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, IN_USE_FINALIZER]},
        ]
        try:
            await svc.kube.patch(kind, namespace, name, operations, content_type=JSON_PATCH)
            return None
        except KubeError as exc:
            if exc.status not in (409, 422):
                raise
    return None  # changed under us three times: the next reconcile tries again


async def _users(svc: Services, kind: str, namespace: str, name: str) -> list[tuple[str, str]]:
    """The (kind, name) a run must name to use the object.

    The object itself; for an EngineArgsSet, each Workload naming it.
    """
    if kind != ENGINE_ARGS:
        return [(kind, name)]
    workloads = await svc.kube.list("Workload", namespace)
    return [
        ("Workload", str(workload["metadata"]["name"]))
        for workload in workloads
        if engine_args_of(workload) == name
    ]


async def release_if_unused(svc: Services, kind: str, namespace: str, name: str) -> bool:
    """Remove the in-use finalizer of an object being deleted that no running run uses.

    True when it was removed. Reads the object only (one GET) unless it is being deleted.
    """
    return await _release(svc, kind, namespace, name, await svc.kube.get(kind, namespace, name))


async def _release(
    svc: Services, kind: str, namespace: str, name: str, obj: Mapping[str, Any] | None
) -> bool:
    """:func:`release_if_unused` of the object as just read."""
    if obj is None:
        return False
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if not meta.get("deletionTimestamp") or IN_USE_FINALIZER not in finalizers:
        return False
    users = await _users(svc, kind, namespace, name)
    if users:
        runs = await svc.kube.list("EvaluationRun", namespace)
        if any(_uses(run, *user) for run in runs for user in users):
            return False
    index = finalizers.index(IN_USE_FINALIZER)
    operations = [
        {"op": "test", "path": f"/metadata/finalizers/{index}", "value": IN_USE_FINALIZER},
        {"op": "remove", "path": f"/metadata/finalizers/{index}"},
    ]
    try:
        await svc.kube.patch(kind, namespace, name, operations, content_type=JSON_PATCH)
    except KubeError as exc:
        if exc.status in (404, 409, 422):  # gone, or changed: the next event looks again
            return False
        raise
    return True


async def release_references(
    svc: Services, namespace: str, refs: Iterable[tuple[str, str]]
) -> None:
    """:func:`release_if_unused` for what a finished or deleted run named.

    Each (kind, name) of ``refs``, and the EngineArgsSet its Workload names.
    """
    for kind, name in refs:
        obj = await svc.kube.get(kind, namespace, name)
        await _release(svc, kind, namespace, name, obj)
        engine_args = engine_args_of(obj) if kind == "Workload" else None
        if engine_args is not None:
            await release_if_unused(svc, ENGINE_ARGS, namespace, engine_args)
