"""Every annotation key the operator (and kopf on its behalf) writes is one the API server takes.

kopf derives the key of a handler's progress record from the handler's id; without an
explicit ``id`` a handler defined inside a function gets ``outer.<locals>.name``, which kopf
makes ``outer._locals_.name``: a key starting with ``_`` that a real API server refuses with
a 422 (``name part must consist of alphanumeric characters...``). kopf then throttles the
object instead of retrying it. The checks below use the API server's own rule
(``IsQualifiedName``), once as written here from apimachinery and once as the devcluster
enforces it.
"""

from __future__ import annotations

import re
from typing import Any

import kopf
import pytest

from kyai import constants
from kyai.controllers import handlers
from kyai.settings import OperatorSettings
from kyai_devcluster._limits import qualified_name

#: apimachinery's validation.IsQualifiedName: an optional DNS-1123 subdomain prefix and '/',
#: then a name part of at most 63 characters.
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_qualified_name(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and len(prefix) <= 253 and _SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def all_handlers(registry: kopf.OperatorRegistry) -> list[Any]:
    found: list[Any] = []
    for part in (
        registry._activities,
        registry._indexing,
        registry._watching,
        registry._spawning,
        registry._changing,
    ):
        found.extend(part.get_all_handlers())
    return found


@pytest.fixture(scope="module")
def registry() -> kopf.OperatorRegistry:
    return handlers.build_registry(OperatorSettings.from_env({}))


def test_the_rule_refuses_the_key_kopf_made_of_a_nested_handler_without_an_id() -> None:
    # What the operator wrote before every handler had an id (a real API server's 422).
    storage = kopf.AnnotationsProgressStorage(prefix=constants.KOPF_PREFIX)
    body = kopf.Body({"kind": "Snapshot", "metadata": {"name": "s"}})
    keys = list(storage.make_keys("_register_snapshots.<locals>.snapshot", body=body))
    assert keys and not any(is_qualified_name(key) for key in keys)
    assert all(qualified_name(key) for key in keys)  # the devcluster refuses them too


def test_every_handler_has_an_explicit_id(registry: kopf.OperatorRegistry) -> None:
    found = all_handlers(registry)
    assert len(found) >= 15
    for handler in found:
        assert "<locals>" not in handler.id and "." not in handler.id, handler.id
        assert re.fullmatch(r"[a-z][a-z0-9-]*[a-z0-9]", handler.id), handler.id


def test_every_progress_annotation_key_is_a_valid_qualified_name(
    registry: kopf.OperatorRegistry,
) -> None:
    storage = kopf.AnnotationsProgressStorage(prefix=constants.KOPF_PREFIX)
    for handler in all_handlers(registry):
        for kind in ("Snapshot", "Workload", "EngineArgsSet"):
            body = kopf.Body({"kind": kind, "metadata": {"name": "x", "annotations": {}}})
            patch = kopf.Patch()
            storage.store(
                key=handler.id,
                record={"started": "2026-01-01T00:00:00", "retries": 1, "success": False},
                body=body,
                patch=patch,
            )
            keys = list((patch.get("metadata") or {}).get("annotations") or {})
            assert keys, handler.id
            for key in keys:
                assert is_qualified_name(key), key
                assert qualified_name(key) == [], key


def test_the_operators_own_annotation_keys_are_valid_qualified_names() -> None:
    keys = [
        value
        for name, value in vars(constants).items()
        if name.startswith(("ANNOTATION_", "LABEL_", "FINALIZER", "IN_USE_FINALIZER"))
        and isinstance(value, str)
    ]
    keys.append(f"{constants.KOPF_PREFIX}/last-handled-configuration")
    assert len(keys) >= 5
    for key in keys:
        assert is_qualified_name(key), key
