"""The store's owner index: what a controller controls, without a scan of every object."""

from __future__ import annotations

from typing import Any

from kyai_devcluster._store import Store


def _create(store: Store, group: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    rt = store.type_for(group, plural)
    return store.create(rt, body["metadata"].get("namespace"), body).obj


def _pod(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    refs = []
    if owner is not None:
        refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                 "uid": owner["metadata"]["uid"], "controller": True}]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": refs},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                       "restartPolicy": "Never"}}},
    }  # fmt: skip


def test_controlled_objects_are_found_by_their_controller_uid() -> None:
    store = Store()
    _create(store, "", "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": "ns"}})  # fmt: skip
    first, second = (
        _create(store, "batch", "jobs", _job("a")),
        _create(store, "batch", "jobs", _job("b")),
    )
    for name, owner in (("a-2", first), ("a-1", first), ("b-1", second), ("loose", None)):
        _create(store, "", "pods", _pod(name, owner))
    pods = store.type_for("", "pods")
    names = [p["metadata"]["name"] for p in store.controlled(pods, first["metadata"]["uid"])]
    assert names == ["a-1", "a-2"]  # sorted as a list is
    assert [p["metadata"]["name"] for p in store.controlled(pods, second["metadata"]["uid"])] == [
        "b-1"
    ]
    store.delete(pods, "ns", "a-1")
    names = [p["metadata"]["name"] for p in store.controlled(pods, first["metadata"]["uid"])]
    assert names == ["a-2"]
    # Same answer as the scan it replaces.
    scanned = [
        p["metadata"]["name"]
        for p in store.objects(pods, "ns")
        if any(r.get("uid") == first["metadata"]["uid"] and r.get("controller")
               for r in p["metadata"].get("ownerReferences") or [])
    ]  # fmt: skip
    assert scanned == names
    assert store.controlled(pods, "no-such-uid") == []


def _configmap(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": o["metadata"]["name"],
             "uid": o["metadata"]["uid"]} for o in owners]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": refs},
    }


def test_dependents_are_found_by_any_owner_uid_as_references_come_and_go() -> None:
    """The garbage collector's lookup: every ownerReference, controller or not, any resource."""
    store = Store()
    _create(store, "", "namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": "ns"}})  # fmt: skip
    first = _create(store, "batch", "jobs", _job("a"))
    second = _create(store, "batch", "jobs", _job("b"))
    first_uid, second_uid = first["metadata"]["uid"], second["metadata"]["uid"]
    _create(store, "", "pods", _pod("a-1", first))
    _create(store, "", "configmaps", _configmap("both", first, second))
    _create(store, "", "configmaps", _configmap("only-b", second))

    def names(uid: str) -> list[tuple[str, str]]:
        return [(gr[1], o["metadata"]["name"]) for gr, o in store.dependents(uid)]

    assert names(first_uid) == [("configmaps", "both"), ("pods", "a-1")]
    assert names(second_uid) == [("configmaps", "both"), ("configmaps", "only-b")]
    configmaps = store.type_for("", "configmaps")
    # A reference dropped by a patch: no longer a dependent of that owner, still of the other.
    keep = _configmap("x", second)["metadata"]["ownerReferences"]
    store.patch(configmaps, "ns", "both", "application/merge-patch+json",
                {"metadata": {"ownerReferences": keep}})  # fmt: skip
    assert names(first_uid) == [("pods", "a-1")]
    assert names(second_uid) == [("configmaps", "both"), ("configmaps", "only-b")]
    store.delete(configmaps, "ns", "only-b")
    assert names(second_uid) == [("configmaps", "both")]
    # Same answer as the scan it replaces, over every object of the store.
    scanned = sorted(
        (plural, o["metadata"]["name"])
        for (_, plural), bucket in store._objects.items()
        for o in bucket.values()
        if any(r.get("uid") == second_uid for r in o["metadata"].get("ownerReferences") or [])
    )
    assert scanned == names(second_uid)
    assert store.dependents("no-such-uid") == []
