"""The real API server's size and name limits, with its own messages."""

from __future__ import annotations

import asyncio
import base64
import io
import ipaddress
import json
from typing import Any

from devcluster.helpers import Api, widget

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


async def send(
    api: Api, method: str, path: str, body: Any, content_type: str = "application/json"
) -> tuple[int, Any]:
    """Like ``api.request``, but streams the body (aiohttp warns on large raw bodies)."""
    data = io.BytesIO(json.dumps(body).encode())
    async with api.session.request(
        method, api.base + path, data=data, headers={"Content-Type": content_type}
    ) as response:
        return response.status, json.loads(await response.text())


def configmap(name: str, size: int = 10, **metadata: object) -> dict[str, object]:
    return {"metadata": {"name": name, **metadata}, "data": {"blob": "x" * size}}


async def test_a_3_mb_config_map_is_refused_and_1_mib_is_not(api: Api) -> None:
    status, body = await send(api, "POST", CONFIGMAPS, configmap("big", 3_000_000))
    assert status == 422
    assert body["message"] == (
        'ConfigMap "big" is invalid: []: Too long: may not be more than 1048576 bytes'
    )
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: may not be more than 1048576 bytes",
            "field": "[]",
        }
    ]
    status, _ = await send(api, "POST", CONFIGMAPS, configmap("exact", 1024 * 1024))
    assert status == 201
    # binaryData counts decoded bytes, together with data.
    half = base64.b64encode(b"\0" * (600 * 1024)).decode()
    mixed = {
        "metadata": {"name": "mixed"},
        "data": {"a": "x" * (600 * 1024)},
        "binaryData": {"b": half},
    }
    status, body = await send(api, "POST", CONFIGMAPS, mixed)
    assert status == 422 and "[]: Too long" in body["message"]
    # An update that grows it past the limit is refused too.
    status, body = await api.patch(f"{CONFIGMAPS}/exact", {"data": {"more": "y"}}, kind="strategic")
    assert status == 422 and body["message"].startswith('ConfigMap "exact" is invalid: []:')


async def test_secret_data_over_1_mib(api: Api) -> None:
    data = base64.b64encode(b"s" * (1024 * 1024 + 1)).decode()
    secret = {"metadata": {"name": "s"}, "data": {"k": data}}
    status, body = await send(api, "POST", "/api/v1/namespaces/default/secrets", secret)
    assert status == 422
    assert body["message"] == (
        'Secret "s" is invalid: data: Too long: may not be more than 1048576 bytes'
    )


async def test_a_300_kb_annotation_is_refused_on_builtins_and_custom_resources(
    api: Api,
) -> None:
    annotations = {"example.com/big": "a" * 300_000}
    status, body = await send(api, "POST", CONFIGMAPS, configmap("ann", annotations=annotations))
    assert status == 422
    assert body["message"] == (
        'ConfigMap "ann" is invalid: metadata.annotations: Too long: may not be more than '
        "262144 bytes"
    )
    await api.create_crd()
    obj = widget("w")
    obj["metadata"]["annotations"] = annotations
    status, body = await send(api, "POST", "/apis/example.com/v1/namespaces/default/widgets", obj)
    assert status == 422
    assert body["message"] == (
        'Widget.example.com "w" is invalid: metadata.annotations: Too long: may not be more '
        "than 262144 bytes"
    )
    # Keys count too: just under the limit passes, one byte over does not.
    key = "example.com/k"
    fits = {key: "a" * (262144 - len(key))}
    assert (await send(api, "POST", CONFIGMAPS, configmap("fits", annotations=fits)))[0] == 201
    over = {key: "a" * (262145 - len(key))}
    assert (await send(api, "POST", CONFIGMAPS, configmap("over", annotations=over)))[0] == 422


async def test_a_70_character_job_name_fails_on_its_pod_template_label(api: Api) -> None:
    name = "run-" + "x" * 66
    job: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }
    status, body = await api.post("/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 422
    assert body["message"] == (
        f'Job.batch "{name}" is invalid: spec.template.labels: Invalid value: "{name}": '
        "must be no more than 63 characters"
    )
    job["metadata"]["name"] = "x" * 63
    assert (await api.post("/apis/batch/v1/namespaces/default/jobs", job))[0] == 201


async def test_a_request_body_over_3_mib_is_413(api: Api) -> None:
    status, body = await send(api, "POST", CONFIGMAPS, configmap("huge", 3 * 1024 * 1024))
    assert status == 413
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    }


async def test_an_object_over_etcds_limit_is_the_etcd_error(api: Api) -> None:
    await api.create_crd()
    obj = widget("heavy", extra={"rows": ["r" * 1000] * 2000})
    assert len(json.dumps(obj)) > 1536 * 1024
    status, body = await send(api, "POST", "/apis/example.com/v1/namespaces/default/widgets", obj)
    assert status == 500
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "etcdserver: request is too large",
        "code": 500,
    }
    obj = widget("light", extra={"rows": ["r" * 1000] * 1000})
    assert (await send(api, "POST", "/apis/example.com/v1/namespaces/default/widgets", obj))[
        0
    ] == 201
    status, body = await send(
        api,
        "PATCH",
        "/apis/example.com/v1/namespaces/default/widgets/light",
        {"spec": {"extra": {"more": ["m" * 1000] * 1000}}},
        "application/merge-patch+json",
    )
    assert status == 500 and body["message"] == "etcdserver: request is too large"


async def test_names_per_kind(api: Api) -> None:
    status, body = await api.post("/api/v1/namespaces", {"metadata": {"name": "n" * 64}})
    assert status == 422
    assert body["message"] == (
        f'Namespace "{"n" * 64}" is invalid: metadata.name: Invalid value: "{"n" * 64}": '
        "must be no more than 63 characters"
    )
    status, body = await api.post(
        "/api/v1/namespaces/default/services",
        {"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}},
    )
    assert status == 422
    assert body["message"] == (
        'Service "1svc" is invalid: metadata.name: Invalid value: "1svc": a DNS-1035 label '
        "must consist of lower case alphanumeric characters or '-', start with an alphabetic "
        "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
        "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
    )
    long_name = "c" * 254
    status, body = await api.post(CONFIGMAPS, configmap(long_name))
    assert status == 422
    assert body["message"] == (
        f'ConfigMap "{long_name}" is invalid: metadata.name: Invalid value: "{long_name}": '
        "must be no more than 253 characters"
    )
    assert (await api.post(CONFIGMAPS, configmap("c" * 253)))[0] == 201
    # RBAC objects only need to be path segments.
    status, _ = await api.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {"metadata": {"name": "system:Odd_Name"}, "rules": []},
    )
    assert status == 201


async def test_label_keys_and_values(api: Api) -> None:
    value = "v" * 64
    status, body = await api.post(CONFIGMAPS, configmap("lbl", labels={"app": value}))
    assert status == 422
    assert body["message"] == (
        f'ConfigMap "lbl" is invalid: metadata.labels: Invalid value: "{value}": '
        "must be no more than 63 characters"
    )
    key = "example.com/" + "k" * 64
    status, body = await api.post(CONFIGMAPS, configmap("lbl", labels={key: "v"}))
    assert status == 422
    assert body["message"] == (
        f'ConfigMap "lbl" is invalid: metadata.labels: Invalid value: "{key}": '
        "name part must be no more than 63 characters"
    )
    status, body = await api.post(CONFIGMAPS, configmap("lbl", labels={"a": "-bad"}))
    assert status == 422
    assert body["message"].endswith(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', "
        "'_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
        "or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )


async def test_services_get_a_stable_cluster_ip(api: Api) -> None:
    path = "/api/v1/namespaces/default/services"
    await api.ok("POST", path, {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})
    svc: dict[str, Any] = {}
    for _ in range(100):  # the devcluster's network assigns the address just after admission
        svc = await api.ok("GET", f"{path}/web")
        if svc["spec"].get("clusterIP"):
            break
        await asyncio.sleep(0.05)
    ip = svc["spec"]["clusterIP"]
    assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("127.96.0.0/16")
    assert svc["spec"]["clusterIPs"] == [ip]
    replaced = {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 81}]}}
    assert (await api.ok("PUT", f"{path}/web", replaced))["spec"]["clusterIP"] == ip
    headless = {
        "metadata": {"name": "headless"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]},
    }
    assert (await api.ok("POST", path, headless))["spec"]["clusterIP"] == "None"
