"""``meta.k8s.io/v1`` Table responses, as ``kubectl get`` asks for them.

Custom resources use their CRD's ``additionalPrinterColumns``; the built-in kinds get the
columns ``kubectl`` users expect; anything else gets Name and Age.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kyai._clock import parse_time
from kyai_devcluster._resources import ResourceType

Obj = dict[str, Any]

_NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically."
)
_AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration`` (``5s``, ``3m20s``, ``4h``, ``2d3h``, ...)."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(value: Any) -> str:
    """The age of a timestamp, as ``kubectl`` shows it (``<unknown>`` when absent)."""
    parsed = parse_time(value)
    if parsed is None:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - parsed).total_seconds())


# -- JSONPath subset -------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_$@-]+)"""
    r"""|\[(?P<index>-?\d+|\*)\]"""
    r"""|\[['"](?P<quoted>[^'"]+)['"]\]"""
    r"""|\[\?\(@\.(?P<filter_path>[A-Za-z0-9_.-]+)\s*(?P<op>==|!=)\s*(?P<filter_value>"[^"]*"|'[^']*'|[^)\s]+)\s*\)\]"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Evaluate the JSONPath subset used by printer columns.

    Supports ``.field``, ``['field.with.dots']``, ``[n]``, ``[*]`` and
    ``[?(@.field=="value")]``; braces around the expression are optional.
    """
    expression = path.strip()
    if expression.startswith("{") and expression.endswith("}"):
        expression = expression[1:-1]
    expression = expression.removeprefix("$")
    if expression and not expression.startswith((".", "[")):
        expression = "." + expression
    current: list[Any] = [obj]
    position = 0
    while position < len(expression):
        match = _TOKEN_RE.match(expression, position)
        if match is None:
            return []
        position = match.end()
        current = _step(current, match)
    return current


def _step(values: list[Any], match: re.Match[str]) -> list[Any]:
    result: list[Any] = []
    name = match.group("field") or match.group("quoted")
    for value in values:
        if name is not None:
            if isinstance(value, dict) and name in value:
                result.append(value[name])
        elif match.group("index") is not None:
            if not isinstance(value, list):
                continue
            if match.group("index") == "*":
                result.extend(value)
            else:
                index = int(match.group("index"))
                if -len(value) <= index < len(value):
                    result.append(value[index])
        elif match.group("filter_path") is not None and isinstance(value, list):
            wanted = match.group("filter_value").strip("\"'")
            equal = match.group("op") == "=="
            for item in value:
                found = jsonpath(item, "." + match.group("filter_path"))
                actual = _text(found[0]) if found else None
                if (actual == wanted) == equal:
                    result.append(item)
    return result


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- columns ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One printed column."""

    name: str
    type: str
    cell: Callable[[Obj], Any]
    priority: int = 0
    format: str = ""
    description: str = ""

    def definition(self) -> Obj:
        """The ``columnDefinitions`` entry."""
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description or self.name,
            "priority": self.priority,
        }


def _get(obj: Obj, *path: str, default: Any = None) -> Any:
    current: Any = obj
    for part in path:
        if not isinstance(current, dict) or part not in current:
            return default
        current = current[part]
    return current


def _name(obj: Obj) -> str:
    return str(_get(obj, "metadata", "name", default=""))


def _age(obj: Obj) -> str:
    return age(_get(obj, "metadata", "creationTimestamp"))


NAME = Column("Name", "string", _name, format="name", description=_NAME_DESCRIPTION)
AGE = Column("Age", "string", _age, description=_AGE_DESCRIPTION)


def _pod_ready(obj: Obj) -> str:
    containers = _get(obj, "spec", "containers", default=[]) or []
    statuses = _get(obj, "status", "containerStatuses", default=[]) or []
    ready = sum(1 for status in statuses if status.get("ready"))
    return f"{ready}/{len(containers)}"


def _pod_status(obj: Obj) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    reason = _get(obj, "status", "reason")
    if reason:
        return str(reason)
    for status in _get(obj, "status", "containerStatuses", default=[]) or []:
        state = status.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            return str(state["waiting"]["reason"])
        if "terminated" in state and _get(obj, "status", "phase") not in ("Succeeded",):
            return str(state["terminated"].get("reason") or "Error")
    phase = _get(obj, "status", "phase", default="Unknown")
    return "Completed" if phase == "Succeeded" else str(phase)


def _restarts(obj: Obj) -> int:
    statuses = _get(obj, "status", "containerStatuses", default=[]) or []
    return sum(int(status.get("restartCount", 0)) for status in statuses)


def _job_status(obj: Obj) -> str:
    for condition in _get(obj, "status", "conditions", default=[]) or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Complete"
        if condition.get("type") == "Failed":
            return "Failed"
    if _get(obj, "spec", "suspend"):
        return "Suspended"
    return "Running"


def _job_duration(obj: Obj) -> str:
    start = parse_time(_get(obj, "status", "startTime"))
    if start is None:
        return ""
    end = parse_time(_get(obj, "status", "completionTime")) or datetime.now(UTC)
    return human_duration((end - start).total_seconds())


def _ports(obj: Obj) -> str:
    ports = _get(obj, "spec", "ports", default=[]) or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _none(value: Any) -> Any:
    return "<none>" if value in (None, "", []) else value


def _event_object(obj: Obj) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


_BUILTIN_COLUMNS: dict[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        NAME,
        Column("Ready", "string", _pod_ready),
        Column("Status", "string", _pod_status),
        Column("Restarts", "string", lambda o: str(_restarts(o))),
        AGE,
        Column("IP", "string", lambda o: _none(_get(o, "status", "podIP")), priority=1),
        Column("Node", "string", lambda o: _none(_get(o, "spec", "nodeName")), priority=1),
    ],
    ("apps", "deployments"): [
        NAME,
        Column(
            "Ready",
            "string",
            lambda o: (
                f"{_get(o, 'status', 'readyReplicas', default=0)}/"
                f"{_get(o, 'spec', 'replicas', default=1)}"
            ),
        ),
        Column("Up-to-date", "integer", lambda o: _get(o, "status", "updatedReplicas", default=0)),
        Column("Available", "integer", lambda o: _get(o, "status", "availableReplicas", default=0)),
        AGE,
    ],
    ("apps", "replicasets"): [
        NAME,
        Column("Desired", "integer", lambda o: _get(o, "spec", "replicas", default=1)),
        Column("Current", "integer", lambda o: _get(o, "status", "replicas", default=0)),
        Column("Ready", "integer", lambda o: _get(o, "status", "readyReplicas", default=0)),
        AGE,
    ],
    ("batch", "jobs"): [
        NAME,
        Column("Status", "string", _job_status),
        Column(
            "Completions",
            "string",
            lambda o: (
                f"{_get(o, 'status', 'succeeded', default=0)}/"
                f"{_get(o, 'spec', 'completions', default=1)}"
            ),
        ),
        Column("Duration", "string", _job_duration),
        AGE,
    ],
    ("", "configmaps"): [
        NAME,
        Column(
            "Data",
            "integer",
            lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}),
        ),
        AGE,
    ],
    ("", "secrets"): [
        NAME,
        Column("Type", "string", lambda o: o.get("type", "Opaque")),
        Column("Data", "integer", lambda o: len(o.get("data") or {})),
        AGE,
    ],
    ("", "namespaces"): [
        NAME,
        Column("Status", "string", lambda o: _get(o, "status", "phase", default="Active")),
        AGE,
    ],
    ("", "nodes"): [
        NAME,
        Column("Status", "string", lambda o: "Ready"),
        Column("Roles", "string", lambda o: "control-plane"),
        AGE,
        Column("Version", "string", lambda o: _get(o, "status", "nodeInfo", "kubeletVersion")),
    ],
    ("", "services"): [
        NAME,
        Column("Type", "string", lambda o: _get(o, "spec", "type", default="ClusterIP")),
        Column("Cluster-IP", "string", lambda o: _none(_get(o, "spec", "clusterIP"))),
        Column("External-IP", "string", lambda o: "<none>"),
        Column("Port(s)", "string", _ports),
        AGE,
    ],
    ("", "persistentvolumeclaims"): [
        NAME,
        Column("Status", "string", lambda o: _get(o, "status", "phase", default="Pending")),
        Column("Volume", "string", lambda o: _get(o, "spec", "volumeName", default="")),
        Column(
            "Capacity", "string", lambda o: _get(o, "status", "capacity", "storage", default="")
        ),
        Column(
            "Access Modes",
            "string",
            lambda o: ",".join(
                {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX"}.get(m, m)
                for m in _get(o, "status", "accessModes", default=[]) or []
            ),
        ),
        Column("StorageClass", "string", lambda o: _get(o, "spec", "storageClassName", default="")),
        AGE,
    ],
    ("", "events"): [
        Column(
            "Last Seen",
            "string",
            lambda o: age(
                o.get("lastTimestamp")
                or o.get("eventTime")
                or _get(o, "metadata", "creationTimestamp")
            ),
        ),
        Column("Type", "string", lambda o: o.get("type", "")),
        Column("Reason", "string", lambda o: o.get("reason", "")),
        Column("Object", "string", _event_object),
        Column("Message", "string", lambda o: o.get("message", "")),
    ],
    ("", "serviceaccounts"): [
        NAME,
        Column("Secrets", "integer", lambda o: len(o.get("secrets") or [])),
        AGE,
    ],
    ("coordination.k8s.io", "leases"): [
        NAME,
        Column("Holder", "string", lambda o: _get(o, "spec", "holderIdentity", default="")),
        AGE,
    ],
    ("apiextensions.k8s.io", "customresourcedefinitions"): [
        NAME,
        Column(
            "Created At",
            "date",
            lambda o: _get(o, "metadata", "creationTimestamp"),
            description=_AGE_DESCRIPTION,
        ),
    ],
}


def _printer_cell(column: Obj) -> Callable[[Obj], Any]:
    path = str(column.get("jsonPath", ""))
    kind = str(column.get("type", "string"))

    def cell(obj: Obj) -> Any:
        found = jsonpath(obj, path)
        if not found:
            return None
        value = found[0]
        if kind == "date":
            return age(value) if parse_time(value) else value
        if kind == "integer":
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if kind == "number":
            return value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if kind == "boolean":
            return value if isinstance(value, bool) else None
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        return _text(value)

    return cell


def columns_for(rt: ResourceType) -> list[Column]:
    """The columns of a resource type's table."""
    if rt.custom:
        if not rt.printer_columns:
            return [NAME, AGE]
        columns = [NAME]
        for column in rt.printer_columns:
            columns.append(
                Column(
                    str(column.get("name", "")),
                    "string" if column.get("type") == "date" else str(column.get("type", "string")),
                    _printer_cell(column),
                    priority=int(column.get("priority", 0)),
                    format=str(column.get("format", "")),
                    description=str(column.get("description", "")),
                )
            )
        if not any(str(c.get("name", "")).lower() == "age" for c in rt.printer_columns):
            columns.append(AGE)
        return columns
    return _BUILTIN_COLUMNS.get(rt.group_resource, [NAME, AGE])


def partial_metadata(obj: Obj, api_version: str = "meta.k8s.io/v1") -> Obj:
    """A ``PartialObjectMetadata`` view of an object."""
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": api_version,
        "metadata": obj.get("metadata") or {},
    }


def table(
    rt: ResourceType,
    objects: list[Obj],
    *,
    api_version: str,
    include_object: str = "Metadata",
    resource_version: str = "",
    continue_token: str = "",
) -> Obj:
    """A Table of ``objects`` with the type's columns and one row each."""
    columns = columns_for(rt)
    rows = []
    for obj in objects:
        row: Obj = {"cells": [column.cell(obj) for column in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = partial_metadata(obj, api_version)
        rows.append(row)
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": [column.definition() for column in columns],
        "rows": rows,
    }
