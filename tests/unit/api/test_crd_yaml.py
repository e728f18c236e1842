"""The CRDs read the same in every YAML parser: no field name YAML 1.1 takes for a boolean.

PyYAML writes a property named ``n`` unquoted (``- n`` in a ``required`` list); Go's YAML
(kubectl, the API server) reads YAML 1.1 and takes it for ``false``: kubectl's openapi
download then fails on every ``kubectl apply`` of the cluster.
"""

from __future__ import annotations

from typing import Any

from kyai.api import custom_resource_definitions

#: What YAML 1.1 reads as a boolean (https://yaml.org/type/bool.html).
YAML11_BOOLEANS = {
    spelling
    for word in ("y", "yes", "n", "no", "true", "false", "on", "off")
    for spelling in (word, word.capitalize(), word.upper())
}


def names(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        found |= set(schema.get("properties") or {})
        found |= set(schema.get("required") or [])
        for value in schema.values():
            found |= names(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= names(value)
    return found


def test_no_crd_field_name_is_a_yaml_1_1_boolean() -> None:
    for definition in custom_resource_definitions():
        schema = definition["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        clashes = names(schema) & YAML11_BOOLEANS
        assert not clashes, (definition["metadata"]["name"], sorted(clashes))
    assert "n" in YAML11_BOOLEANS and names({"properties": {"n": {}}}) == {"n"}
