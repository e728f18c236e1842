"""CRD ``openAPIV3Schema`` handling: pruning, defaulting and validation.

Follows the API server's order for custom resources: unknown fields are pruned (and
reported, for ``fieldValidation``), defaults are applied, then the object is validated and
every offending field is reported. CEL rules (``x-kubernetes-validations``) are not
evaluated.
"""

from __future__ import annotations

import copy
import math
import re
from datetime import datetime
from typing import Any

from kyai_devcluster._errors import FieldError, go_repr

Obj = dict[str, Any]

#: ObjectMeta fields that survive pruning of ``metadata``.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(obj: Obj, schema: Obj | None) -> list[str]:
    """Drop fields the schema does not declare, in place; return their paths.

    The root keeps ``apiVersion``, ``kind`` and ``metadata`` (whose unknown fields are
    dropped too), as the API server does.
    """
    unknown: list[str] = []
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        for key in list(metadata):
            if key not in OBJECT_META_FIELDS:
                unknown.append(f"metadata.{key}")
                del metadata[key]
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        if schema is not None:
            _prune_properties(obj, schema, "", unknown, root=True)
        return unknown
    _prune_object(obj, schema, "", unknown, root=True)
    return unknown


def _prune_object(value: Obj, schema: Obj, path: str, unknown: list[str], *, root: bool) -> None:
    properties: Obj = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    for key in list(value):
        if root or embedded:
            if key in {"apiVersion", "kind"}:
                continue
            if key == "metadata":
                if embedded and isinstance(value[key], dict):
                    for meta_key in list(value[key]):
                        if meta_key not in OBJECT_META_FIELDS:
                            unknown.append(_join(_join(path, key), meta_key))
                            del value[key][meta_key]
                continue
        if key in properties:
            _prune_value(value[key], properties[key], _join(path, key), unknown)
        elif isinstance(additional, dict):
            _prune_value(value[key], additional, _join(path, key), unknown)
        elif additional is True or preserve:
            continue
        else:
            unknown.append(_join(path, key))
            del value[key]


def _prune_properties(
    value: Obj, schema: Obj, path: str, unknown: list[str], *, root: bool
) -> None:
    """Inside preserve-unknown-fields: still prune below the declared properties."""
    properties: Obj = schema.get("properties") or {}
    for key, sub in properties.items():
        if key in value and not (root and key in {"apiVersion", "kind", "metadata"}):
            _prune_value(value[key], sub, _join(path, key), unknown)


def _prune_value(value: Any, schema: Obj, path: str, unknown: list[str]) -> None:
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
            return
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            _prune_properties(value, schema, path, unknown, root=False)
            return
        if schema.get("type", "object") == "object" or "properties" in schema:
            _prune_object(value, schema, path, unknown, root=False)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _prune_value(item, items, f"{path}[{index}]", unknown)


def apply_defaults(value: Any, schema: Obj | None) -> Any:
    """Fill in ``default`` values for absent properties, recursively, in place."""
    if schema is None:
        return value
    if isinstance(value, dict):
        properties: Obj = schema.get("properties") or {}
        for key, sub in properties.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in value:
                if key not in properties:
                    apply_defaults(value[key], additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(item, items)
    return value


def validate(obj: Obj, schema: Obj | None) -> list[FieldError]:
    """Validate a custom object against its version's schema; every error is returned."""
    if schema is None:
        return []
    errors: list[FieldError] = []
    properties: Obj = schema.get("properties") or {}
    for key, sub in properties.items():
        if key in {"apiVersion", "kind", "metadata"}:
            continue
        if key in obj:
            _validate(obj[key], sub, key, errors)
    for key in schema.get("required") or []:
        if key not in obj:
            errors.append(FieldError.required(key))
    return errors


_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), "object")


def _type_ok(value: Any, expected: str) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


_DATE_TIME_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _format_ok(value: str, fmt: str) -> bool:
    if fmt == "date-time":
        if not _DATE_TIME_RE.match(value):
            return False
        try:
            datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00"))
        except ValueError:
            return False
        return True
    if fmt == "date":
        try:
            datetime.strptime(value, "%Y-%m-%d")
        except ValueError:
            return False
        return True
    if fmt == "uuid":
        return bool(re.match(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$", value))
    if fmt == "byte":
        return bool(re.match(r"^[A-Za-z0-9+/]*={0,2}$", value)) and len(value) % 4 == 0
    return True


def _validate(value: Any, schema: Obj, path: str, errors: list[FieldError]) -> None:
    if value is None:
        if schema.get("nullable"):
            return
        if schema.get("x-kubernetes-preserve-unknown-fields") and "type" not in schema:
            return
        expected = schema.get("type")
        if expected:
            errors.append(
                FieldError.invalid(
                    path, "null", f'{path} in body must be of type {expected}: "null"'
                )
            )
        return
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok(value, "integer")):
            errors.append(
                FieldError.invalid(
                    path,
                    _json_type(value),
                    f'{path} in body must be of type integer or string: "{_json_type(value)}"',
                )
            )
            return
    elif expected and not _type_ok(value, expected):
        actual = _json_type(value)
        errors.append(
            FieldError.invalid(
                path, actual, f'{path} in body must be of type {expected}: "{actual}"'
            )
        )
        return

    if "enum" in schema and value not in schema["enum"]:
        errors.append(FieldError.not_supported(path, value, list(schema["enum"])))

    if isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errors)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors)

    for sub in schema.get("allOf") or []:
        _validate(value, sub, path, errors)
    if schema.get("anyOf"):
        if not any(not _collect(value, sub, path) for sub in schema["anyOf"]):
            errors.append(
                FieldError.invalid(path, value, "must validate at least one schema (anyOf)")
            )
    if schema.get("oneOf"):
        passing = sum(1 for sub in schema["oneOf"] if not _collect(value, sub, path))
        if passing != 1:
            errors.append(
                FieldError.invalid(path, value, "must validate one and only one schema (oneOf)")
            )
    if isinstance(schema.get("not"), dict) and not _collect(value, schema["not"], path):
        errors.append(FieldError.invalid(path, value, "must not validate the schema (not)"))


def _collect(value: Any, schema: Obj, path: str) -> list[FieldError]:
    found: list[FieldError] = []
    _validate(value, schema, path, found)
    return found


def _validate_number(value: float, schema: Obj, path: str, errors: list[FieldError]) -> None:
    shown = int(value) if isinstance(value, float) and value.is_integer() else value
    if "maximum" in schema:
        limit = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= limit:
            errors.append(
                FieldError.invalid(path, shown, f"{path} in body should be less than {limit}")
            )
        elif value > limit:
            errors.append(
                FieldError.invalid(
                    path, shown, f"{path} in body should be less than or equal to {limit}"
                )
            )
    if "minimum" in schema:
        limit = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= limit:
            errors.append(
                FieldError.invalid(path, shown, f"{path} in body should be greater than {limit}")
            )
        elif value < limit:
            errors.append(
                FieldError.invalid(
                    path, shown, f"{path} in body should be greater than or equal to {limit}"
                )
            )
    if schema.get("multipleOf"):
        quotient = value / schema["multipleOf"]
        if not math.isclose(quotient, round(quotient)):
            errors.append(
                FieldError.invalid(
                    path, shown, f"{path} in body should be a multiple of {schema['multipleOf']}"
                )
            )


def _validate_string(value: str, schema: Obj, path: str, errors: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(FieldError.too_long(path, int(schema["maxLength"])))
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            FieldError.invalid(
                path, value, f"{path} in body should be at least {schema['minLength']} chars long"
            )
        )
    pattern = schema.get("pattern")
    if pattern and not re.search(pattern, value):
        errors.append(FieldError.invalid(path, value, f"{path} in body should match '{pattern}'"))
    fmt = schema.get("format")
    if fmt and not _format_ok(value, fmt):
        errors.append(
            FieldError.invalid(
                path, value, f"{path} in body must be of type {fmt}: {go_repr(value)}"
            )
        )


def _validate_array(value: list[Any], schema: Obj, path: str, errors: list[FieldError]) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(FieldError.too_many(path, len(value), int(schema["maxItems"])))
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            FieldError.invalid(
                path, len(value), f"{path} in body should have at least {schema['minItems']} items"
            )
        )
    list_type = schema.get("x-kubernetes-list-type")
    if schema.get("uniqueItems") or list_type == "set":
        seen: list[Any] = []
        for index, item in enumerate(value):
            if item in seen:
                errors.append(FieldError.duplicate(f"{path}[{index}]", item))
            else:
                seen.append(item)
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[tuple[Any, ...]] = []
        for index, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            identity = tuple(item.get(key) for key in keys)
            if identity in seen_keys:
                shown = {key: item.get(key) for key in keys}
                errors.append(
                    FieldError(
                        f"{path}[{index}]", "FieldValueDuplicate", f"Duplicate value: {shown}"
                    )
                )
            else:
                seen_keys.append(identity)
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _validate(item, items, f"{path}[{index}]", errors)


def _validate_object(value: Obj, schema: Obj, path: str, errors: list[FieldError]) -> None:
    properties: Obj = schema.get("properties") or {}
    embedded = bool(schema.get("x-kubernetes-embedded-resource"))
    for key, sub in properties.items():
        if embedded and key in {"apiVersion", "kind", "metadata"}:
            continue
        if key in value:
            _validate(value[key], sub, _join(path, key), errors)
    for key in schema.get("required") or []:
        if key not in value:
            errors.append(FieldError.required(_join(path, key)))
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        for key, item in value.items():
            if key not in properties:
                _validate(item, additional, _join(path, key), errors)
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(FieldError.too_many(path, len(value), int(schema["maxProperties"])))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            FieldError.invalid(
                path,
                len(value),
                f"{path} in body should have at least {schema['minProperties']} properties",
            )
        )
    if embedded:
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                errors.append(FieldError.required(_join(path, key)))
