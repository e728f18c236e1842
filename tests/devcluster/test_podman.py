"""The image and the podman runtime: pods as containers of their images (marker ``podman``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.helpers import Api
from devcluster.podman_image import PODMAN, PODMAN_RUN
from devcluster.test_kubelet import grant_default_account, http_server_container
from kyai import __version__
from kyai_devcluster import DevCluster

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]

NS = "/api/v1/namespaces/default"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
PROJECT = "ghcr.io/kyai-io/kyai-operator:test"


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    return subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
async def pod_cluster(tmp_path: Path, podman_image: str) -> AsyncIterator[tuple[DevCluster, Api]]:
    async with (
        DevCluster(
            workdir=tmp_path / "work",
            runtime="podman",
            image=podman_image,
            job_backoff_seconds=0.05,
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        yield cluster, Api(session, cluster.url)


def job(name: str, container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": PROJECT, **container}],
                    **spec,
                }
            },
        },
    }


async def finished_pod(api: Api, job_name: str) -> dict[str, Any]:
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(
            p["status"].get("phase") in ("Succeeded", "Failed")
            for p in items["items"]
            if p["metadata"]["labels"].get("job-name") == job_name
        ),
        timeout=180,
    )
    return next(  # type: ignore[no-any-return]
        p for p in listing["items"] if p["metadata"]["labels"].get("job-name") == job_name
    )


def test_image_runs_read_only_as_nonroot_with_labels_and_nltk_data(podman_image: str) -> None:
    version = podman(*PODMAN_RUN, "--read-only", "--user", "65532", podman_image, "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"kyai {__version__}"
    script = (
        "import os, nltk; nltk.data.find('tokenizers/punkt_tab/english/'); "
        "print(os.getuid(), nltk.sent_tokenize('One thing. Another thing.'))"
    )
    nltk = podman(*PODMAN_RUN, "--read-only", "--entrypoint", "python", podman_image, "-c", script)
    assert nltk.returncode == 0, nltk.stderr
    assert nltk.stdout.strip() == "65532 ['One thing.', 'Another thing.']"
    inspected = json.loads(podman("image", "inspect", podman_image).stdout)[0]
    labels = inspected["Labels"]
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert inspected["Config"]["User"] == "65532:65532"
    assert inspected["Config"]["Entrypoint"] == ["kyai"]


#: What the product image must not hold: the tools and the dependencies only they use, and
#: HF datasets with what only it needs (if-verifiable's dataset API; the IFEval checkers are
#: loaded without it). (jsonpatch stays: kopf itself imports it, in kopf/_cogs/structs/patches.py.)
ABSENT = (
    "kyai.devcluster", "kyai.testing", "kyai_devcluster", "kyai_testing", "celpy", "click",
    "datasets", "pandas", "multiprocess",
)  # fmt: skip

#: What the product loads from the dependencies that scripts/slim-venv.sh trims.
SLIMMED_STILL_WORK = """
import pathlib, tempfile
import pyarrow as pa, pyarrow.parquet as pq
from kubernetes import client, config
import math_verify
from scipy import stats
from kyai.graders import builtin_grader, write_punkt_tab
from kyai.stats import compare
from kyai.graders._ifeval import check_instructions
root = pathlib.Path(tempfile.mkdtemp())
pq.write_table(pa.table({"a": [1, 2, 3]}), root / "x.parquet")
assert pq.read_table(root / "x.parquet").num_rows == 3
assert write_punkt_tab(root).is_dir()
(checked,) = check_instructions("Two sentences. Here.", [("punctuation:no_comma", {})], prompt="")
assert checked.strict and checked.loose
assert math_verify.verify(math_verify.parse("$1/2$"), math_verify.parse("$0.5$"))
assert client.CustomObjectsApi and client.CoreV1Api and config.load_incluster_config
import importlib.util
assert importlib.util.find_spec("kubernetes.client.api.apps_v1_api") is None  # slimmed away
assert round(stats.binomtest(3, 9, 0.5).pvalue, 4) == 0.5078
same = [1.0] * 64 + [0.0] * 27
paired = compare([1.0] * 6 + [0.0] * 3 + same, [0.0] * 6 + [1.0] * 3 + same)
assert round(paired.p_value, 4) == 0.5078 and paired.test == "mcnemar-exact"
print("ok")
"""

#: Every shared library left in the image loads (the wheels' libraries are stripped on the
#: host, scripts/strip-wheels.py: a library the loader refused would show here first).
EVERY_LIBRARY_LOADS = """
import ctypes, os, pathlib, sys
site = pathlib.Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                    "site-packages")
failed, count = [], 0
for path in sorted(site.rglob("*.so*")):
    if path.is_file() and path.read_bytes()[:4] == b"\\x7fELF":
        count += 1
        try:
            ctypes.CDLL(str(path), mode=os.RTLD_LAZY)
        except OSError as exc:
            failed.append(f"{path.relative_to(site)}: {exc}")
print(count, failed)
"""


def test_the_product_image_holds_no_tool_and_what_it_loads_works(podman_image: str) -> None:
    for module in ABSENT:
        found = podman(
            *PODMAN_RUN, "--entrypoint", "python3", podman_image, "-c", f"import {module}"
        )
        assert found.returncode == 1 and "ModuleNotFoundError" in found.stderr, module
    assert podman(*PODMAN_RUN, "--entrypoint", "pip", podman_image, "--version").returncode != 0
    loaded = podman(
        *PODMAN_RUN, "--read-only", "--entrypoint", "python3", podman_image,
        "-c", SLIMMED_STILL_WORK,
    )  # fmt: skip
    assert loaded.returncode == 0 and loaded.stdout.strip() == "ok", loaded.stderr[-2000:]
    libraries = podman(
        *PODMAN_RUN, "--read-only", "--entrypoint", "python3", podman_image,
        "-c", EVERY_LIBRARY_LOADS,
    )  # fmt: skip
    assert libraries.returncode == 0, libraries.stderr[-2000:]
    count, failed = libraries.stdout.split(" ", 1)
    assert int(count) > 100 and failed.strip() == "[]", libraries.stdout


def test_the_stand_in_image_adds_the_doubles_to_the_product(
    podman_image: str, standin_image: str
) -> None:
    script = "import kyai, kyai_testing.engines, kyai_testing.llm_double; print(kyai.__version__)"
    found = podman(*PODMAN_RUN, "--entrypoint", "python3", standin_image, "-c", script)
    assert found.returncode == 0 and found.stdout.strip() == __version__, found.stderr
    absent = podman(
        *PODMAN_RUN, "--entrypoint", "python3", standin_image, "-c", "import kyai_devcluster"
    )
    assert absent.returncode == 1
    inspected = json.loads(podman("image", "inspect", standin_image).stdout)[0]
    assert inspected["Config"]["User"] == "65532:65532"
    assert inspected["Labels"]["org.opencontainers.image.title"] == "kyai-standins"


IN_CLUSTER = """
import os
from kubernetes import client, config
config.load_incluster_config()
pod = client.CoreV1Api().read_namespaced_pod(os.environ["HOSTNAME"], "default")
print(pod.metadata.name, pod.status.pod_ip == os.environ["POD_IP"])
print(open("/cfg/greeting").read(), os.environ["PASSWORD"], os.getuid(), os.getgid())
open("/data/result.txt", "w").write("written in a container")
open("/scratch/x", "w").write("tmp")
open("/dev/shm/x", "w").write("shm")
try:
    open("/etc/motd-written", "w")
except OSError as exc:
    print("read-only root:", exc.errno)
open("/dev/termination-log", "w").write("all good")
"""


async def test_a_job_pod_runs_in_its_container_with_volumes_env_and_in_cluster_config(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    cluster, api = pod_cluster
    await grant_default_account(api, "pods", ["get"])
    await api.ok(
        "POST", f"{NS}/configmaps", {"metadata": {"name": "cfg"}, "data": {"greeting": "hello"}}
    )
    await api.ok(
        "POST", f"{NS}/secrets", {"metadata": {"name": "creds"}, "stringData": {"pw": "s3cret"}}
    )
    await api.ok(
        "POST",
        f"{NS}/persistentvolumeclaims",
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    container = {
        "command": ["python", "-c", IN_CLUSTER],
        "env": [
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "pw"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "securityContext": {
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "data", "mountPath": "/data"},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    await api.ok(
        "POST",
        JOBS,
        job(
            "inside",
            container,
            securityContext={"runAsUser": 1234, "runAsGroup": 5678},
            volumes=[
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        ),
    )
    pod = await finished_pod(api, "inside")
    name = pod["metadata"]["name"]
    _, log = await api.get(f"{NS}/pods/{name}/log")
    assert pod["status"]["phase"] == "Succeeded", log
    lines = log.strip().split("\n")
    assert lines[0] == f"{name} True"
    assert lines[1] == "hello s3cret 1234 5678"
    assert lines[2] == "read-only root: 30"  # EROFS
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert terminated["message"] == "all good"
    written = cluster.claim_dir("default", "data") / "result.txt"
    assert written.read_text() == "written in a container"
    done = await api.wait_for(f"{JOBS}/inside", lambda j: j["status"].get("succeeded") == 1)
    assert done["status"]["succeeded"] == 1


async def test_exit_codes_and_logs_become_pod_and_job_status(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    _, api = pod_cluster
    script = "import sys; print('model not found: tiny'); sys.exit(3)"
    await api.ok(
        "POST",
        JOBS,
        job(
            "fails",
            {
                "command": ["python", "-c", script],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            },
        ),
    )
    pod = await finished_pod(api, "fails")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed"
    assert terminated["exitCode"] == 3 and terminated["reason"] == "Error"
    assert "model not found: tiny" in terminated["message"]
    failed = await api.wait_for(
        f"{JOBS}/fails",
        lambda j: any(c["type"] == "Failed" for c in j["status"].get("conditions") or []),
    )
    assert failed["status"]["failed"] == 1


async def test_an_image_not_in_the_store_waits_in_image_pull_back_off(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    _, api = pod_cluster
    await api.ok("POST", JOBS, job("absent", {"image": "registry.invalid/nothing:1"}))

    def reason_is(reason: str) -> Any:
        def check(items: dict[str, Any]) -> bool:
            for pod in items["items"]:
                for status in pod["status"].get("containerStatuses") or []:
                    if status["state"].get("waiting", {}).get("reason") == reason:
                        return True
            return False

        return check

    first = await api.wait_for(f"{NS}/pods", reason_is("ErrImagePull"), timeout=60)
    waiting = first["items"][0]["status"]["containerStatuses"][0]["state"]["waiting"]
    assert 'Failed to pull image "registry.invalid/nothing:1"' in waiting["message"]
    await api.wait_for(f"{NS}/pods", reason_is("ImagePullBackOff"), timeout=60)


async def test_a_deployment_serves_from_its_container_behind_a_service_name(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    _, api = pod_cluster
    # It binds "0.0.0.0" on the Service's own port: the shim binds the pod IP instead.
    server = http_server_container(
        command=["python", "-m", "http.server", "--bind", "0.0.0.0", "8080"],
        securityContext={"runAsUser": 65532, "capabilities": {"drop": ["ALL"]}},
    )
    await api.ok(
        "POST",
        DEPLOYMENTS,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [server]},
                },
            },
        },
    )
    await api.ok(
        "POST",
        f"{NS}/services",
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 8080, "targetPort": "http"}]},
        },
    )
    await api.wait_for(
        f"{DEPLOYMENTS}/web",
        lambda d: d.get("status", {}).get("availableReplicas") == 1,
        timeout=120,
    )
    fetch = (
        "import socket, urllib.request; "
        "print(socket.gethostbyname('web.default.svc.cluster.local')); "
        "print(urllib.request.urlopen('http://web.default.svc.cluster.local:8080/').status)"
    )
    await api.ok("POST", JOBS, job("client", {"command": ["python", "-c", fetch]}))
    pod = await finished_pod(api, "client")
    _, log = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    assert pod["status"]["phase"] == "Succeeded", log
    service = (await api.get(f"{NS}/services/web"))[1]
    assert log.strip().split("\n") == [service["spec"]["clusterIP"], "200"]


async def test_a_container_over_its_memory_limit_is_oom_killed(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    _, api = pod_cluster
    hog = "x = bytearray(512 * 1024 * 1024); print('survived')"
    await api.ok(
        "POST",
        JOBS,
        job(
            "hog",
            {"command": ["python", "-c", hog], "resources": {"limits": {"memory": "64Mi"}}},
        ),
    )
    pod = await finished_pod(api, "hog")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed"
    assert terminated["exitCode"] == 137 and terminated["reason"] == "OOMKilled"


RECORDER = """
import http.server, json, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
host = os.environ["KYAI_DEVCLUSTER_POD_IP"]
print(json.dumps({"argv": sys.argv[1:], "host": host, "uid": os.getuid()}), flush=True)
http.server.HTTPServer((host, port), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


async def test_an_engine_image_runs_the_stand_in_in_the_stand_in_image(
    tmp_path: Path, podman_image: str, standin_image: str
) -> None:
    engine = {
        "name": "engine",
        "image": "lmsysorg/sglang:v0.4.6",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "30000"],
        "readinessProbe": {"httpGet": {"path": "/", "port": 30000}, "periodSeconds": 1},
        "securityContext": {"runAsUser": 65532},
    }
    async with (
        DevCluster(
            workdir=tmp_path / "work",
            runtime="podman",
            image=podman_image,
            standin_image=standin_image,
            engine_command=("python", "-c", RECORDER, "stand-in"),
        ) as cluster,
        aiohttp.ClientSession() as session,
    ):
        api = Api(session, cluster.url)
        await api.ok(
            "POST",
            DEPLOYMENTS,
            {
                "metadata": {"name": "sglang"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "sglang"}},
                    "template": {
                        "metadata": {"labels": {"app": "sglang"}},
                        "spec": {"containers": [engine]},
                    },
                },
            },
        )
        available = await api.wait_for(
            f"{DEPLOYMENTS}/sglang",
            lambda d: d.get("status", {}).get("availableReplicas") == 1,
            timeout=120,
        )
        assert available["status"]["readyReplicas"] == 1
        pods = (await api.ok("GET", f"{NS}/pods"))["items"]
        _, log = await api.get(f"{NS}/pods/{pods[0]['metadata']['name']}/log")
        record = json.loads(log.splitlines()[0])
        assert record["argv"] == [
            "stand-in", "python3", "-m", "sglang.launch_server", "--model-path",
            "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--port", "30000",
        ]  # fmt: skip
        assert record["host"] == pods[0]["status"]["podIP"] and record["uid"] == 65532


def test_the_cli_serves_with_the_podman_runtime(
    tmp_path: Path, podman_image: str, standin_image: str
) -> None:
    import os
    import signal
    import sys

    import yaml

    kyai = str(Path(sys.executable).parent / "kyai")
    with subprocess.Popen(
        [
            kyai, "devcluster", "--runtime", "podman", "--image", podman_image,
            "--standin-image", standin_image, "--workdir", str(tmp_path / "work"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            lines = [process.stdout.readline() for _ in range(3)]
            assert lines[0].startswith("kyai devcluster serving at http://127.0.0.1:"), lines
            assert lines[1].startswith("in-cluster HTTPS at https://127.0.0.1:"), lines
            assert lines[2].strip() == "runtime: podman", lines
            config = yaml.safe_load((tmp_path / "work" / "kubeconfig").read_text())
            assert config["clusters"][0]["cluster"]["server"] == lines[0].split()[-1]
        finally:
            os.kill(process.pid, signal.SIGTERM)
            assert process.wait(timeout=30) == 0


async def test_pull_policy_never_with_an_absent_image_says_so(
    pod_cluster: tuple[DevCluster, Api],
) -> None:
    _, api = pod_cluster
    await api.ok(
        "POST",
        JOBS,
        job("never", {"image": "registry.invalid/nothing:2", "imagePullPolicy": "Never"}),
    )
    listing = await api.wait_for(
        f"{NS}/pods",
        lambda items: any(
            (s["state"].get("waiting") or {}).get("reason") == "ErrImageNeverPull"
            for p in items["items"]
            for s in p["status"].get("containerStatuses") or []
        ),
        timeout=60,
    )
    waiting = listing["items"][0]["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == (
        'Container image "registry.invalid/nothing:2" is not present with pull policy of Never'
    )
