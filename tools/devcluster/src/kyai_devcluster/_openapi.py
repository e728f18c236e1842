"""OpenAPI documents: enough of ``/openapi/v3`` for ``kubectl apply`` and ``kubectl explain``.

``kubectl`` (1.27+) decides between client-side and server-side validation by looking, in the
``/openapi/v3`` document of the object's group/version, for a PATCH operation tagged with the
object's ``x-kubernetes-group-version-kind`` that takes the ``fieldValidation`` parameter. When
it finds one it sends ``fieldValidation=Strict`` and leaves validation to the server, which
is what this server does for custom resources. The PATCH operations do not advertise
strategic merge patch, so ``kubectl apply`` builds its patches for the built-in kinds from
its compiled-in types (``/openapi/v2`` is not served) and uses merge patches for custom
resources, as with a real API server.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from kyai_devcluster._resources import Registry, ResourceType

Obj = dict[str, Any]

OBJECT_META_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
STATUS_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"

_OBJECT_META_SCHEMA: Obj = {
    "description": "ObjectMeta is metadata that all persisted resources must have.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}

_STATUS_SCHEMA: Obj = {
    "description": "Status is a return value for calls that don't return other objects.",
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "code": {"type": "integer"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "status": {"type": "string"},
        "details": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def api_path(group: str, version: str) -> str:
    """The discovery key of a group/version (``api/v1``, ``apis/<group>/<version>``)."""
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def schema_name(rt: ResourceType) -> str:
    """The component name of a kind, reversed-domain style (``io.kyai.v1alpha1.Snapshot``)."""
    if not rt.group:
        return f"io.k8s.api.core.{rt.version}.{rt.kind}"
    reversed_group = ".".join(reversed(rt.group.split(".")))
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def _gvk(rt: ResourceType) -> Obj:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _parameter(name: str, location: str = "query", description: str = "") -> Obj:
    parameter: Obj = {
        "name": name,
        "in": location,
        "description": description or name,
        "schema": {"type": "string", "uniqueItems": True},
    }
    if location == "path":
        parameter["required"] = True
    return parameter


def _response(ref: str) -> Obj:
    return {
        "200": {
            "description": "OK",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
        },
        "201": {
            "description": "Created",
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}},
        },
    }


def _write_parameters() -> list[Obj]:
    return [
        _parameter("dryRun", description="When present, modifications are not persisted."),
        _parameter("fieldManager", description="The name of the actor making the change."),
        _parameter(
            "fieldValidation",
            description="Ignore, Warn (default) or Strict handling of unknown fields.",
        ),
    ]


def _operation(rt: ResourceType, action: str, ref: str, *, body: list[str] | None = None) -> Obj:
    operation: Obj = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "responses": _response(ref),
    }
    if body is not None:
        operation["requestBody"] = {
            "content": {
                media: {"schema": {"$ref": f"#/components/schemas/{ref}"}} for media in body
            }
        }
    if action in {"post", "put", "patch"}:
        operation["parameters"] = _write_parameters()
        if action == "patch":
            operation["parameters"].append(_parameter("force"))
    return operation


def _kind_schema(rt: ResourceType) -> Obj:
    if rt.schema is not None:
        schema = copy.deepcopy(rt.schema)
    else:
        schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema.setdefault("description", f"{rt.kind} ({rt.api_version}).")
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string", "description": "APIVersion of the object."}
    properties["kind"] = {"type": "string", "description": "Kind of the object."}
    properties["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META_REF}"}],
        "description": "Standard object's metadata.",
    }
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def group_version_document(types: list[ResourceType]) -> Obj:
    """The OpenAPI v3 document of one group/version."""
    paths: Obj = {}
    schemas: Obj = {OBJECT_META_REF: _OBJECT_META_SCHEMA, STATUS_REF: _STATUS_SCHEMA}
    patch_types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ]
    for rt in types:
        ref = schema_name(rt)
        schemas[ref] = _kind_schema(rt)
        prefix = "/" + api_path(rt.group, rt.version)
        if rt.namespaced:
            prefix += "/namespaces/{namespace}"
        collection = f"{prefix}/{rt.plural}"
        item = f"{collection}/{{name}}"
        scope_params = [_parameter("namespace", "path")] if rt.namespaced else []
        if rt.verbs == ("create",):  # a review: POST only
            paths[collection] = {
                "post": _operation(rt, "post", ref, body=["*/*"]),
                "parameters": scope_params,
            }
            # kubectl's probe for server-side validation looks for a PATCH taking
            # fieldValidation; without one it falls back to /openapi/v2 in protobuf (which
            # this server does not serve) and `kubectl create -f` fails. Listed, never served.
            paths[item] = {
                "patch": _operation(rt, "patch", ref, body=patch_types),
                "parameters": [*scope_params, _parameter("name", "path")],
            }
            continue
        paths[collection] = {
            "get": _operation(rt, "list", ref),
            "post": _operation(rt, "post", ref, body=["*/*"]),
            "delete": _operation(rt, "deletecollection", STATUS_REF),
            "parameters": scope_params,
        }
        paths[item] = {
            "get": _operation(rt, "get", ref),
            "put": _operation(rt, "put", ref, body=["*/*"]),
            "patch": _operation(rt, "patch", ref, body=patch_types),
            "delete": _operation(rt, "delete", STATUS_REF),
            "parameters": [*scope_params, _parameter("name", "path")],
        }
        if "status" in rt.subresources:
            paths[f"{item}/status"] = {
                "get": _operation(rt, "get", ref),
                "put": _operation(rt, "put", ref, body=["*/*"]),
                "patch": _operation(rt, "patch", ref, body=patch_types),
                "parameters": [*scope_params, _parameter("name", "path")],
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (kyai devcluster)", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _digest(document: Obj) -> str:
    encoded = json.dumps(document, sort_keys=True).encode()
    return hashlib.sha512(encoded).hexdigest().upper()


def documents(registry: Registry) -> dict[str, Obj]:
    """Every group/version's document, by discovery key."""
    found: dict[str, Obj] = {}
    for group, versions in registry.groups().items():
        for version in versions:
            types = registry.resources(group, version)
            if types:
                found[api_path(group, version)] = group_version_document(types)
    return found


def discovery(registry: Registry) -> Obj:
    """``GET /openapi/v3``: the paths of the group/version documents, with content hashes."""
    paths = {
        key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={_digest(document)}"}
        for key, document in sorted(documents(registry).items())
    }
    return {"paths": paths}


def swagger_v2(registry: Registry) -> Obj:
    """A small Swagger 2.0 document (JSON only) listing the kinds' definitions."""
    definitions: Obj = {OBJECT_META_REF: _OBJECT_META_SCHEMA}
    for rt in registry.all():
        schema = _kind_schema(rt)
        schema["properties"]["metadata"] = {"$ref": f"#/definitions/{OBJECT_META_REF}"}
        definitions[schema_name(rt)] = schema
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes (kyai devcluster)", "version": "v1.32.0"},
        "paths": {},
        "definitions": definitions,
    }
