"""The registry's preferred version of a resource follows the versions served (it is kept,
not recomputed per request)."""

from __future__ import annotations

from kyai_devcluster._resources import Registry, ResourceType


def _crd_type(version: str) -> ResourceType:
    return ResourceType("kyai.io", version, "widgets", "Widget", True, custom=True)


def test_the_preferred_version_follows_versions_added_and_removed() -> None:
    registry = Registry(())
    assert registry.preferred("kyai.io", "widgets") is None
    registry.add(_crd_type("v1alpha1"))
    assert registry.preferred("kyai.io", "widgets") == _crd_type("v1alpha1")
    registry.add(_crd_type("v1beta1"))  # a later version is served: it is preferred now
    assert registry.preferred("kyai.io", "widgets") == _crd_type("v1beta1")
    registry.add(_crd_type("v1"))
    assert [t.version for t in registry.versions_of("kyai.io", "widgets")] == [
        "v1", "v1beta1", "v1alpha1",
    ]  # fmt: skip
    registry.versions_of(
        "kyai.io", "widgets"
    ).clear()  # a caller's copy: the registry keeps its own
    assert registry.preferred("kyai.io", "widgets") == _crd_type("v1")
    registry.remove_resource("kyai.io", "widgets")
    assert registry.preferred("kyai.io", "widgets") is None
    assert registry.versions_of("kyai.io", "widgets") == []
