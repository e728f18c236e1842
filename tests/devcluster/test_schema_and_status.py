"""CRD schemas (validation, pruning, defaults, field validation), status and tables."""

from __future__ import annotations

import copy
from typing import Any

from devcluster.helpers import WIDGET_CRD, Api, widget

WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def test_invalid_object_is_rejected_naming_each_field(api: Api) -> None:
    await api.create_crd()
    bad = widget("bad", size=30, color="green", label="UPPER", tags=["a", "b", "c", "d"])
    bad["spec"]["limits"] = {"cpu": "lots"}
    status, body = await api.post(WIDGETS, bad)
    assert status == 422
    assert body["kind"] == "Status" and body["reason"] == "Invalid" and body["code"] == 422
    assert body["details"]["kind"] == "Widget" and body["details"]["group"] == "example.com"
    causes = {cause["field"]: cause for cause in body["details"]["causes"]}
    assert set(causes) == {"spec.size", "spec.color", "spec.label", "spec.tags", "spec.limits.cpu"}
    assert causes["spec.size"]["reason"] == "FieldValueInvalid"
    assert "less than or equal to 10" in causes["spec.size"]["message"]
    assert causes["spec.color"]["reason"] == "FieldValueNotSupported"
    assert '"red", "blue"' in causes["spec.color"]["message"]
    assert "should match '^[a-z]+$'" in causes["spec.label"]["message"]
    assert "must be of type number" in causes["spec.limits.cpu"]["message"]
    assert body["message"].startswith('Widget.example.com "bad" is invalid: [')
    for field in causes:
        assert field in body["message"]

    status, body = await api.post(
        WIDGETS,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "nosize"},
            "spec": {},
        },
    )
    assert status == 422
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.size"}
    ]
    status, body = await api.post(WIDGETS, widget("long", label="abcdefghij"))
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueTooLong"
    status, body = await api.post(WIDGETS, widget("zero", size=0))
    assert status == 422 and "greater than or equal to 1" in body["message"]


async def test_defaults_and_pruning(api: Api) -> None:
    await api.create_crd()
    body = widget("w", extra={"anything": {"goes": [1, 2]}}, unknown=1)
    body["topLevel"] = "dropped"
    body["metadata"]["bogus"] = "dropped"
    status, created = await api.post(WIDGETS, body)
    assert status == 201
    assert created["spec"]["color"] == "red"
    assert created["spec"]["limits"] == {"cpu": 0.5}
    assert created["spec"]["extra"] == {"anything": {"goes": [1, 2]}}
    assert "unknown" not in created["spec"] and "topLevel" not in created
    assert "bogus" not in created["metadata"]
    memory = await api.ok("POST", WIDGETS, widget("m", limits={"memory": "1Gi"}))
    assert memory["spec"]["limits"]["memory"] == "1Gi"
    assert (await api.post(WIDGETS, widget("n", limits={"memory": 512})))[0] == 201
    assert (await api.post(WIDGETS, widget("o", limits={"memory": True})))[0] == 422


async def test_field_validation_modes(api: Api) -> None:
    await api.create_crd()
    status, body = await api.post(
        WIDGETS, widget("strict", unknown=1), params={"fieldValidation": "Strict"}
    )
    assert status == 400
    assert 'strict decoding error: unknown field "spec.unknown"' in body["message"]
    async with api.session.post(
        api.base + WIDGETS,
        json=widget("warn", unknown=1),
        params={"fieldValidation": "Warn"},
    ) as response:
        assert response.status == 201
        assert response.headers.getall("Warning") == ['299 - "unknown field \\"spec.unknown\\""']
    async with api.session.post(
        api.base + WIDGETS, json=widget("ignore", unknown=1), params={"fieldValidation": "Ignore"}
    ) as response:
        assert response.status == 201 and "Warning" not in response.headers
    status, _ = await api.post(WIDGETS, widget("x"), params={"fieldValidation": "Sometimes"})
    assert status == 400


async def test_status_subresource_and_generation(api: Api) -> None:
    await api.create_crd()
    created = await api.ok("POST", WIDGETS, {**widget("w"), "status": {"phase": "ignored"}})
    assert "status" not in created and created["metadata"]["generation"] == 1

    status_write = await api.ok(
        "PATCH",
        f"{WIDGETS}/w/status",
        {"spec": {"size": 9}, "status": {"phase": "Ready"}},
        content_type="application/merge-patch+json",
    )
    assert status_write["status"] == {"phase": "Ready"}
    assert status_write["spec"]["size"] == 3
    assert status_write["metadata"]["generation"] == 1

    main_write = await api.ok(
        "PATCH",
        f"{WIDGETS}/w",
        {"spec": {"size": 4}, "status": {"phase": "Overwritten"}},
        content_type="application/merge-patch+json",
    )
    assert main_write["spec"]["size"] == 4
    assert main_write["status"] == {"phase": "Ready"}
    assert main_write["metadata"]["generation"] == 2

    labelled = await api.ok(
        "PATCH",
        f"{WIDGETS}/w",
        {"metadata": {"labels": {"a": "b"}}},
        content_type="application/merge-patch+json",
    )
    assert labelled["metadata"]["generation"] == 2

    current = await api.ok("GET", f"{WIDGETS}/w")
    current["status"] = {"phase": "Replaced"}
    current["spec"]["size"] = 7
    replaced = await api.ok("PUT", f"{WIDGETS}/w/status", current)
    assert replaced["status"] == {"phase": "Replaced"} and replaced["spec"]["size"] == 4

    # Without the status subresource, status is part of the object and bumps generation.
    crd = copy.deepcopy(WIDGET_CRD)
    crd["metadata"]["name"] = "gadgets.example.com"
    crd["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    del crd["spec"]["versions"][0]["subresources"]
    await api.create_crd(crd)
    gadgets = "/apis/example.com/v1/namespaces/default/gadgets"
    gadget = {**widget("g"), "kind": "Gadget", "status": {"phase": "kept"}}
    created = await api.ok("POST", gadgets, gadget)
    assert created["status"] == {"phase": "kept"}
    updated = await api.ok(
        "PATCH",
        f"{gadgets}/g",
        {"status": {"phase": "new"}},
        content_type="application/merge-patch+json",
    )
    assert updated["metadata"]["generation"] == 2
    assert (await api.get(f"{gadgets}/g/status"))[0] == 404


async def test_builtin_status_and_generation(api: Api) -> None:
    jobs = "/apis/batch/v1/namespaces/default/jobs"
    status, body = await api.post(
        jobs,
        {
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
        },
    )
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"
    status, body = await api.post(
        "/apis/apps/v1/namespaces/default/deployments",
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "c"}},
                    "spec": {"containers": [{"name": "c"}]},
                },
            },
        },
    )
    assert status == 422
    fields = {cause["field"] for cause in body["details"]["causes"]}
    assert fields == {"spec.template.metadata.labels", "spec.template.spec.containers[0].image"}


def _cells(table: dict[str, Any]) -> list[dict[str, Any]]:
    names = [column["name"] for column in table["columnDefinitions"]]
    return [dict(zip(names, row["cells"], strict=True)) for row in table["rows"]]


async def test_tables_use_printer_columns(api: Api) -> None:
    await api.create_crd()
    await api.ok("POST", WIDGETS, widget("a", size=2))
    await api.ok(
        "PATCH",
        f"{WIDGETS}/a/status",
        {"status": {"phase": "Ready"}},
        content_type="application/merge-patch+json",
    )
    await api.ok("POST", WIDGETS, widget("b", size=5))
    table = await api.ok("GET", WIDGETS, headers={"Accept": TABLE})
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Phase", "Age"]
    rows = _cells(table)
    assert [(r["Name"], r["Size"], r["Phase"]) for r in rows] == [("a", 2, "Ready"), ("b", 5, None)]
    assert rows[0]["Age"].endswith("s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table["rows"][0]["object"]["metadata"]["name"] == "a"

    single = await api.ok("GET", f"{WIDGETS}/b", headers={"Accept": TABLE})
    assert _cells(single)[0]["Size"] == 5

    pods = await api.ok("GET", "/api/v1/namespaces/default/configmaps", headers={"Accept": TABLE})
    assert [c["name"] for c in pods["columnDefinitions"]] == ["Name", "Data", "Age"]
    crds = await api.ok(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", headers={"Accept": TABLE}
    )
    assert _cells(crds)[0]["Name"] == "widgets.example.com"


async def test_openapi_v3_advertises_field_validation(api: Api) -> None:
    await api.create_crd()
    index = await api.ok("GET", "/openapi/v3")
    assert "api/v1" in index["paths"] and "apis/example.com/v1" in index["paths"]
    url = index["paths"]["apis/example.com/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/example.com/v1?hash=")
    document = await api.ok("GET", url.split("?")[0])
    item = document["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]
    patch = item["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "example.com",
        "version": "v1",
        "kind": "Widget",
    }
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    schema = document["components"]["schemas"]["com.example.v1.Widget"]
    assert schema["properties"]["spec"]["properties"]["size"]["maximum"] == 10
