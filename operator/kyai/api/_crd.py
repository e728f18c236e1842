"""CustomResourceDefinitions generated from the pydantic models: the models are the source.

Pydantic's JSON schema is turned into a *structural* openAPIV3Schema as Kubernetes wants it:
``$ref`` inlined, ``Optional[X]`` reduced to ``X``, ``const`` to ``enum``, untyped values
marked ``x-kubernetes-preserve-unknown-fields``, titles dropped, descriptions kept.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from kyai.constants import CATEGORY, GROUP, KINDS, VERSION

#: JSON-schema keywords a structural schema may carry over as they are.
_KEPT = (
    "type",
    "description",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "maxProperties",
    "format",
    "nullable",
)


@dataclass(frozen=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def to_k8s(self) -> dict[str, Any]:
        """The CRD form."""
        column: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            column["priority"] = self.priority
        return column


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Inline a ``$ref`` (keeping the sibling keywords, which win)."""
    if "$ref" not in schema:
        return dict(schema)
    target = defs[schema["$ref"].rsplit("/", 1)[-1]]
    merged = {**_resolve(target, defs), **{k: v for k, v in schema.items() if k != "$ref"}}
    return merged


def structural(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural Kubernetes schema node."""
    node = _resolve(schema, defs)
    extensions = {k: v for k, v in node.items() if k.startswith("x-kubernetes-")}
    if "anyOf" in node:
        options = [_resolve(option, defs) for option in node["anyOf"]]
        concrete = [option for option in options if option.get("type") != "null"]
        outer = {k: v for k, v in node.items() if k not in ("anyOf", "title")}
        if len(concrete) == 1:
            inner = structural(concrete[0], defs)
            for key in ("description", "default"):
                if key in outer and outer[key] is not None:
                    inner[key] = copy.deepcopy(outer[key])
            if "description" in inner:
                inner["description"] = " ".join(str(inner["description"]).split())
            inner.update(extensions)
            return inner
        types = {option.get("type") for option in concrete}
        result: dict[str, Any] = (
            {"x-kubernetes-int-or-string": True}
            if types <= {"string", "integer"}
            else {"x-kubernetes-preserve-unknown-fields": True}
        )
        if "description" in outer:
            result["description"] = " ".join(str(outer["description"]).split())
        result.update(extensions)
        return result
    out: dict[str, Any] = {key: copy.deepcopy(node[key]) for key in _KEPT if key in node}
    _exclusive_bounds(out)
    if "description" in out:
        out["description"] = " ".join(str(out["description"]).split())
    if out.get("default", 0) is None:
        del out["default"]
    if "const" in node:
        out["enum"] = [node["const"]]
        out.setdefault("type", "string")
    kind = node.get("type")
    if kind == "object" or "properties" in node:
        out["type"] = "object"
        properties = node.get("properties", {})
        if properties:
            out["properties"] = {name: structural(sub, defs) for name, sub in properties.items()}
        required = node.get("required")
        if required:
            out["required"] = list(required)
        additional = node.get("additionalProperties")
        if isinstance(additional, Mapping):
            if additional.get("x-kubernetes-preserve-unknown-fields") and len(additional) == 1:
                out["additionalProperties"] = dict(additional)
            elif additional:
                out["additionalProperties"] = structural(additional, defs)
            else:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif additional is True and not properties:
            out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array":
        out["items"] = structural(node.get("items", {}), defs)
    elif kind is None and "enum" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    out.update(extensions)
    return out


def _exclusive_bounds(out: dict[str, Any]) -> None:
    """JSON Schema's ``exclusiveMinimum: 0`` as OpenAPI 3.0 (and Kubernetes) spells it.

    Pydantic writes draft 2020-12 (the bound itself); a CRD's schema wants ``minimum: 0``
    with ``exclusiveMinimum: true`` (kubectl cannot read a number there, and the API server
    refuses the CRD).
    """
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        value = out.get(exclusive)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[bound] = value
            out[exclusive] = True


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural schema of a pydantic model (cluster field names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def crd(
    kind: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    *,
    description: str,
    columns: list[PrinterColumn],
    spec_validations: list[dict[str, str]] | None = None,
    root_validations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A complete apiextensions.k8s.io/v1 CustomResourceDefinition."""
    plural, singular, short_names = KINDS[kind]
    spec_schema = model_schema(spec)
    if spec_validations:
        spec_schema["x-kubernetes-validations"] = copy.deepcopy(spec_validations)
    status_schema = model_schema(status)
    root: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "required": ["spec"],
    }
    if root_validations:
        root["x-kubernetes-validations"] = copy.deepcopy(root_validations)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kyai"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": [CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [column.to_k8s() for column in columns],
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }
