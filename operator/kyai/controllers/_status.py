"""The one status writer of the three controllers: typed fields in, a merge patch out.

Every write goes through an api/ status model (:func:`kyai.api.status_patch`), records the
``observedGeneration`` it describes, keeps a local copy of the status up to date, and posts
events about the object. "The spec changed after the object was fixed" is noted here once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from kyai.api import Condition, StatusBase, status_patch
from kyai.builders import spec_hash
from kyai.controllers import _conditions as c
from kyai.controllers._conditions import Change
from kyai.controllers._services import Services

__all__ = ["Change", "StatusWriter", "named_references", "spec_changed"]


class _Seen(StatusBase):
    """What the writer reads of any kind's status: its phase and conditions."""

    phase: str | None = None


def _legacy_spec_hash(spec: Mapping[str, Any]) -> str:
    # Objects fixed before the builders' spec_hash was shared kept this form: accept it so
    # that an upgrade does not mark every existing run and snapshot Degraded.
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def spec_changed(spec: Mapping[str, Any], recorded: str | None) -> bool:
    """Whether ``spec`` differs from the one whose hash was ``recorded``."""
    if recorded is None:
        return True
    return recorded not in (spec_hash(spec), _legacy_spec_hash(spec))


def named_references(spec: object, status: Mapping[str, Any]) -> dict[str, str]:
    """``workload`` and ``snapshot`` from an EvaluationRun's raw spec, when the status lacks them.

    A run that fails before it resolves its references (an invalid judge, an invalid spec)
    still shows, in ``kubectl get er``'s WORKLOAD and SNAPSHOT columns, what it names. Read
    from the raw spec: a spec that failed validation has no typed form; a name that is not a
    non-empty string is left out.
    """
    if not isinstance(spec, Mapping):
        return {}
    named: dict[str, str] = {}
    for field, key in (("workload", "workloadRef"), ("snapshot", "snapshotRef")):
        ref = spec.get(key)
        name = ref.get("name") if isinstance(ref, Mapping) else None
        if isinstance(name, str) and name and not status.get(field):
            named[field] = name
    return named


class StatusWriter:
    """Writes one object's status subresource; keeps ``status`` as last written."""

    def __init__(
        self,
        svc: Services,
        body: Mapping[str, Any],
        *,
        on_patched: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.svc = svc
        self.body: Mapping[str, Any] = body
        meta = body["metadata"]
        self.kind: str = body["kind"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.generation: int | None = meta.get("generation")
        self.status: dict[str, Any] = dict(body.get("status") or {})
        #: Counts the changes of ``status`` (what was parsed from it is stale once it moves).
        self.revision = 0
        self._on_patched = on_patched

    def merge(self, status: Mapping[str, Any]) -> None:
        """Merge fields read from the API server into ``status``."""
        self.status.update(status)
        self.revision += 1

    def seen(self) -> _Seen:
        """The phase, message and conditions as last read or written."""
        return _Seen.model_validate(self.status)

    def condition(self, type_: str) -> Condition | None:
        """The condition of ``type_`` as last read or written."""
        return self.seen().condition(type_)

    def conditions(self, *changes: Change) -> list[Condition]:
        """The status conditions with ``changes`` applied."""
        conditions = list(self.seen().conditions)
        for change in changes:
            conditions = c.set_condition(conditions, change, generation=self.generation)
        return conditions

    def _kstatus(self, fields: StatusBase) -> None:
        """Add ``Reconciling``/``Stalled`` to a write that sets the phase and the conditions.

        The three controllers set ``phase`` and ``Ready``; kstatus' two conditions follow
        from them here, in one place, for every kind (see :func:`c.kstatus_changes`).
        """
        phase = getattr(fields, "phase", None)
        if phase is None or "conditions" not in fields.model_fields_set:
            return
        ready = fields.condition(c.READY)
        reason = ready.reason if ready is not None else str(phase)
        message = fields.message or (ready.message if ready is not None else "")
        conditions = list(fields.conditions)
        created = self.body.get("metadata", {}).get("creationTimestamp")
        for change in c.kstatus_changes(
            self.kind, str(phase), reason, message, created=created, grace=self._grace()
        ):
            conditions = c.set_condition(conditions, change, generation=self.generation)
        fields.conditions = conditions

    def _grace(self) -> float:
        return self.svc.settings.missing_reference_grace_seconds

    def _body(self, fields: StatusBase) -> dict[str, Any]:
        fields.observed_generation = self.generation
        self._kstatus(fields)
        return status_patch(fields)

    def stall_due(self) -> bool:
        """Whether the current phase now calls for a ``Stalled`` the status does not show.

        A wait for a missing reference becomes Stalled after a grace period without any
        change of its own; a reconciler that skips unchanged writes asks this first.
        """
        seen = self.seen()
        if seen.phase is None:
            return False
        ready = seen.condition(c.READY)
        changes = c.kstatus_changes(
            self.kind,
            seen.phase,
            ready.reason if ready is not None else seen.phase,
            seen.message or "",
            created=self.body.get("metadata", {}).get("creationTimestamp"),
            grace=self._grace(),
        )
        stalled = seen.condition(c.STALLED)
        return changes[1].status is True and (stalled is None or stalled.status != "True")

    def unchanged(self, fields: StatusBase) -> bool:
        """Whether writing ``fields`` would change nothing."""
        body = self._body(fields)
        return body == {key: self.status.get(key) for key in body}

    async def patch(self, fields: StatusBase) -> dict[str, Any]:
        """Merge ``fields`` (those set, None deleting) into the status; the object back."""
        body = self._body(fields)
        self.merge(body)
        updated = await self.svc.kube.patch(
            self.kind, self.namespace, self.name, {"status": body}, subresource="status"
        )
        self.body = updated
        if self._on_patched is not None:
            self._on_patched(updated)
        return updated

    def event(self, type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event about the object (best effort)."""
        self.svc.events.record(self.body, type_, reason, message)

    async def note_spec_change(self, message: str) -> None:
        """Degraded/SpecImmutable with ``message`` and a Warning event, once."""
        condition = self.condition(c.DEGRADED)
        if condition is not None and condition.reason == c.SPEC_IMMUTABLE:
            return
        await self.patch(
            StatusBase(
                conditions=self.conditions(Change(c.DEGRADED, True, c.SPEC_IMMUTABLE, message))
            )
        )
        self.event("Warning", c.SPEC_IMMUTABLE, message)
