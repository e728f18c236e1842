"""API errors rendered as Kubernetes ``Status`` objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class FieldError:
    """One invalid field, as the API server's ``field.Error`` reports it."""

    field: str
    reason: str
    message: str

    @classmethod
    def required(cls, path: str, detail: str = "") -> FieldError:
        """A missing required field."""
        message = "Required value" + (f": {detail}" if detail else "")
        return cls(path, "FieldValueRequired", message)

    @classmethod
    def invalid(cls, path: str, value: Any, detail: str) -> FieldError:
        """A field whose value is not acceptable."""
        return cls(path, "FieldValueInvalid", f"Invalid value: {go_repr(value)}: {detail}")

    @classmethod
    def not_supported(cls, path: str, value: Any, supported: list[Any]) -> FieldError:
        """A field whose value is not one of an enumeration."""
        choices = ", ".join(go_repr(choice) for choice in supported)
        message = f"Unsupported value: {go_repr(value)}: supported values: {choices}"
        return cls(path, "FieldValueNotSupported", message)

    @classmethod
    def forbidden(cls, path: str, detail: str) -> FieldError:
        """A field that may not be set or changed."""
        return cls(path, "FieldValueForbidden", f"Forbidden: {detail}")

    @classmethod
    def duplicate(cls, path: str, value: Any) -> FieldError:
        """A repeated entry in a set or map list."""
        return cls(path, "FieldValueDuplicate", f"Duplicate value: {go_repr(value)}")

    @classmethod
    def too_long(cls, path: str, limit: int, unit: str = "bytes") -> FieldError:
        """A string or list over its maximum length."""
        return cls(path, "FieldValueTooLong", f"Too long: may not be more than {limit} {unit}")

    @classmethod
    def too_many(cls, path: str, count: int, limit: int) -> FieldError:
        """A list or map over its maximum number of items."""
        return cls(path, "FieldValueTooMany", f"Too many: {count}: must have at most {limit} items")

    def render(self) -> str:
        """The ``field: message`` text the API server joins into its message."""
        return f"{self.field}: {self.message}" if self.field else self.message


def go_repr(value: Any) -> str:
    """Render a JSON value roughly as Go's ``%#v``/``%q`` does in API error messages."""
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return repr(value)


@dataclass
class StatusError(Exception):
    """An API error that the server answers with a ``kind: Status`` body."""

    code: int
    reason: str
    message: str
    details: Obj = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def status(self) -> Obj:
        """The ``Status`` object for the response body or a watch ``ERROR`` event."""
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:
            del body["reason"]  # StatusReasonUnknown is omitted, as in the real body
        if self.details:
            body["details"] = self.details
        return body


def _details(kind: str, name: str, group: str) -> Obj:
    details: Obj = {"kind": kind}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(plural: str, name: str, group: str = "") -> StatusError:
    """``404 NotFound`` for a named object."""
    what = f"{plural}.{group}" if group else plural
    return StatusError(404, "NotFound", f'{what} "{name}" not found', _details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> StatusError:
    """``409 AlreadyExists`` for a create of an existing name."""
    what = f"{plural}.{group}" if group else plural
    return StatusError(
        409, "AlreadyExists", f'{what} "{name}" already exists', _details(plural, name, group)
    )


def conflict(plural: str, name: str, group: str = "", detail: str = "") -> StatusError:
    """``409 Conflict`` for a stale ``resourceVersion`` or a failed precondition."""
    what = f"{plural}.{group}" if group else plural
    detail = detail or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {detail}',
        _details(plural, name, group),
    )


def invalid(kind: str, group: str, name: str, errors: list[FieldError]) -> StatusError:
    """``422 Invalid`` naming every offending field, like the API server's aggregate."""
    qualified = f"{kind}.{group}" if group else kind
    rendered = [error.render() for error in errors]
    joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details = _details(kind, name, group)
    details["causes"] = [
        {"reason": error.reason, "message": error.message, "field": error.field} for error in errors
    ]
    return StatusError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> StatusError:
    """``400 BadRequest``."""
    return StatusError(400, "BadRequest", message)


def forbidden(message: str, *, kind: str = "", name: str = "", group: str = "") -> StatusError:
    """``403 Forbidden``."""
    return StatusError(403, "Forbidden", message, _details(kind, name, group) if kind else {})


def method_not_allowed(message: str) -> StatusError:
    """``405 MethodNotAllowed``."""
    return StatusError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> StatusError:
    """``415 UnsupportedMediaType`` for a patch or body type the resource does not take."""
    message = (
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}"
    )
    if content_type:
        message = f"{message} (got {content_type})"
    return StatusError(415, "UnsupportedMediaType", message)


def expired(requested: int, oldest: int) -> StatusError:
    """``410 Expired`` for a watch from a compacted ``resourceVersion``."""
    return StatusError(410, "Expired", f"too old resource version: {requested} ({oldest})")


def unprocessable_patch(message: str) -> StatusError:
    """``422`` for a JSON patch that cannot be applied (e.g. a failed ``test`` op)."""
    return StatusError(422, "Invalid", message)
