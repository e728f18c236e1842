"""The three patch formats: JSON merge patch, JSON patch and strategic merge patch."""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from kyai._json import clone
from kyai_devcluster._errors import bad_request, unprocessable_patch

Obj = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch and return the result (inputs are not changed)."""
    if not isinstance(patch, dict):
        return clone(patch)
    result: Obj = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Obj, operations: Any) -> Obj:
    """Apply an RFC 6902 JSON patch; a failed ``test`` or a bad path gives a 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations (got an object)")
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"invalid json patch operation: {operation!r}")
    try:
        patch = jsonpatch.JsonPatch(operations)
        result = patch.apply(clone(target))
    except jsonpatch.JsonPatchTestFailed as exc:
        raise unprocessable_patch(
            f"the server rejected our request due to an error in our "
            f"request: test operation failed: {exc}"
        ) from exc
    except jsonpatch.InvalidJsonPatch as exc:
        raise bad_request(f"invalid json patch: {exc}") from exc
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise unprocessable_patch(
            f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    if not isinstance(result, dict):
        raise unprocessable_patch("the json patch replaced the whole object with a non-object")
    return result


# Strategic merge patch: list fields merged by key (patchMergeKey) in the built-in kinds.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "subsets": "",
}
# Lists of scalars merged as sets (patchStrategy: merge).
_PRIMITIVE_MERGE = {"finalizers"}


def _merge_key(kind: str, path: tuple[str, ...]) -> str | None:
    field = path[-1]
    if field == "ports":
        if kind == "Service" and path[-2:] == ("spec", "ports"):
            return "port"
        if len(path) >= 2 and path[-2] in {"containers", "initContainers", "ephemeralContainers"}:
            return "containerPort"
        return None
    return _MERGE_KEYS.get(field) or None


def strategic_merge_patch(target: Obj, patch: Any, *, kind: str) -> Obj:
    """Apply a strategic merge patch with the built-in kinds' list merge keys.

    Supported directives: ``$patch: replace|delete|merge`` on maps and list items,
    ``$setElementOrder/<list>``, ``$deleteFromPrimitiveList/<list>`` and ``$retainKeys``.
    """
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    result = _smp_map(clone(target), patch, kind=kind, path=())
    if not isinstance(result, dict):
        raise unprocessable_patch("the strategic merge patch deleted the whole object")
    return result


def _smp_map(target: Any, patch: Obj, *, kind: str, path: tuple[str, ...]) -> Any:
    directive = patch.get("$patch")
    body = {key: value for key, value in patch.items() if key != "$patch"}
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip_directives(body)
    if not isinstance(target, dict):
        target = {}
    retain = body.pop("$retainKeys", None)
    orders: dict[str, list[Any]] = {}
    for key in [key for key in body if key.startswith("$setElementOrder/")]:
        orders[key.split("/", 1)[1]] = body.pop(key)
    for key in [key for key in body if key.startswith("$deleteFromPrimitiveList/")]:
        field = key.split("/", 1)[1]
        remove = body.pop(key) or []
        if isinstance(target.get(field), list):
            target[field] = [item for item in target[field] if item not in remove]
    for key, value in body.items():
        child_path = (*path, key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(target.get(key), value, kind=kind, path=child_path)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        elif isinstance(value, list):
            target[key] = _smp_list(target.get(key), value, kind=kind, path=child_path)
        else:
            target[key] = value
    for field, order in orders.items():
        if isinstance(target.get(field), list):
            target[field] = _reorder(target[field], order, _merge_key(kind, (*path, field)))
    if isinstance(retain, list):
        for key in list(target):
            if key not in retain:
                del target[key]
    return target


def _smp_list(target: Any, patch: list[Any], *, kind: str, path: tuple[str, ...]) -> list[Any]:
    current: list[Any] = target if isinstance(target, list) else []
    field = path[-1]
    if field in _PRIMITIVE_MERGE:
        merged = list(current)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    key = _merge_key(kind, path)
    if not key or not all(isinstance(item, dict) for item in patch):
        return _strip_directives(patch)  # type: ignore[no-any-return]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch if item.get("$patch") != "replace"]
    merged = [clone(item) for item in current]
    for item in patch:
        wanted = item.get(key)
        index = next(
            (
                i
                for i, existing in enumerate(merged)
                if isinstance(existing, dict) and existing.get(key) == wanted
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
            continue
        if index is None:
            merged.append(_strip_directives(item))
        else:
            merged[index] = _smp_map(merged[index], item, kind=kind, path=path)
    return merged


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def identity(item: Any) -> Any:
        return item.get(key) if key and isinstance(item, dict) else item

    wanted = [identity(entry) if isinstance(entry, dict) else entry for entry in order]
    positions = {repr(value): index for index, value in enumerate(wanted)}
    return sorted(items, key=lambda item: positions.get(repr(identity(item)), len(positions)))


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _strip_directives(item) for key, item in value.items() if not key.startswith("$")
        }
    if isinstance(value, list):
        return [_strip_directives(item) for item in value]
    return value
