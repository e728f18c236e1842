"""The in-memory object store: CRUD with the API server's semantics, history and watches.

All methods are synchronous and run on the server's event loop, so every write is atomic.
Stored objects are never mutated after they are committed; readers that change an object
work on a copy.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import json
import secrets
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kyai._json import clone
from kyai_devcluster import _builtins, _cel, _limits, _patch, _schema
from kyai_devcluster._errors import (
    FieldError,
    already_exists,
    bad_request,
    conflict,
    expired,
    forbidden,
    invalid,
    not_found,
    unsupported_media_type,
)
from kyai_devcluster._resources import Registry, ResourceType, types_from_crd
from kyai_devcluster._selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
#: An admission check run after validation, before storing: ``(type, new, old)``; raises.
Admission = Callable[[ResourceType, Obj, Obj | None], None]
Key = tuple[str, str]  # (namespace, name); namespace is "" for cluster-scoped objects

NAMESPACES = ("", "namespaces")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now_rfc3339() -> str:
    """The current time as the API server writes timestamps (seconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(length: int = 5) -> str:
    """A ``generateName`` suffix from the API server's alphabet."""
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def _controller_uid(obj: Obj) -> str | None:
    """The uid of the controller ownerReference of ``obj``, if it has one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


def _owner_uids(obj: Obj) -> set[str]:
    """The uids of every ownerReference of ``obj`` (controller or not)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return {str(ref["uid"]) for ref in refs if ref.get("uid")}


def meta(obj: Obj) -> Obj:
    """``obj["metadata"]`` (created if absent)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = obj["metadata"] = {}
    return metadata


@dataclass(frozen=True)
class Event:
    """One committed change."""

    type: str  # ADDED, MODIFIED, DELETED
    group_resource: tuple[str, str]
    obj: Obj
    old: Obj | None
    resource_version: int


@dataclass(eq=False)
class Watcher:
    """One open watch: a filter and a queue of events; ``None`` in the queue ends it."""

    group_resource: tuple[str, str]
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    queue: asyncio.Queue[tuple[str, Obj] | None] = field(default_factory=asyncio.Queue)

    def selects(self, obj: Obj | None) -> bool:
        """Whether an object passes this watch's namespace and selectors."""
        if obj is None:
            return False
        metadata = obj.get("metadata") or {}
        if self.namespace is not None and metadata.get("namespace", "") != self.namespace:
            return False
        return self.labels.matches(metadata.get("labels")) and self.fields.matches(obj)

    def translate(self, event: Event) -> tuple[str, Obj] | None:
        """The event this watcher sees: selector transitions become ADDED/DELETED."""
        if event.group_resource != self.group_resource:
            return None
        now = self.selects(event.obj)
        if event.type == "ADDED":
            return ("ADDED", event.obj) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.obj) if now else None
        before = self.selects(event.old)
        if now and before:
            return ("MODIFIED", event.obj)
        if now:
            return ("ADDED", event.obj)
        if before:
            return ("DELETED", event.obj)
        return None

    def close(self) -> None:
        """End the watch stream."""
        self.queue.put_nowait(None)


@dataclass
class WriteResult:
    """The object after a write, and the warnings to send back."""

    obj: Obj
    warnings: list[str] = field(default_factory=list)
    removed: bool = False


def _strip_volatile(obj: Obj) -> Obj:
    clone = {key: value for key, value in obj.items() if key != "apiVersion"}
    metadata = dict(clone.get("metadata") or {})
    metadata.pop("resourceVersion", None)
    metadata.pop("managedFields", None)
    clone["metadata"] = metadata
    return clone


class Store:
    """Objects of every served resource, with resource versions, history and watchers."""

    def __init__(self, *, history_limit: int = 10_000) -> None:
        self.registry = Registry()
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        #: Each bucket's keys in (namespace, name) order, kept as objects come and go: a LIST
        #: reads a namespace's range and a page from its continue key without sorting the
        #: bucket (a resync's paged LIST of 20,000 Jobs sorted them once per page).
        self._order: dict[tuple[str, str], list[Key]] = {}
        self._uids: dict[str, tuple[tuple[str, str], Key]] = {}
        #: Keys of the objects that name a controller, by (its uid, their group/resource):
        #: controllers find a Job's pods without scanning every pod (O(n^2) at 2,000 pods).
        self._controlled: dict[tuple[str, tuple[str, str]], set[Key]] = {}
        #: (group/resource, key) of the objects with an ownerReference to a uid, controller or
        #: not: the garbage collector finds an owner's dependents without a scan of every
        #: object (it scanned the whole store once per deleted owner).
        self._owned: dict[str, set[tuple[tuple[str, str], Key]]] = {}
        self._rv = 1
        self._history: deque[Event] = deque()
        self._history_limit = history_limit
        self._compacted = 0
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Event], None]] = []
        #: The CEL rules of the served CRDs (compiled once per schema).
        self.cel = _cel.CelValidator()
        #: Mutating admission of creates (e.g. Kueue's webhooks): called before defaulting and
        #: validation with ``(type, object, None)``; they change the object in place.
        self.mutators: list[Admission] = []

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The newest resource version."""
        return self._rv

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` synchronously after every commit (it must not write)."""
        self._listeners.append(listener)

    def type_for(self, group: str, plural: str) -> ResourceType:
        """The preferred served type of a resource (built-ins are always served)."""
        resource_type = self.registry.preferred(group, plural)
        if resource_type is None:
            raise not_found(plural, "", group)
        return resource_type

    def _bucket(self, rt: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rt.group_resource, {})

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "" if rt.namespaced else "", name)

    def _storage_api_version(self, rt: ResourceType) -> str:
        if rt.custom and rt.storage_version:
            return f"{rt.group}/{rt.storage_version}"
        return rt.api_version

    def _commit(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None) -> Obj:
        self._rv += 1
        meta(obj)["resourceVersion"] = str(self._rv)
        bucket = self._bucket(rt)
        key = self._key(rt, meta(obj).get("namespace"), meta(obj)["name"])
        owner = _controller_uid(obj)
        order = self._order.setdefault(rt.group_resource, [])
        if kind == "DELETED":
            if bucket.pop(key, None) is not None:
                index = bisect.bisect_left(order, key)
                if index < len(order) and order[index] == key:
                    del order[index]
            self._uids.pop(meta(obj).get("uid", ""), None)
            if owner is not None:
                self._controlled.get((owner, rt.group_resource), set()).discard(key)
        else:
            if key not in bucket:
                bisect.insort(order, key)
            bucket[key] = obj
            self._uids[meta(obj)["uid"]] = (rt.group_resource, key)
            if owner is not None:
                self._controlled.setdefault((owner, rt.group_resource), set()).add(key)
        if old is not None and (former := _controller_uid(old)) not in (None, owner):
            self._controlled.get((former, rt.group_resource), set()).discard(key)
        self._index_owners(rt.group_resource, key, obj, old, removed=kind == "DELETED")
        event = Event(kind, rt.group_resource, obj, old, self._rv)
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().resource_version
        if rt.group_resource == CRDS:
            self._crd_changed(obj, removed=kind == "DELETED", old=old)
        for watcher in list(self._watchers):
            seen = watcher.translate(event)
            if seen is not None:
                watcher.queue.put_nowait(seen)
        for listener in self._listeners:
            listener(event)
        return obj

    def _index_owners(
        self, group_resource: tuple[str, str], key: Key, obj: Obj, old: Obj | None, *,
        removed: bool,
    ) -> None:  # fmt: skip
        # A deletion's ``old`` is the stored object: its references are the ones to drop.
        now = set() if removed else _owner_uids(obj)
        before = _owner_uids(old) if old is not None else set()
        entry = (group_resource, key)
        for uid in before - now:
            owned = self._owned.get(uid)
            if owned is not None:
                owned.discard(entry)
                if not owned:
                    del self._owned[uid]
        for uid in now:
            self._owned.setdefault(uid, set()).add(entry)

    def _crd_changed(self, crd: Obj, *, removed: bool, old: Obj | None) -> None:
        spec = (old or crd).get("spec") or {}
        group = spec.get("group", "")
        plural = (spec.get("names") or {}).get("plural", "")
        self.registry.remove_resource(group, plural)
        if removed:
            for watcher in [w for w in self._watchers if w.group_resource == (group, plural)]:
                watcher.close()
                self._watchers.discard(watcher)
            self._objects.pop((group, plural), None)
            self._order.pop((group, plural), None)
            return
        for resource_type in types_from_crd(crd):
            self.registry.add(resource_type)

    # -- reads ------------------------------------------------------------------------------

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """The stored object (not a copy: do not change it), or ``None``."""
        return self._bucket(rt).get(self._key(rt, namespace, name))

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """A copy of one object, or a 404."""
        found = self.find(rt, namespace, name)
        if found is None:
            raise not_found(rt.plural, name, rt.group)
        return clone(found)

    def by_uid(self, uid: str) -> tuple[tuple[str, str], Obj] | None:
        """The object with this uid and its ``(group, plural)``, if it exists."""
        located = self._uids.get(uid)
        if located is None:
            return None
        group_resource, key = located
        obj = self._objects.get(group_resource, {}).get(key)
        return (group_resource, obj) if obj is not None else None

    def controlled(self, rt: ResourceType, uid: str) -> list[Obj]:
        """Stored objects of ``rt`` (not copies) whose controller has ``uid``, by key."""
        keys = self._controlled.get((uid, rt.group_resource))
        if not keys:
            return []
        bucket = self._bucket(rt)
        found = [(key, bucket.get(key)) for key in sorted(keys)]
        return [obj for _, obj in found if obj is not None and _controller_uid(obj) == uid]

    def dependents(self, uid: str) -> list[tuple[tuple[str, str], Obj]]:
        """Stored objects (not copies) with an ownerReference to ``uid``, with their group/resource.

        In (group/resource, key) order; an object of a removed CRD is not found.
        """
        found = []
        for group_resource, key in sorted(self._owned.get(uid, ())):
            obj = self._objects.get(group_resource, {}).get(key)
            if obj is not None and uid in _owner_uids(obj):  # a removed CRD's objects are gone
                found.append((group_resource, obj))
        return found

    def _keys(self, rt: ResourceType, namespace: str | None, after: Key | None = None) -> list[Key]:
        """The bucket's keys in order, of ``namespace`` only and after ``after`` only.

        ``namespace`` applies to a namespaced type; ``after`` is a continue key.
        """
        order = self._order.get(rt.group_resource, [])
        low, high = 0, len(order)
        if namespace is not None and rt.namespaced:
            low = bisect.bisect_left(order, (namespace, ""))
            high = bisect.bisect_left(order, (namespace + "\0", ""), low)
        if after is not None:
            low = max(low, bisect.bisect_right(order, after, low, high))
        return order[low:high]

    def objects(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        *,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> list[Obj]:
        """Stored objects (not copies), sorted by namespace and name, filtered."""
        return self._select(rt, self._keys(rt, namespace), labels, fields, None)

    def _select(
        self,
        rt: ResourceType,
        keys: list[Key],
        labels: LabelSelector | None,
        fields: FieldSelector | None,
        count: int | None,
    ) -> list[Obj]:
        """The objects of ``keys`` that the selectors match, the first ``count`` of them."""
        bucket = self._bucket(rt)
        found: list[Obj] = []
        for key in keys:
            obj = bucket[key]
            if labels is not None and not labels.matches(meta(obj).get("labels")):
                continue
            if fields is not None and not fields.matches(obj):
                continue
            found.append(obj)
            if count is not None and len(found) >= count:
                break
        return found

    def list_page(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        labels: LabelSelector,
        fields: FieldSelector,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> tuple[list[Obj], str, str]:
        """A page of matching objects, the list's resourceVersion and the continue token."""
        list_rv = str(self._rv)
        after: Key | None = None
        if continue_token:
            try:
                state = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                after = (str(state["start"][0]), str(state["start"][1]))
                list_rv = str(state["rv"])
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise bad_request(
                    "continue key is not valid: incorrect encoded start "
                    "resourceVersion (version meta.k8s.io/v1)"
                ) from exc
        paged = bool(limit and limit > 0)
        keys = self._keys(rt, namespace, after)
        items = self._select(rt, keys, labels, fields, limit + 1 if paged and limit else None)
        token = ""
        if paged and limit and len(items) > limit:
            items = items[:limit]
            last = meta(items[-1])
            state = {"rv": int(list_rv), "start": [last.get("namespace", ""), last["name"]]}
            token = base64.urlsafe_b64encode(json.dumps(state).encode()).decode()
        return items, list_rv, token

    # -- writes -----------------------------------------------------------------------------

    def _check_namespace(self, rt: ResourceType, namespace: str | None, name: str) -> None:
        if not rt.namespaced:
            return
        ns = self._objects.get(NAMESPACES, {}).get(("", namespace or ""))
        if ns is None:
            raise not_found("namespaces", namespace or "")
        if meta(ns).get("deletionTimestamp"):
            raise forbidden(
                f'{rt.qualified} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                kind=rt.plural,
                name=name,
                group=rt.group,
            )

    def _normalise_body(self, rt: ResourceType, namespace: str | None, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of a {rt.kind} must be a JSON object")
        obj = clone(body)
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if api_version and api_version != rt.api_version:
            registered = self.registry.by_kind(str(api_version), str(kind or rt.kind))
            if registered is None or registered.group_resource != rt.group_resource:
                raise bad_request(
                    f"the API version in the data ({api_version}) does not match the expected "
                    f"API version ({rt.api_version})"
                )
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"] = self._storage_api_version(rt)
        obj["kind"] = rt.kind
        metadata = meta(obj)
        if rt.namespaced:
            if metadata.get("namespace") and metadata["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the "
                    "namespace sent on the request"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        return obj

    def _prepare(
        self, rt: ResourceType, obj: Obj, old: Obj | None, *, field_validation: str
    ) -> list[str]:
        """Prune, default and validate; return warnings or raise the 400/422."""
        warnings: list[str] = []
        name = meta(obj).get("name", "")
        if rt.custom:
            unknown = _schema.prune(obj, rt.schema)
            if unknown and field_validation == "Strict":
                listed = ", ".join(f'unknown field "{path}"' for path in unknown)
                raise bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f"strict decoding error: {listed}"
                )
            if field_validation != "Ignore":
                warnings.extend(f'unknown field "{path}"' for path in unknown)
            _schema.apply_defaults(obj, rt.schema)
            errors: list[FieldError] = []
            if old is None:
                errors.extend(_builtins.validate_name(rt.kind, name))
            errors.extend(_builtins.validate_metadata(obj))
            errors.extend(_schema.validate(obj, rt.schema))
            if not errors:
                errors.extend(self.cel.validate(rt, obj, old))
        else:
            errors = _builtins.prepare_builtin(rt, obj, old)
            errors.extend(_limits.validate_sizes(rt.kind, obj))
            if old is not None and rt.group == "rbac.authorization.k8s.io":
                errors.extend(_builtins.validate_binding_update(rt.kind, obj, old))
        if errors:
            raise invalid(rt.kind, rt.group, name, errors)
        return warnings

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "Warn",
        admit: Admission | None = None,
    ) -> WriteResult:
        """Create an object (``POST``): uid, timestamps, generation, 409 on a duplicate."""
        obj = self._normalise_body(rt, namespace, body)
        metadata = meta(obj)
        self._check_namespace(rt, namespace, str(metadata.get("name") or ""))
        bucket = self._bucket(rt)
        if not metadata.get("name"):
            prefix = metadata.get("generateName")
            if not prefix:
                raise invalid(
                    rt.kind,
                    rt.group,
                    "",
                    [FieldError.required("metadata.name", "name or generateName is required")],
                )
            for _ in range(8):
                candidate = f"{str(prefix)[:58]}{random_suffix()}"
                if self._key(rt, namespace, candidate) not in bucket:
                    break
            metadata["name"] = candidate
        if self._key(rt, namespace, metadata["name"]) in bucket:
            raise already_exists(rt.plural, metadata["name"], rt.group)
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            metadata.pop(key, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_rfc3339()
        if rt.has_generation:
            metadata["generation"] = 1
        else:
            metadata.pop("generation", None)
        if "status" in rt.subresources:
            obj.pop("status", None)
        for mutate in self.mutators:
            mutate(rt, obj, None)
        warnings = self._prepare(rt, obj, None, field_validation=field_validation)
        if admit is not None:
            admit(rt, obj, None)
        if rt.group_resource == CRDS:
            finalizers = metadata.setdefault("finalizers", [])
            if CRD_CLEANUP_FINALIZER not in finalizers:
                finalizers.append(CRD_CLEANUP_FINALIZER)
            obj["status"] = _builtins.crd_status(obj, now_rfc3339(), None)
            self._check_crd_names(obj)
        if dry_run:
            return WriteResult(obj, warnings)
        _limits.check_stored_size(obj)
        return WriteResult(self._commit(rt, "ADDED", obj, None), warnings)

    def _check_crd_names(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        group = spec.get("group", "")
        kind = (spec.get("names") or {}).get("kind")
        for existing in self.registry.all():
            if existing.group == group and existing.kind == kind and not existing.custom:
                raise invalid(
                    "CustomResourceDefinition",
                    CRDS[0],
                    meta(crd)["name"],
                    [FieldError.invalid("spec.names.kind", kind, "is already in use")],
                )

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        admit: Admission | None = None,
    ) -> WriteResult:
        """Replace an object (``PUT``), with optimistic concurrency on ``resourceVersion``."""
        old = self.find(rt, namespace, name)
        if old is None:
            raise not_found(rt.plural, name, rt.group)
        new = self._normalise_body(rt, namespace, body)
        metadata = meta(new)
        if metadata.get("name") and metadata["name"] != name:
            raise bad_request(
                f"the name of the object ({metadata['name']}) does not match the "
                f"name on the URL ({name})"
            )
        metadata["name"] = name
        wanted = metadata.get("resourceVersion")
        if wanted:
            if str(wanted) != meta(old)["resourceVersion"]:
                raise conflict(rt.plural, name, rt.group)
        elif rt.custom:
            raise invalid(
                rt.kind,
                rt.group,
                name,
                [
                    FieldError.invalid(
                        "metadata.resourceVersion", "0x0", "must be specified for an update"
                    )
                ],
            )
        return self._write(
            rt,
            old,
            new,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
            admit=admit,
        )

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Warn",
        admit: Admission | None = None,
    ) -> WriteResult:
        """Patch an object (``PATCH``) with any of the four patch formats."""
        old = self.find(rt, namespace, name)
        if old is None:
            if content_type == _patch.APPLY_PATCH:
                applied = self._normalise_body(rt, namespace, body)
                meta(applied)["name"] = name
                return self.create(
                    rt,
                    namespace,
                    applied,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    admit=admit,
                )
            raise not_found(rt.plural, name, rt.group)
        doc = clone(old)
        doc["apiVersion"] = rt.api_version
        if content_type == _patch.JSON_PATCH:
            new = _patch.json_patch(doc, body)
        elif content_type == _patch.MERGE_PATCH:
            if not isinstance(body, dict):
                raise bad_request("a merge patch must be a JSON object")
            new = _patch.merge_patch(doc, body)
        elif content_type == _patch.STRATEGIC_MERGE_PATCH:
            if rt.custom:
                raise unsupported_media_type(
                    content_type, [_patch.JSON_PATCH, _patch.MERGE_PATCH, _patch.APPLY_PATCH]
                )
            new = _patch.strategic_merge_patch(doc, body, kind=rt.kind)
        elif content_type == _patch.APPLY_PATCH:
            if not isinstance(body, dict):
                raise bad_request("an apply patch must be an object")
            body = {key: value for key, value in body.items() if key not in {"apiVersion", "kind"}}
            new = _patch.merge_patch(doc, body)
        else:
            raise unsupported_media_type(
                content_type,
                [
                    _patch.JSON_PATCH,
                    _patch.MERGE_PATCH,
                    _patch.STRATEGIC_MERGE_PATCH,
                    _patch.APPLY_PATCH,
                ],
            )
        if not isinstance(new, dict):
            raise bad_request("the patch did not produce an object")
        new_meta = meta(new)
        if new_meta.get("resourceVersion") not in (None, meta(old)["resourceVersion"]):
            raise conflict(rt.plural, name, rt.group)
        if new_meta.get("name") != name:
            raise bad_request("the patch may not change metadata.name")
        new = self._normalise_body(rt, namespace, new)
        return self._write(
            rt,
            old,
            new,
            subresource=subresource,
            dry_run=dry_run,
            field_validation=field_validation,
            admit=admit,
        )

    def _write(
        self,
        rt: ResourceType,
        old: Obj,
        new: Obj,
        *,
        subresource: str | None,
        dry_run: bool,
        field_validation: str,
        admit: Admission | None = None,
    ) -> WriteResult:
        old_meta = meta(old)
        if subresource == "status":
            status = new.get("status")
            new = clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is None and "status" in rt.subresources:
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        elif subresource not in (None, "status"):
            raise bad_request(f"the {subresource} subresource cannot be written this way")
        new_meta = meta(new)
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ):
            if key in old_meta:
                new_meta[key] = clone(old_meta[key])
            else:
                new_meta.pop(key, None)
        new_meta.pop("managedFields", None)
        new_meta["resourceVersion"] = old_meta["resourceVersion"]
        if old_meta.get("deletionTimestamp"):
            added = [
                f
                for f in new_meta.get("finalizers") or []
                if f not in (old_meta.get("finalizers") or [])
            ]
            if added:
                shown = ", ".join(f'"{f}"' for f in added)
                raise invalid(
                    rt.kind,
                    rt.group,
                    old_meta["name"],
                    [
                        FieldError.forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers []string{{{shown}}}",
                        )
                    ],
                )
        warnings = self._prepare(rt, new, old, field_validation=field_validation)
        if admit is not None:
            admit(rt, new, old)
        if rt.group_resource == CRDS:
            new["status"] = _builtins.crd_status(new, now_rfc3339(), old)
            for condition, previous in zip(
                new["status"]["conditions"],
                (old.get("status") or {}).get("conditions") or [],
                strict=False,
            ):
                condition["lastTransitionTime"] = previous.get(
                    "lastTransitionTime", condition["lastTransitionTime"]
                )
        if rt.has_generation:
            ignored = {"metadata", "apiVersion", "kind"}
            if "status" in rt.subresources:
                ignored.add("status")
            before = {k: v for k, v in old.items() if k not in ignored}
            after = {k: v for k, v in new.items() if k not in ignored}
            if before != after:
                new_meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if _strip_volatile(new) == _strip_volatile(old):
            return WriteResult(clone(old), warnings)
        if dry_run:
            return WriteResult(new, warnings)
        _limits.check_stored_size(new)
        committed = self._commit(rt, "MODIFIED", new, old)
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            self._remove(rt, committed)
            return WriteResult(committed, warnings, removed=True)
        return WriteResult(committed, warnings)

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        final = clone(obj)
        return self._commit(rt, "DELETED", final, obj)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: Obj | None = None,
        dry_run: bool = False,
    ) -> WriteResult:
        """Delete an object: finalizers defer it (``deletionTimestamp``), else it goes now."""
        old = self.find(rt, namespace, name)
        if old is None:
            raise not_found(rt.plural, name, rt.group)
        old_meta = meta(old)
        for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = (preconditions or {}).get(key)
            if wanted and wanted != old_meta.get(key):
                raise conflict(
                    rt.plural,
                    name,
                    rt.group,
                    (
                        f"Precondition failed: {label} in precondition: {wanted}, "
                        f"{label} in object meta: {old_meta.get(key)}"
                    ),
                )
        if rt.group_resource == NAMESPACES and name in PROTECTED_NAMESPACES:
            raise forbidden(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                kind="namespaces",
                name=name,
            )
        if dry_run:
            return WriteResult(clone(old))
        finalizers = list(old_meta.get("finalizers") or [])
        if propagation == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        elif propagation == "Orphan" and ORPHAN not in finalizers:
            finalizers.append(ORPHAN)
        if rt.group_resource == NAMESPACES:
            finalizers = finalizers or []
            deferred = True
        else:
            deferred = bool(finalizers)
        if not deferred:
            return WriteResult(self._remove(rt, old), removed=True)
        if old_meta.get("deletionTimestamp") and finalizers == list(
            old_meta.get("finalizers") or []
        ):
            return WriteResult(clone(old))
        new = clone(old)
        new_meta = meta(new)
        new_meta.setdefault("deletionTimestamp", now_rfc3339())
        new_meta.setdefault("deletionGracePeriodSeconds", 0)
        if finalizers:
            new_meta["finalizers"] = finalizers
        if rt.group_resource == NAMESPACES:
            new.setdefault("status", {})["phase"] = "Terminating"
        return WriteResult(self._commit(rt, "MODIFIED", new, old))

    def remove_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        """Drop one finalizer (as a controller does); the object goes when none are left."""
        current = self.find(rt, meta(obj).get("namespace"), meta(obj)["name"])
        if current is None or finalizer not in (meta(current).get("finalizers") or []):
            return
        new = clone(current)
        remaining = [f for f in meta(new)["finalizers"] if f != finalizer]
        if remaining:
            meta(new)["finalizers"] = remaining
        else:
            meta(new).pop("finalizers")
        committed = self._commit(rt, "MODIFIED", new, current)
        if meta(committed).get("deletionTimestamp") and not remaining:
            self._remove(rt, committed)

    def finalize_namespace(self, name: str) -> None:
        """Remove a terminating namespace (its contents are gone)."""
        rt = self.type_for(*NAMESPACES)
        current = self.find(rt, None, name)
        if current is not None and not meta(current).get("finalizers"):
            self._remove(rt, current)

    def write_status(self, rt: ResourceType, obj: Obj, status: Obj) -> Obj | None:
        """Set an object's status as a controller does (no-op when unchanged)."""
        current = self.find(rt, meta(obj).get("namespace"), meta(obj)["name"])
        if current is None or meta(current).get("uid") != meta(obj).get("uid"):
            return None
        if current.get("status") == status:
            return current
        new = clone(current)
        new["status"] = clone(status)
        return self._commit(rt, "MODIFIED", new, current)

    def write_spec(self, rt: ResourceType, obj: Obj, updated: Obj) -> Obj | None:
        """Replace an object as a controller does (status kept, generation bumped)."""
        current = self.find(rt, meta(obj).get("namespace"), meta(obj)["name"])
        if current is None:
            return None
        result = self._write(
            rt,
            current,
            clone(updated),
            subresource=None,
            dry_run=False,
            field_validation="Ignore",
        )
        return result.obj

    def purge(self, rt: ResourceType, obj: Obj) -> None:
        """Remove an object at once, whatever its finalizers (cleanup of a removed CRD)."""
        current = self.find(rt, meta(obj).get("namespace"), meta(obj)["name"])
        if current is not None:
            self._remove(rt, current)

    # -- watches ----------------------------------------------------------------------------

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        labels: LabelSelector,
        fields: FieldSelector,
        resource_version: str | None,
    ) -> tuple[Watcher, list[tuple[str, Obj]]]:
        """Open a watch; return it with the events to send first.

        Without a resource version (or with ``"0"``) the current objects come first as
        ``ADDED``; with one, the retained history after it is replayed, and a version older
        than the retained history is a 410 ``Expired``.
        """
        watcher = Watcher(rt.group_resource, namespace if rt.namespaced else None, labels, fields)
        initial: list[tuple[str, Obj]] = []
        if resource_version in (None, "", "0"):
            initial = [
                ("ADDED", obj)
                for obj in self.objects(rt, watcher.namespace, labels=labels, fields=fields)
            ]
        else:
            try:
                since = int(str(resource_version))
            except ValueError as exc:
                raise bad_request(f"invalid resource version: {resource_version}") from exc
            if since < self._compacted:
                raise expired(since, self._compacted + 1)
            for event in self._history:
                if event.resource_version > since:
                    seen = watcher.translate(event)
                    if seen is not None:
                        initial.append(seen)
        self._watchers.add(watcher)
        return watcher, initial

    def unwatch(self, watcher: Watcher) -> None:
        """Forget a watch (its stream has ended)."""
        self._watchers.discard(watcher)

    def close_watches(self) -> None:
        """End every open watch stream (shutdown)."""
        for watcher in list(self._watchers):
            watcher.close()
        self._watchers.clear()

    @property
    def watch_count(self) -> int:
        """How many watch streams are open."""
        return len(self._watchers)
