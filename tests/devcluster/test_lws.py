"""The LeaderWorkerSet emulation of ``kyai devcluster --lws`` (LWS v0.10.0's names)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.helpers import Api
from devcluster.test_kubelet import IMAGE
from kyai_devcluster import DevCluster

Obj = dict[str, Any]

LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
LWSS = f"{LWS_API}/namespaces/default/leaderworkersets"
PODS = "/api/v1/namespaces/default/pods"
CRD = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
    "leaderworkersets.leaderworkerset.x-k8s.io"
)

#: The leader serves HTTP on its port 8000 (its pod IP: the shim binds 0.0.0.0 there).
LEADER = ["python", "-m", "http.server", "--bind", "0.0.0.0", "8000"]
#: A worker resolves $LWS_LEADER_ADDRESS, reaches the leader's port, says so, then blocks.
WORKER_SCRIPT = """
import os, socket, time
address = os.environ["LWS_LEADER_ADDRESS"]
while True:
    try:
        ip = socket.gethostbyname(address)
        socket.create_connection((address, 8000), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
print("reached", address, ip, flush=True)
time.sleep(3600)
"""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[DevCluster]:
    async with DevCluster(workdir=tmp_path / "work", bookmark_interval=0.2, lws=True) as running:
        yield running


@pytest.fixture
async def api(cluster: DevCluster) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, cluster.url)


def lws(name: str = "vllm", *, size: int = 2, replicas: int = 1, **spec: Any) -> Obj:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {"role": "leader"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "leader",
                                "image": IMAGE,
                                "command": LEADER,
                                "readinessProbe": {
                                    "tcpSocket": {"port": 8000},
                                    "periodSeconds": 1,
                                },
                            }
                        ]
                    },
                },
                "workerTemplate": {
                    "spec": {
                        "containers": [
                            {
                                "name": "worker",
                                "image": IMAGE,
                                "command": ["python", "-c", WORKER_SCRIPT],
                                "env": [{"name": "LWS_WORKER_INDEX", "value": "overridden"}],
                            }
                        ]
                    }
                },
            },
            **spec,
        },
    }


def by_name(listing: Obj) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in listing["items"]}


def running(listing: Obj, names: set[str]) -> bool:
    pods = by_name(listing)
    return names <= set(pods) and all(
        pods[n]["status"].get("phase") == "Running"
        and not pods[n]["metadata"].get("deletionTimestamp")
        for n in names
    )


async def test_without_lws_there_is_no_crd(tmp_path: Path) -> None:
    async with (
        DevCluster(workdir=tmp_path / "work") as plain,
        aiohttp.ClientSession() as session,
    ):
        status, _ = await Api(session, plain.url).get(CRD)
        assert status == 404


async def test_the_real_crd_is_served_and_validates(api: Api) -> None:
    crd = await api.ok("GET", CRD)
    assert crd["spec"]["versions"][0]["name"] == "v1"
    body = lws()
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Sometimes"
    status, answer = await api.post(LWSS, body)
    assert status == 422, answer
    assert answer["message"] == (
        'LeaderWorkerSet.leaderworkerset.x-k8s.io "vllm" is invalid: '
        'spec.leaderWorkerTemplate.restartPolicy: Unsupported value: "Sometimes": supported '
        'values: "Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None"'
    )
    status, answer = await api.post(LWSS, lws(size=0))
    assert status == 403, answer
    assert answer["message"] == (
        'admission webhook "vleaderworkerset.kb.io" denied the request: '
        "spec.leaderWorkerTemplate.size: Invalid value: 0: size must be equal or greater than 1"
    )


async def test_a_group_of_two_has_lws_labels_env_and_identity(
    api: Api, cluster: DevCluster
) -> None:
    created = await api.ok("POST", LWSS, lws())
    # The webhook's and the schema's defaults.
    assert created["spec"]["rolloutStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0, "partition": 0},
    }
    assert created["spec"]["networkConfig"] == {"subdomainPolicy": "Shared"}
    assert created["spec"]["startupPolicy"] == "LeaderCreated"
    listing = await api.wait_for(PODS, lambda items: running(items, {"vllm-0", "vllm-0-1"}))
    pods = by_name(listing)
    leader, worker = pods["vllm-0"], pods["vllm-0-1"]
    group_key = hashlib.sha1(b"default/vllm-0").hexdigest()
    for pod in (leader, worker):
        labels = pod["metadata"]["labels"]
        assert labels["leaderworkerset.sigs.k8s.io/name"] == "vllm"
        assert labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
        assert labels["leaderworkerset.sigs.k8s.io/group-key"] == group_key
        assert labels["leaderworkerset.sigs.k8s.io/template-revision-hash"]
        assert pod["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] == "2"
        assert pod["spec"]["subdomain"] == "vllm"
        assert pod["spec"]["hostname"] == pod["metadata"]["name"]
    assert leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert leader["metadata"]["labels"]["role"] == "leader"
    assert worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] == "1"
    assert worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"] == "vllm-0"
    assert leader["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet"
    assert worker["metadata"]["ownerReferences"][0]["uid"] == leader["metadata"]["uid"]
    # podutils.AddLWSVariables: first, in this order, replacing a container's own.
    assert leader["spec"]["containers"][0]["env"] == [
        {"name": "LWS_LEADER_ADDRESS", "value": "vllm-0.vllm.default"},
        {"name": "LWS_GROUP_SIZE", "value": "2"},
        {"name": "LWS_WORKER_INDEX", "value": "0"},
    ]
    assert worker["spec"]["containers"][0]["env"] == [
        {"name": "LWS_LEADER_ADDRESS", "value": "vllm-0.vllm.default"},
        {"name": "LWS_GROUP_SIZE", "value": "2"},
        {"name": "LWS_WORKER_INDEX", "value": "1"},
    ]
    service = await api.ok("GET", "/api/v1/namespaces/default/services/vllm")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": "vllm"}
    # The worker process resolved the leader's address to the leader's pod IP and reached it.
    await api.wait_for(
        f"{PODS}/vllm-0-1/log", lambda text: isinstance(text, str) and "reached" in text
    )
    _, log = await api.get(f"{PODS}/vllm-0-1/log")
    assert log.split() == ["reached", "vllm-0.vllm.default", leader["status"]["podIP"]]
    done = await api.wait_for(
        f"{LWSS}/vllm", lambda obj: (obj.get("status") or {}).get("readyReplicas") == 1
    )
    status = done["status"]
    assert status["replicas"] == 1
    assert status["updatedReplicas"] == 1
    assert status["hpaPodSelector"] == (
        "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0"
    )
    available = {c["type"]: c for c in status["conditions"]}
    assert available["Available"]["status"] == "True"
    assert available["Available"]["reason"] == "AllGroupsReady"
    assert available["Progressing"]["status"] == "False"


async def test_deleting_a_worker_recreates_the_whole_group(api: Api) -> None:
    await api.ok("POST", LWSS, lws())
    await api.wait_for(
        f"{LWSS}/vllm", lambda obj: (obj.get("status") or {}).get("readyReplicas") == 1
    )
    before = by_name(await api.ok("GET", PODS))
    await api.ok("DELETE", f"{PODS}/vllm-0-1")
    after = await api.wait_for(
        PODS,
        lambda items: (
            running(items, {"vllm-0", "vllm-0-1"})
            and all(
                p["metadata"]["uid"] != before[p["metadata"]["name"]]["metadata"]["uid"]
                for p in items["items"]
            )
        ),
        timeout=30,
    )
    assert set(by_name(after)) == {"vllm-0", "vllm-0-1"}
    events = await api.ok("GET", "/api/v1/namespaces/default/events")
    assert any(
        e["reason"] == "RecreateGroup"
        and e["message"]
        == "Worker pod vllm-0-1 failed, deleted leader pod vllm-0 to recreate group 0"
        for e in events["items"]
    )
    await api.wait_for(
        f"{LWSS}/vllm", lambda obj: (obj.get("status") or {}).get("readyReplicas") == 1
    )


async def test_scaling_from_one_group_to_two(api: Api) -> None:
    await api.ok("POST", LWSS, lws())
    await api.wait_for(
        f"{LWSS}/vllm", lambda obj: (obj.get("status") or {}).get("readyReplicas") == 1
    )
    await api.ok(
        "PATCH",
        f"{LWSS}/vllm",
        {"spec": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    done = await api.wait_for(
        f"{LWSS}/vllm",
        lambda obj: (obj.get("status") or {}).get("readyReplicas") == 2,
        timeout=30,
    )
    assert done["status"]["replicas"] == 2
    pods = by_name(await api.ok("GET", PODS))
    assert set(pods) == {"vllm-0", "vllm-0-1", "vllm-1", "vllm-1-1"}
    assert pods["vllm-1-1"]["spec"]["containers"][0]["env"][0] == {
        "name": "LWS_LEADER_ADDRESS",
        "value": "vllm-1.vllm.default",
    }
    await api.ok(
        "PATCH",
        f"{LWSS}/vllm",
        {"spec": {"replicas": 1}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    await api.wait_for(PODS, lambda items: set(by_name(items)) == {"vllm-0", "vllm-0-1"})


async def test_a_template_change_rolls_the_group(api: Api) -> None:
    await api.ok("POST", LWSS, lws())
    first = await api.wait_for(
        f"{LWSS}/vllm", lambda obj: (obj.get("status") or {}).get("readyReplicas") == 1
    )
    old = by_name(await api.ok("GET", PODS))["vllm-0"]["metadata"]["labels"][
        "leaderworkerset.sigs.k8s.io/template-revision-hash"
    ]
    template = first["spec"]["leaderWorkerTemplate"]
    template["workerTemplate"]["metadata"] = {"labels": {"version": "two"}}
    await api.ok(
        "PATCH",
        f"{LWSS}/vllm",
        {"spec": {"leaderWorkerTemplate": template}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    listing = await api.wait_for(
        PODS,
        lambda items: (
            running(items, {"vllm-0", "vllm-0-1"})
            and by_name(items)["vllm-0-1"]["metadata"]["labels"].get("version") == "two"
        ),
        timeout=30,
    )
    new = by_name(listing)["vllm-0"]["metadata"]["labels"][
        "leaderworkerset.sigs.k8s.io/template-revision-hash"
    ]
    assert new != old
    await api.wait_for(
        f"{LWSS}/vllm",
        lambda obj: (
            (obj.get("status") or {}).get("readyReplicas") == 1
            and obj["status"].get("updatedReplicas") == 1
        ),
    )


async def test_deleting_the_set_removes_its_groups(api: Api) -> None:
    await api.ok("POST", LWSS, lws())
    await api.wait_for(PODS, lambda items: running(items, {"vllm-0", "vllm-0-1"}))
    await api.ok("DELETE", f"{LWSS}/vllm")
    await api.wait_for(PODS, lambda items: not items["items"])
    status, _ = await api.get("/api/v1/namespaces/default/services/vllm")
    assert status == 404
