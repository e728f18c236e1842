"""Discovery: /version, /api, /apis, resource lists; CRDs appear and disappear."""

from __future__ import annotations

from devcluster.helpers import Api


async def test_version_and_core_discovery(api: Api) -> None:
    status, version = await api.get("/version")
    assert status == 200
    assert version["major"] == "1" and version["gitVersion"].startswith("v1.")

    status, versions = await api.get("/api")
    assert status == 200 and versions["kind"] == "APIVersions" and versions["versions"] == ["v1"]

    status, core = await api.get("/api/v1")
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    by_name = {resource["name"]: resource for resource in core["resources"]}
    for plural in (
        "namespaces",
        "configmaps",
        "secrets",
        "services",
        "events",
        "pods",
        "persistentvolumeclaims",
        "serviceaccounts",
    ):
        assert plural in by_name, plural
    pods = by_name["pods"]
    assert pods["kind"] == "Pod" and pods["namespaced"] is True
    assert pods["singularName"] == "pod" and "po" in pods["shortNames"]
    assert {"create", "get", "list", "watch", "patch", "update", "delete"} <= set(pods["verbs"])
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert by_name["pods/log"]["verbs"] == ["get"]
    assert by_name["namespaces"]["namespaced"] is False


async def test_group_discovery_lists_builtin_groups(api: Api) -> None:
    status, groups = await api.get("/apis")
    assert status == 200 and groups["kind"] == "APIGroupList"
    names = {group["name"]: group for group in groups["groups"]}
    for name in (
        "apps",
        "batch",
        "rbac.authorization.k8s.io",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
    ):
        assert name in names
        assert names[name]["preferredVersion"]["groupVersion"] == f"{name}/v1"
    _, apps = await api.get("/apis/apps/v1")
    kinds = {r["name"]: r["kind"] for r in apps["resources"]}
    assert kinds["deployments"] == "Deployment" and kinds["deployments/status"] == "Deployment"
    scale = next(r for r in apps["resources"] if r["name"] == "deployments/scale")
    assert (scale["group"], scale["version"], scale["kind"]) == ("autoscaling", "v1", "Scale")
    _, batch = await api.get("/apis/batch/v1")
    assert "jobs" in {r["name"] for r in batch["resources"]}
    status, _ = await api.get("/apis/example.com/v1")
    assert status == 404


async def test_crd_is_served_when_created_and_gone_when_deleted(api: Api) -> None:
    await api.create_crd()
    _, groups = await api.get("/apis")
    group = next(g for g in groups["groups"] if g["name"] == "example.com")
    assert group["versions"] == [{"groupVersion": "example.com/v1", "version": "v1"}]

    status, resources = await api.get("/apis/example.com/v1")
    assert status == 200
    by_name = {r["name"]: r for r in resources["resources"]}
    assert by_name["widgets"]["kind"] == "Widget"
    assert by_name["widgets"]["shortNames"] == ["wd"]
    assert by_name["widgets"]["singularName"] == "widget"
    assert by_name["widgets"]["namespaced"] is True
    assert "widgets/status" in by_name

    crd = await api.ok(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    )
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}

    await api.ok(
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 1},
        },
    )
    await api.ok(
        "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"
    )
    await api.wait_for("/apis", lambda g: "example.com" not in {x["name"] for x in g["groups"]})
    status, _ = await api.get("/apis/example.com/v1/namespaces/default/widgets/w")
    assert status == 404
    status, _ = await api.get("/apis/example.com/v1")
    assert status == 404


async def test_unknown_paths_are_404_status(api: Api) -> None:
    status, body = await api.get("/api/v1/namespaces/default/nonsense")
    assert status == 404
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404
