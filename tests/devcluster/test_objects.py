"""Object semantics: create, get, list with selectors, replace, patch, delete, cascades."""

from __future__ import annotations

import re

from devcluster.helpers import Api, widget

CM = "/api/v1/namespaces/default/configmaps"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


async def test_create_sets_server_fields_and_rejects_duplicates(api: Api) -> None:
    status, created = await api.post(
        CM, {"apiVersion": "v1", "kind": "ConfigMap", **configmap("one", a="1")}
    )
    assert status == 201
    metadata = created["metadata"]
    assert re.fullmatch(r"[0-9a-f-]{36}", metadata["uid"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", metadata["creationTimestamp"])
    assert metadata["resourceVersion"].isdigit()
    assert metadata["namespace"] == "default"
    assert created["kind"] == "ConfigMap" and created["apiVersion"] == "v1"

    status, duplicate = await api.post(CM, configmap("one"))
    assert status == 409
    assert duplicate["reason"] == "AlreadyExists"
    assert duplicate["details"] == {"name": "one", "kind": "configmaps"}

    status, generated = await api.post(CM, {"metadata": {"generateName": "gen-"}})
    assert status == 201
    assert re.fullmatch(r"gen-[a-z0-9]{5}", generated["metadata"]["name"])

    await api.create_crd()
    status, custom = await api.post(WIDGETS, widget("w1"))
    assert status == 201 and custom["metadata"]["generation"] == 1
    second = await api.ok("POST", CM, configmap("two"))
    assert int(second["metadata"]["resourceVersion"]) > int(metadata["resourceVersion"])


async def test_create_errors(api: Api) -> None:
    status, body = await api.post("/api/v1/namespaces/nowhere/configmaps", configmap("x"))
    assert status == 404 and body["message"] == 'namespaces "nowhere" not found'
    status, body = await api.post(CM, {"metadata": {}})
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
    status, body = await api.post(CM, configmap("Not_Valid"))
    assert status == 422 and "RFC 1123" in body["message"]
    status, body = await api.post(
        CM, {"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    )
    assert status == 400 and body["reason"] == "BadRequest"
    status, body = await api.post(CM, {"metadata": {"name": "x", "namespace": "other"}})
    assert status == 400 and "namespace" in body["message"]


async def test_get_and_list_with_label_selectors(api: Api) -> None:
    await api.ok("POST", CM, configmap("a", {"app": "web", "tier": "front"}))
    await api.ok("POST", CM, configmap("b", {"app": "web", "tier": "back"}))
    await api.ok("POST", CM, configmap("c", {"app": "db"}))
    await api.ok("POST", CM, configmap("d"))
    got = await api.ok("GET", f"{CM}/a")
    assert got["metadata"]["labels"] == {"app": "web", "tier": "front"}

    async def names(selector: str) -> list[str]:
        listing = await api.ok("GET", CM, params={"labelSelector": selector})
        assert listing["kind"] == "ConfigMapList" and listing["apiVersion"] == "v1"
        assert listing["metadata"]["resourceVersion"].isdigit()
        return [item["metadata"]["name"] for item in listing["items"]]

    assert await names("app=web") == ["a", "b"]
    assert await names("app==web,tier=back") == ["b"]
    assert await names("app!=web") == ["c", "d"]
    assert await names("app in (db, other)") == ["c"]
    assert await names("app notin (web)") == ["c", "d"]
    assert await names("tier") == ["a", "b"]
    assert await names("!tier") == ["c", "d"]
    assert await names("app=web,!tier") == []

    status, body = await api.get(CM, params={"labelSelector": "app in web"})
    assert status == 400 and body["reason"] == "BadRequest"


async def test_field_selectors_and_cross_namespace_list(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "other"}})
    await api.ok("POST", CM, configmap("same"))
    await api.ok("POST", "/api/v1/namespaces/other/configmaps", configmap("same"))
    await api.ok("POST", CM, configmap("different"))

    listing = await api.ok(
        "GET", "/api/v1/configmaps", params={"fieldSelector": "metadata.name=same"}
    )
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listing["items"]] == [
        ("default", "same"),
        ("other", "same"),
    ]
    listing = await api.ok(
        "GET", "/api/v1/configmaps", params={"fieldSelector": "metadata.namespace=other"}
    )
    assert [i["metadata"]["name"] for i in listing["items"]] == ["same"]
    listing = await api.ok("GET", CM, params={"fieldSelector": "metadata.name!=same"})
    assert [i["metadata"]["name"] for i in listing["items"]] == ["different"]
    status, body = await api.get(CM, params={"fieldSelector": "data.x=1"})
    assert status == 400 and "field label not supported" in body["message"]


async def test_list_pagination(api: Api) -> None:
    for index in range(5):
        await api.ok("POST", CM, configmap(f"page-{index}"))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        params = {"limit": "2", **({"continue": token} if token else {})}
        page = await api.ok("GET", CM, params=params)
        pages += 1
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert pages == 3
    assert seen == [f"page-{index}" for index in range(5)]


async def test_replace_uses_optimistic_concurrency(api: Api) -> None:
    created = await api.ok("POST", CM, configmap("cm", a="1"))
    fresh = dict(created, data={"a": "2"})
    replaced = await api.ok("PUT", f"{CM}/cm", fresh)
    assert replaced["data"] == {"a": "2"}
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(replaced["metadata"]["resourceVersion"]) > int(
        created["metadata"]["resourceVersion"]
    )

    stale = dict(created, data={"a": "3"})
    status, body = await api.put(f"{CM}/cm", stale)
    assert status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]

    status, _ = await api.put(f"{CM}/missing", configmap("missing"))
    assert status == 404
    status, body = await api.put(f"{CM}/cm", configmap("other"))
    assert status == 400 and "does not match the name on the URL" in body["message"]

    await api.create_crd()
    await api.ok("POST", WIDGETS, widget("w"))
    status, body = await api.put(f"{WIDGETS}/w", widget("w", size=4))
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


async def test_unchanged_write_keeps_resource_version(api: Api) -> None:
    created = await api.ok("POST", CM, configmap("cm", a="1"))
    same = await api.ok(
        "PATCH", f"{CM}/cm", {"data": {"a": "1"}}, content_type="application/merge-patch+json"
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_merge_and_json_patches(api: Api) -> None:
    await api.ok("POST", CM, configmap("cm", a="1", b="2"))
    status, merged = await api.patch(f"{CM}/cm", {"data": {"a": "10", "b": None, "c": "3"}})
    assert status == 200 and merged["data"] == {"a": "10", "c": "3"}

    rv = merged["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/data/d", "value": "4"},
        {"op": "remove", "path": "/data/a"},
    ]
    status, patched = await api.patch(f"{CM}/cm", ops, "json")
    assert status == 200 and patched["data"] == {"c": "3", "d": "4"}

    status, failed = await api.patch(f"{CM}/cm", ops, "json")
    assert status == 422, failed
    assert failed["kind"] == "Status" and failed["code"] == 422
    unchanged = await api.ok("GET", f"{CM}/cm")
    assert unchanged["data"] == {"c": "3", "d": "4"}

    status, _ = await api.patch(f"{CM}/cm", [{"op": "remove", "path": "/data/nope"}], "json")
    assert status == 422
    status, _ = await api.patch(f"{CM}/cm", {"not": "a list"}, "json")
    assert status == 400
    status, conflict = await api.patch(f"{CM}/cm", {"metadata": {"resourceVersion": "1"}})
    assert status == 409 and conflict["reason"] == "Conflict"
    status, _ = await api.patch(f"{CM}/missing", {"data": {}})
    assert status == 404


async def test_strategic_merge_patch_merges_lists_by_key(api: Api) -> None:
    deployment = {
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:1",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "ports": [{"containerPort": 80}],
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }
    path = "/apis/apps/v1/namespaces/default/deployments"
    await api.ok("POST", path, deployment)
    patch = {
        "metadata": {"finalizers": ["example.com/keep"]},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:2",
                            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                        },
                        {"name": "sidecar", "$patch": "delete"},
                    ],
                    "volumes": [{"name": "cache", "emptyDir": {}}],
                }
            }
        },
    }
    status, patched = await api.patch(f"{path}/web", patch, "strategic")
    assert status == 200, patched
    spec = patched["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["web"]
    web = spec["containers"][0]
    assert web["image"] == "nginx:2"
    assert web["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]
    assert web["ports"][0]["containerPort"] == 80
    assert [v["name"] for v in spec["volumes"]] == ["data", "cache"]
    assert patched["metadata"]["finalizers"] == ["example.com/keep"]
    assert patched["metadata"]["generation"] == 2

    await api.create_crd()
    await api.ok("POST", WIDGETS, widget("w"))
    status, body = await api.patch(f"{WIDGETS}/w", {"spec": {"size": 2}}, "strategic")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_finalizers_defer_deletion(api: Api) -> None:
    await api.create_crd()
    body = widget("w")
    body["metadata"]["finalizers"] = ["example.com/a", "example.com/b"]
    await api.ok("POST", WIDGETS, body)

    status, deleting = await api.delete(f"{WIDGETS}/w")
    assert status == 200
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["finalizers"] == ["example.com/a", "example.com/b"]
    assert (await api.get(f"{WIDGETS}/w"))[0] == 200

    status, body = await api.patch(
        f"{WIDGETS}/w", {"metadata": {"finalizers": ["example.com/a", "example.com/b", "new"]}}
    )
    assert status == 422 and "no new finalizers" in body["message"]

    await api.ok(
        "PATCH",
        f"{WIDGETS}/w",
        {"metadata": {"finalizers": ["example.com/b"]}},
        content_type="application/merge-patch+json",
    )
    assert (await api.get(f"{WIDGETS}/w"))[0] == 200
    current = await api.ok("GET", f"{WIDGETS}/w")
    ops = [
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": current["metadata"]["resourceVersion"],
        },
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    status, _ = await api.patch(f"{WIDGETS}/w", ops, "json")
    assert status == 200
    status, gone = await api.get(f"{WIDGETS}/w")
    assert status == 404 and gone["message"] == 'widgets.example.com "w" not found'


async def test_delete_returns_status_and_honours_preconditions(api: Api) -> None:
    created = await api.ok("POST", CM, configmap("cm"))
    status, body = await api.delete(f"{CM}/cm", {"preconditions": {"uid": "wrong"}})
    assert status == 409
    status, body = await api.delete(f"{CM}/cm", params={"dryRun": "All"})
    assert status == 200 and (await api.get(f"{CM}/cm"))[0] == 200
    status, body = await api.delete(
        f"{CM}/cm", {"preconditions": {"uid": created["metadata"]["uid"]}}
    )
    assert status == 200
    assert body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "cm"
    status, body = await api.delete(f"{CM}/cm")
    assert status == 404 and body["reason"] == "NotFound"


async def _owner_and_children(api: Api) -> tuple[dict[str, object], list[str]]:
    owner = await api.ok("POST", CM, configmap("owner"))
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    names = []
    for index in range(2):
        child = configmap(f"child-{index}")
        child["metadata"]["ownerReferences"] = [ref]  # type: ignore[index]
        names.append((await api.ok("POST", CM, child))["metadata"]["name"])
    return owner, names


async def test_owner_reference_background_cascade(api: Api) -> None:
    _, children = await _owner_and_children(api)
    await api.ok("DELETE", f"{CM}/owner", {"propagationPolicy": "Background"})
    assert (await api.get(f"{CM}/owner"))[0] == 404
    for name in children:
        await api.wait_for(
            CM, lambda listing, n=name: n not in [i["metadata"]["name"] for i in listing["items"]]
        )


async def test_owner_reference_foreground_cascade(api: Api) -> None:
    _, children = await _owner_and_children(api)
    blocker = configmap("child-blocker")
    owner = await api.ok("GET", f"{CM}/owner")
    blocker["metadata"]["ownerReferences"] = [  # type: ignore[index]
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    blocker["metadata"]["finalizers"] = ["example.com/hold"]  # type: ignore[index]
    await api.ok("POST", CM, blocker)

    status, deleting = await api.delete(f"{CM}/owner", {"propagationPolicy": "Foreground"})
    assert status == 200 and "foregroundDeletion" in deleting["metadata"]["finalizers"]
    for name in children:
        await api.wait_for(
            CM, lambda listing, n=name: n not in [i["metadata"]["name"] for i in listing["items"]]
        )
    # The owner waits for its last dependent, which waits for its own finalizer.
    still = await api.ok("GET", f"{CM}/owner")
    assert still["metadata"]["deletionTimestamp"]
    await api.ok(
        "PATCH",
        f"{CM}/child-blocker",
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    await api.wait_for(CM, lambda listing: not listing["items"])


async def test_owner_reference_orphan(api: Api) -> None:
    _, children = await _owner_and_children(api)
    await api.ok("DELETE", f"{CM}/owner", {"propagationPolicy": "Orphan"})
    await api.wait_for(
        CM, lambda listing: "owner" not in [i["metadata"]["name"] for i in listing["items"]]
    )
    for name in children:
        child = await api.ok("GET", f"{CM}/{name}")
        assert "ownerReferences" not in child["metadata"]


async def test_dry_run_does_not_persist(api: Api) -> None:
    status, body = await api.post(CM, configmap("dry"), params={"dryRun": "All"})
    assert status == 201 and body["metadata"]["name"] == "dry"
    assert (await api.get(f"{CM}/dry"))[0] == 404


async def test_namespace_deletion_removes_contents(api: Api) -> None:
    await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "doomed"}})
    await api.ok("POST", "/api/v1/namespaces/doomed/configmaps", configmap("x"))
    status, ns = await api.delete("/api/v1/namespaces/doomed")
    assert status == 200 and ns["status"]["phase"] == "Terminating"
    await api.wait_for(
        "/api/v1/namespaces",
        lambda listing: "doomed" not in [i["metadata"]["name"] for i in listing["items"]],
    )
    assert (await api.get("/api/v1/namespaces/doomed/configmaps/x"))[0] == 404
    status, body = await api.delete("/api/v1/namespaces/default")
    assert status == 403 and body["reason"] == "Forbidden"


async def test_secrets_string_data_and_scale_subresource(api: Api) -> None:
    secret = await api.ok(
        "POST",
        "/api/v1/namespaces/default/secrets",
        {"metadata": {"name": "s"}, "stringData": {"token": "abc"}},
    )
    assert secret["data"] == {"token": "YWJj"} and "stringData" not in secret
    assert secret["type"] == "Opaque"
    path = "/apis/apps/v1/namespaces/default/deployments"
    await api.ok(
        "POST",
        path,
        {
            "metadata": {"name": "d"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    scale = await api.ok("GET", f"{path}/d/scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    assert scale["status"]["selector"] == "a=b"
    scaled = await api.ok(
        "PATCH",
        f"{path}/d/scale",
        {"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )
    assert scaled["spec"]["replicas"] == 3
    assert (await api.ok("GET", f"{path}/d"))["spec"]["replicas"] == 3
