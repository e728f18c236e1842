"""The store's key order: LISTs read a namespace's range and pages without sorting a bucket."""

from __future__ import annotations

import random
from typing import Any

from kyai_devcluster._selectors import parse_field_selector, parse_label_selector
from kyai_devcluster._store import Store


def _namespace(store: Store, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    store.create(store.type_for("", "namespaces"), None, body)


def _configmap(store: Store, namespace: str, name: str, **labels: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }
    return store.create(store.type_for("", "configmaps"), namespace, body).obj


def _pages(store: Store, namespace: str | None, selector: str, limit: int) -> list[list[str]]:
    rt = store.type_for("", "configmaps")
    pages, token = [], ""
    while True:
        items, _, token = store.list_page(
            rt, namespace, labels=parse_label_selector(selector),
            fields=parse_field_selector(None, supported=lambda _: True),
            limit=limit, continue_token=token or None,
        )  # fmt: skip
        pages.append([f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items])
        if not token:
            return pages


def test_pages_follow_namespace_and_name_order_with_selectors_and_deletions() -> None:
    store = Store()
    for namespace in ("b", "a", "b-2"):
        _namespace(store, namespace)
    names = [f"cm-{n:02d}" for n in range(12)]
    random.Random(7).shuffle(names)  # created out of order
    for index, name in enumerate(names):
        for namespace in ("b-2", "a", "b"):
            _configmap(store, namespace, name, even=str(int(name[-2:]) % 2 == 0).lower())
        if index == 5:
            store.delete(store.type_for("", "configmaps"), "a", names[0])
    expected_a = sorted(n for n in names if n != names[0])
    assert [p for page in _pages(store, "a", "", 4) for p in page] == [f"a/{n}" for n in expected_a]
    # "b" is not a prefix range: b-2's objects stay out of b's list.
    assert _pages(store, "b", "even=true", 2) == [
        ["b/cm-00", "b/cm-02"], ["b/cm-04", "b/cm-06"], ["b/cm-08", "b/cm-10"],
    ]  # fmt: skip
    everything = [p for page in _pages(store, None, "even=false", 5) for p in page]
    by_key = sorted(everything, key=lambda path: tuple(path.split("/")))  # (namespace, name)
    assert everything == by_key and len(everything) == 6 * 3 - (1 if int(names[0][-2:]) % 2 else 0)
    rt = store.type_for("", "configmaps")
    listed = store.objects(rt, "b-2", fields=parse_field_selector("metadata.name=cm-03"))
    assert [o["metadata"]["name"] for o in listed] == ["cm-03"]
