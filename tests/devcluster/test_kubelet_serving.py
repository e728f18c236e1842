"""Long-running pods in the process runtime: probes, restarts, images, tokens, HTTPS."""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from devcluster.helpers import Api
from kyai_devcluster import DevCluster
from kyai_devcluster._tokens import verify

NS = "/api/v1/namespaces/default"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
IMAGE = "ghcr.io/kyai-io/kyai-operator:test"


def deployment(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", **container}], **spec},
            },
        },
    }


async def only_pod(api: Api, app: str) -> dict[str, Any]:
    """The one pod of the Deployment ``app`` (its label ``app``)."""

    def of_app(listing: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in listing["items"] if p["metadata"]["labels"].get("app") == app]

    listing = await api.wait_for(f"{NS}/pods", lambda items: len(of_app(items)) == 1, timeout=20)
    return of_app(listing)[0]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def test_readiness_follows_an_exec_probe_and_the_deployment_follows(
    api: Api, cluster: DevCluster
) -> None:
    sleeper = {
        "image": IMAGE,
        "command": ["python", "-c", "import time; time.sleep(600)"],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
        "readinessProbe": {
            "exec": {"command": ["test", "-f", "/state/ready"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    await api.ok(
        "POST",
        DEPLOYMENTS,
        deployment("gate", sleeper, volumes=[{"name": "state", "emptyDir": {}}]),
    )
    pod = await only_pod(api, "gate")
    name = pod["metadata"]["name"]
    running = await api.wait_for(
        f"{NS}/pods/{name}",
        lambda p: (
            p["status"].get("phase") == "Running" and p["status"]["containerStatuses"][0]["started"]
        ),
    )
    assert not ready(running)
    flag = cluster.kubelet.pod_dir("default", name) / "volumes" / "state" / "ready"
    flag.write_text("yes")
    await api.wait_for(f"{NS}/pods/{name}", ready)
    await api.wait_for(
        f"{DEPLOYMENTS}/gate", lambda d: d.get("status", {}).get("availableReplicas") == 1
    )
    flag.unlink()
    await api.wait_for(f"{NS}/pods/{name}", lambda p: not ready(p))
    unavailable = await api.wait_for(
        f"{DEPLOYMENTS}/gate", lambda d: not d.get("status", {}).get("availableReplicas")
    )
    assert unavailable["status"]["unavailableReplicas"] == 1


async def test_a_crashing_container_restarts_with_back_off_and_its_message(api: Api) -> None:
    crasher = {
        "image": IMAGE,
        "command": ["python", "-c", "import sys; print('bad config: port'); sys.exit(3)"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    await api.ok("POST", DEPLOYMENTS, deployment("crash", crasher))
    pod = await only_pod(api, "crash")
    crashed = await api.wait_for(
        f"{NS}/pods/{pod['metadata']['name']}",
        lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 2,
        timeout=30,
    )
    status = crashed["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert "bad config: port" in status["lastState"]["terminated"]["message"]
    assert not ready(crashed)
    # As the kubelet keeps them: the log is the current instance's, `previous` the one before.
    name = pod["metadata"]["name"]
    code, previous = await api.get(f"{NS}/pods/{name}/log?previous=true&tailLines=1")
    assert (code, previous) == (200, "bad config: port\n")
    code, current = await api.get(f"{NS}/pods/{name}/log")
    assert code == 200 and current.count("bad config: port") <= 1


async def test_a_previous_log_before_any_restart_is_refused_in_the_kubelets_words(
    api: Api,
) -> None:
    sleeper = {"image": IMAGE, "command": ["python", "-c", "import time; time.sleep(60)"]}
    await api.ok("POST", DEPLOYMENTS, deployment("sleeper", sleeper))
    name = (await only_pod(api, "sleeper"))["metadata"]["name"]
    await api.wait_for(f"{NS}/pods/{name}", lambda p: bool(p["status"].get("containerStatuses")))
    code, body = await api.get(f"{NS}/pods/{name}/log?previous=true")
    assert code == 400
    assert body["message"] == f'previous terminated container "main" in pod "{name}" not found'


async def test_termination_message_file_of_a_job_pod(api: Api) -> None:
    script = "import sys; open('/dev/termination-log', 'w').write('quota exceeded'); sys.exit(4)"
    await api.ok(
        "POST",
        JOBS,
        {
            "metadata": {"name": "msg"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "main", "image": IMAGE, "command": ["python", "-c", script]}
                        ],
                    }
                },
            },
        },
    )
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(p["status"].get("phase") == "Failed" for p in items["items"]),
        timeout=30,
    )
    terminated = listing["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated == {**terminated, "exitCode": 4, "reason": "Error"}
    assert terminated["message"] == "quota exceeded"


async def test_other_images_wait_in_image_pull_back_off(api: Api) -> None:
    await api.ok("POST", DEPLOYMENTS, deployment("web", {"image": "nginx:1.27"}))
    pod = await only_pod(api, "web")
    path = f"{NS}/pods/{pod['metadata']['name']}"

    def waiting(reason: str) -> Any:
        def check(p: dict[str, Any]) -> bool:
            statuses = p["status"].get("containerStatuses") or [{}]
            return bool(statuses[0].get("state", {}).get("waiting", {}).get("reason") == reason)

        return check

    first = await api.wait_for(path, waiting("ErrImagePull"))
    message = first["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    assert 'Failed to pull image "nginx:1.27"' in message
    later = await api.wait_for(path, waiting("ImagePullBackOff"), timeout=10)
    assert later["status"]["phase"] == "Pending" and not ready(later)
    events = await api.ok(
        "GET",
        f"{NS}/events",
        params={"fieldSelector": f"involvedObject.uid={pod['metadata']['uid']}"},
    )
    assert {(e["type"], e["reason"]) for e in events["items"]} == {("Warning", "Failed")}
    assert "Error: ErrImagePull" in {e["message"] for e in events["items"]}


async def test_engine_images_run_the_stand_in_with_their_command_line(tmp_path: Path) -> None:
    recorder = tmp_path / "engine.py"
    recorder.write_text(
        "import http.server, json, os, sys\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "host = os.environ['KYAI_DEVCLUSTER_POD_IP']\n"
        "print(json.dumps({'argv': sys.argv[1:], 'host': host}), flush=True)\n"
        "http.server.HTTPServer((host, port), http.server.SimpleHTTPRequestHandler)"
        ".serve_forever()\n"
    )
    engine = {
        "image": "vllm/vllm-openai:v0.8.5",
        "command": ["vllm", "serve"],
        "args": ["Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "$(PORT)"],
        "env": [{"name": "PORT", "value": "8000"}],
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
    }
    async with (
        DevCluster(
            workdir=tmp_path / "work", engine_command=(sys.executable, str(recorder))
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, cluster.url)
        await api.ok("POST", DEPLOYMENTS, deployment("engine", engine))
        pod = await only_pod(api, "engine")
        name = pod["metadata"]["name"]
        served = await api.wait_for(f"{NS}/pods/{name}", ready, timeout=30)
        status, log = await api.get(f"{NS}/pods/{name}/log")
        assert status == 200
        record = yaml.safe_load(log.splitlines()[0])
        assert record["argv"] == [
            "vllm", "serve", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "8000"
        ]  # fmt: skip
        assert record["host"] == served["status"]["podIP"]


async def test_the_stand_in_imitates_the_version_the_image_names(tmp_path: Path) -> None:
    # --swap-space is an option of vLLM 0.11.0 and not of 0.32.0: the stand-in of each
    # image's version takes or refuses it as that release's parser does.
    engine = {
        "command": ["vllm", "serve"],
        "args": ["org/m", "--host", "0.0.0.0", "--port", "8000", "--swap-space", "4"],
        "env": [{"name": "KYAI_STANDIN_LOAD_SECONDS", "value": "0"}],
        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1},
    }
    async with (
        DevCluster(workdir=tmp_path / "work") as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, cluster.url)
        old = {**engine, "image": "vllm/vllm-openai:v0.11.0"}
        await api.ok("POST", DEPLOYMENTS, deployment("old", old))
        name = (await only_pod(api, "old"))["metadata"]["name"]
        served = await api.wait_for(f"{NS}/pods/{name}", ready, timeout=30)
        url = f"http://{served['status']['podIP']}:8000/version"
        async with session.get(url) as response:
            assert (await response.json()) == {"version": "0.11.0"}
        new = {**engine, "image": "vllm/vllm-openai:v0.32.0"}
        await api.ok("POST", DEPLOYMENTS, deployment("new", new))
        name = (await only_pod(api, "new"))["metadata"]["name"]

        async def refused() -> str | None:
            status, log = await api.get(f"{NS}/pods/{name}/log")
            found = "unrecognized arguments: --swap-space 4" in log
            return log if status == 200 and found else None

        deadline = time.monotonic() + 30
        while (log := await refused()) is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert log is not None, "the 0.32.0 stand-in did not refuse --swap-space"


async def test_pods_get_their_service_account_token(api: Api, cluster: DevCluster) -> None:
    await api.ok("POST", f"{NS}/serviceaccounts", {"metadata": {"name": "worker"}})
    script = "import os; print(os.environ['KUBECONFIG'])"
    await api.ok(
        "POST",
        JOBS,
        {
            "metadata": {"name": "whoami"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": "worker",
                        "containers": [
                            {"name": "main", "image": IMAGE, "command": ["python", "-c", script]}
                        ],
                    }
                },
            },
        },
    )
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(p["status"].get("phase") == "Succeeded" for p in items["items"]),
        timeout=30,
    )
    name = listing["items"][0]["metadata"]["name"]
    _, log = await api.get(f"{NS}/pods/{name}/log")
    config = yaml.safe_load(Path(log.strip()).read_text())
    token = config["users"][0]["user"]["token"]
    identity = verify(cluster.token_key, token)
    assert identity is not None and identity.username == "system:serviceaccount:default:worker"
    assert config["contexts"][0]["context"]["namespace"] == "default"
    files = cluster.kubelet.pod_dir("default", name) / "serviceaccount"
    assert (files / "token").read_text() == token
    assert (files / "namespace").read_text() == "default"
    assert "BEGIN CERTIFICATE" in (files / "ca.crt").read_text()


async def test_https_listener_is_trusted_with_the_pods_ca(cluster: DevCluster) -> None:
    assert cluster.pki is not None and cluster.https_url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{cluster.https_url}/version", ssl=context) as response,
    ):
        assert response.status == 200
        assert (await response.json())["major"] == "1"
    untrusted = ssl.create_default_context()
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"{cluster.https_url}/version", ssl=untrusted):
                raise AssertionError("a client without the devcluster's CA was accepted")
        except aiohttp.ClientConnectorCertificateError:
            pass


def flag_container(**probes: Any) -> dict[str, Any]:
    return {
        "image": IMAGE,
        "command": ["python", "-c", "import time; time.sleep(600)"],
        "volumeMounts": [{"name": "state", "mountPath": "/state"}],
        **probes,
    }


async def test_a_startup_probe_holds_readiness_until_it_passes(
    api: Api, cluster: DevCluster
) -> None:
    probe = {
        "exec": {"command": ["test", "-f", "/state/started"]},
        "periodSeconds": 1,
        "failureThreshold": 100,
    }
    await api.ok(
        "POST",
        DEPLOYMENTS,
        deployment(
            "slow",
            flag_container(startupProbe=probe),
            volumes=[{"name": "state", "emptyDir": {}}],
        ),
    )
    pod = await only_pod(api, "slow")
    name = pod["metadata"]["name"]
    await api.wait_for(f"{NS}/pods/{name}", lambda p: p["status"].get("phase") == "Running")
    status = (await api.ok("GET", f"{NS}/pods/{name}"))["status"]
    assert status["containerStatuses"][0]["started"] is False and not ready({"status": status})
    (cluster.kubelet.pod_dir("default", name) / "volumes" / "state" / "started").touch()
    started = await api.wait_for(f"{NS}/pods/{name}", ready)
    assert started["status"]["containerStatuses"][0]["started"] is True


async def test_a_failing_liveness_probe_restarts_the_container(api: Api) -> None:
    probe = {
        "exec": {"command": ["test", "-f", "/state/alive"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    await api.ok(
        "POST",
        DEPLOYMENTS,
        deployment(
            "dying",
            flag_container(livenessProbe=probe),
            volumes=[{"name": "state", "emptyDir": {}}],
        ),
    )
    pod = await only_pod(api, "dying")
    name = pod["metadata"]["name"]
    restarted = await api.wait_for(
        f"{NS}/pods/{name}",
        lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1,
        timeout=30,
    )
    last = restarted["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 143 and last["reason"] == "Error"  # SIGTERM
    events = await api.ok("GET", f"{NS}/events")
    assert any(
        e["reason"] == "Unhealthy" and e["message"].startswith("Liveness probe failed")
        for e in events["items"]
        if e["involvedObject"]["name"] == name
    )


async def test_pods_without_a_mounted_token_get_no_credentials(
    api: Api, cluster: DevCluster
) -> None:
    await api.ok(
        "POST",
        f"{NS}/serviceaccounts",
        {"metadata": {"name": "quiet"}, "automountServiceAccountToken": False},
    )
    script = "import os; print(os.environ['KUBECONFIG'])"
    await api.ok(
        "POST",
        JOBS,
        {
            "metadata": {"name": "anonymous"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": "quiet",
                        "containers": [
                            {"name": "main", "image": IMAGE, "command": ["python", "-c", script]}
                        ],
                    }
                },
            },
        },
    )
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(p["status"].get("phase") == "Succeeded" for p in items["items"]),
        timeout=30,
    )
    name = listing["items"][0]["metadata"]["name"]
    _, log = await api.get(f"{NS}/pods/{name}/log")
    config = yaml.safe_load(Path(log.strip()).read_text())
    assert config["users"][0]["user"] == {}
    assert not (cluster.kubelet.pod_dir("default", name) / "serviceaccount").exists()
