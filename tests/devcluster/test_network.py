"""Pod IPs, Service cluster IPs with forwarders, and Service names for local processes."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from devcluster.helpers import Api
from devcluster.test_kubelet import IMAGE, http_server_container
from kyai_devcluster import DevCluster

NS = "/api/v1/namespaces/default"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
JOBS = "/apis/batch/v1/namespaces/default/jobs"

#: Resolves the name, then fetches through the Service. A Service forwards to the pods Ready
#: when a connection arrives; under load a readiness probe may miss and take a pod out for a
#: moment (as kube-proxy would), so a refused connection is tried again for up to 5 s.
FETCH = """
import socket, sys, time, urllib.request
name = sys.argv[1]
print(socket.gethostbyname(name))
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
deadline = time.monotonic() + 5
while True:
    try:
        with opener.open(f"http://{name}:8000/", timeout=5) as response:
            print(response.status)
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            print("refused", type(exc).__name__)
            break
        time.sleep(0.2)
"""


async def web_with_service(api: Api) -> dict[str, Any]:
    await api.ok(
        "POST",
        DEPLOYMENTS,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [http_server_container()]},
                },
            },
        },
    )
    await api.ok(
        "POST",
        f"{NS}/services",
        {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
            },
        },
    )
    await api.wait_for(
        f"{DEPLOYMENTS}/web",
        lambda d: d.get("status", {}).get("availableReplicas") == 2,
        timeout=30,
    )
    return await api.wait_for(  # type: ignore[no-any-return]
        f"{NS}/services/web", lambda s: s["spec"].get("clusterIP", "").startswith("127.96.")
    )


async def fetch(cluster: DevCluster, name: str) -> list[str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        FETCH,
        name,
        stdout=asyncio.subprocess.PIPE,
        env=cluster.network_env(),
    )
    out, _ = await process.communicate()
    assert process.returncode == 0
    return out.decode().split("\n")


async def test_service_names_resolve_and_forward_to_ready_pods(
    api: Api, cluster: DevCluster
) -> None:
    service = await web_with_service(api)
    address = service["spec"]["clusterIP"]
    assert service["spec"]["clusterIPs"] == [address]
    hosts = cluster.hosts_path.read_text()
    assert f"{address}\tweb web.default web.default.svc web.default.svc.cluster.local" in hosts
    for name in ("web.default.svc.cluster.local", "web.default.svc", "web.default"):
        lines = await fetch(cluster, name)
        assert lines[:2] == [address, "200"], lines
    assert (await fetch(cluster, "localhost"))[0] == "127.0.0.1"

    await api.ok(
        "PATCH",
        f"{DEPLOYMENTS}/web",
        {"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    await api.wait_for(f"{NS}/pods", lambda listing: not listing["items"], timeout=20)
    lines = await fetch(cluster, "web.default.svc.cluster.local")
    assert lines[0] == address and lines[1].startswith("refused"), lines

    await api.ok("DELETE", f"{NS}/services/web")
    for _ in range(100):
        if "web.default" not in cluster.hosts_path.read_text():
            break
        await asyncio.sleep(0.05)
    assert "web.default" not in cluster.hosts_path.read_text()


async def test_a_worker_pod_reaches_a_service_by_its_cluster_name(api: Api) -> None:
    await web_with_service(api)
    await api.ok(
        "POST",
        JOBS,
        {
            "metadata": {"name": "worker"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": IMAGE,
                                "command": ["python", "-c", FETCH],
                                "args": ["web.default.svc.cluster.local"],
                            }
                        ],
                    }
                },
            },
        },
    )
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(
            p["status"].get("phase") in ("Succeeded", "Failed")
            for p in items["items"]
            if p["metadata"]["labels"].get("job-name") == "worker"
        ),
        timeout=30,
    )
    pod = next(p for p in listing["items"] if p["metadata"]["labels"].get("job-name") == "worker")
    _, log = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    assert pod["status"]["phase"] == "Succeeded", log
    assert log.split("\n")[1] == "200", log


async def test_the_shim_keeps_a_sitecustomize_it_shadows(
    tmp_path: Path, cluster: DevCluster
) -> None:
    other = tmp_path / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins; builtins.SHADOWED_RAN = True\n")
    env = cluster.network_env({"PYTHONPATH": str(other), "PATH": os.environ.get("PATH", "")})
    assert env["PYTHONPATH"].split(os.pathsep)[1] == str(other)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import builtins, socket; print(builtins.SHADOWED_RAN, socket.getaddrinfo.__module__)",
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    out, _ = await process.communicate()
    assert out.decode().split() == ["True", "sitecustomize"]


async def test_pods_binding_the_wildcard_get_their_own_ip(api: Api, cluster: DevCluster) -> None:
    # Two replicas and the Service all on port 8000: each pod binds "0.0.0.0", which the
    # pod's shim turns into its own IP, as if it had its own network namespace.
    server = {
        "name": "web",
        "image": IMAGE,
        "command": ["python", "-m", "http.server", "--bind", "0.0.0.0", "8000"],
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
    }
    await api.ok(
        "POST",
        DEPLOYMENTS,
        {
            "metadata": {"name": "wild"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "wild"}},
                "template": {
                    "metadata": {"labels": {"app": "wild"}},
                    "spec": {"containers": [server]},
                },
            },
        },
    )
    await api.ok(
        "POST",
        f"{NS}/services",
        {
            "metadata": {"name": "wild"},
            "spec": {"selector": {"app": "wild"}, "ports": [{"port": 8000}]},
        },
    )
    await api.wait_for(
        f"{DEPLOYMENTS}/wild",
        lambda d: d.get("status", {}).get("availableReplicas") == 2,
        timeout=30,
    )
    service = await api.wait_for(
        f"{NS}/services/wild", lambda s: s["spec"].get("clusterIP", "").startswith("127.96.")
    )
    lines = await fetch(cluster, "wild.default.svc.cluster.local")
    assert lines[:2] == [service["spec"]["clusterIP"], "200"], lines
