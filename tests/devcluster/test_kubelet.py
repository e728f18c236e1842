"""The simulated kubelet and controllers: Jobs as local processes, Deployments, claims."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.helpers import IMAGE, Api, job
from kyai import __version__
from kyai_devcluster import DevCluster

NS = "/api/v1/namespaces/default"
JOBS = "/apis/batch/v1/namespaces/default/jobs"


def http_server_container(port: int = 8080, **extra: Any) -> dict[str, Any]:
    """A container of the project's image serving HTTP on its pod IP, with a readiness probe."""
    return {
        "name": "web",
        "image": IMAGE,
        "command": ["python", "-m", "http.server", "--bind", "$(POD_IP)", str(port)],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": port}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
        **extra,
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in (obj.get("status") or {}).get("conditions") or []
            if c["type"] == kind and c["status"] == "True"
        ),
        None,
    )


async def finished(api: Api, name: str) -> dict[str, Any]:
    return await api.wait_for(  # type: ignore[no-any-return]
        f"{JOBS}/{name}",
        lambda j: condition(j, "Complete") is not None or condition(j, "Failed") is not None,
        timeout=30,
    )


async def pods_of(api: Api, name: str) -> list[dict[str, Any]]:
    listing = await api.ok("GET", f"{NS}/pods", params={"labelSelector": f"job-name={name}"})
    return listing["items"]  # type: ignore[no-any-return]


async def test_job_running_kyai_version_succeeds_with_logs(api: Api) -> None:
    await api.ok("POST", JOBS, job("version", args=["--version"]))
    done = await finished(api, "version")
    assert condition(done, "Complete") is not None
    assert condition(done, "SuccessCriteriaMet") is not None
    assert done["status"]["succeeded"] == 1 and "failed" not in done["status"]
    assert done["status"]["completionTime"] and done["status"]["startTime"]
    pods = await pods_of(api, "version")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == done["metadata"]["uid"]
    status, logs = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    assert status == 200 and logs.strip() == f"kyai {__version__}"
    events = await api.ok(
        "GET",
        f"{NS}/events",
        params={"fieldSelector": f"involvedObject.uid={done['metadata']['uid']}"},
    )
    assert {"SuccessfulCreate", "Completed"} <= {e["reason"] for e in events["items"]}


async def test_failing_job_retries_up_to_backoff_limit(api: Api) -> None:
    await api.ok(
        "POST", JOBS, job("fails", backoff=2, command=["sh", "-c", "echo attempt; exit 3"])
    )
    done = await finished(api, "fails")
    failed = condition(done, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert condition(done, "FailureTarget") is not None
    assert done["status"]["failed"] == 3 and "succeeded" not in done["status"]
    pods = await pods_of(api, "fails")
    assert len(pods) == 3
    for pod in pods:
        assert pod["status"]["phase"] == "Failed"
        state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert state["exitCode"] == 3 and state["reason"] == "Error"
        _, logs = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
        assert logs == "attempt\n"


def failure_policy(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"rules": list(rules)}


def on_exit_codes(action: str, *values: int, operator: str = "In") -> dict[str, Any]:
    """A rule on the ``main`` container's exit codes (the helper's one container)."""
    return {
        "action": action,
        "onExitCodes": {"containerName": "main", "operator": operator, "values": list(values)},
    }


async def test_a_fail_job_rule_fails_the_job_at_its_first_pod(api: Api) -> None:
    body = job("usage", backoff=2, command=["sh", "-c", "echo bad input; exit 3"])
    body["spec"]["podFailurePolicy"] = failure_policy(on_exit_codes("FailJob", 2, 3))
    await api.ok("POST", JOBS, body)
    done = await finished(api, "usage")
    (pod,) = await pods_of(api, "usage")  # not retried, whatever the backoff limit
    said = (
        f"Container main for pod default/{pod['metadata']['name']} failed with exit code 3 "
        "matching FailJob rule at index 0"
    )
    for kind in ("FailureTarget", "Failed"):
        failed = condition(done, kind)
        assert failed is not None and (failed["reason"], failed["message"]) == (
            "PodFailurePolicy", said
        ), done["status"]  # fmt: skip
    assert done["status"]["failed"] == 1 and "succeeded" not in done["status"]
    assert pod["status"]["phase"] == "Failed"
    events = await api.ok(
        "GET", f"{NS}/events",
        params={"fieldSelector": f"involvedObject.uid={done['metadata']['uid']}"},
    )  # fmt: skip
    assert ("PodFailurePolicy", said) in {(e["reason"], e["message"]) for e in events["items"]}


async def test_exit_codes_no_rule_names_are_retried_up_to_the_backoff_limit(api: Api) -> None:
    body = job("crash", backoff=2, command=["sh", "-c", "exit 1"])
    body["spec"]["podFailurePolicy"] = failure_policy(on_exit_codes("FailJob", 2, 3))
    await api.ok("POST", JOBS, body)
    done = await finished(api, "crash")
    failed = condition(done, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", done["status"]
    assert done["status"]["failed"] == 3
    assert len(await pods_of(api, "crash")) == 3


async def test_an_ignore_rule_does_not_count_the_failure(api: Api, tmp_path: Path) -> None:
    # The first pod exits 3 (ignored: no retry is left with backoffLimit 0), the second 0.
    marker = tmp_path / "tried"
    script = f"if [ -e {marker} ]; then exit 0; fi; touch {marker}; exit 3"
    body = job("flaky", backoff=0, command=["sh", "-c", script])
    body["spec"]["podFailurePolicy"] = failure_policy(
        on_exit_codes("Count", 1), on_exit_codes("Ignore", 3)
    )
    await api.ok("POST", JOBS, body)
    done = await finished(api, "flaky")
    assert condition(done, "Complete") is not None, done["status"]
    assert done["status"]["succeeded"] == 1 and "failed" not in done["status"]
    phases = sorted(pod["status"]["phase"] for pod in await pods_of(api, "flaky"))
    assert phases == ["Failed", "Succeeded"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"restartPolicy": "OnFailure"},
            "spec.template.spec.restartPolicy",
            'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy is '
            "specified",
        ),
        (
            {"values": [0, 3]},
            "spec.podFailurePolicy.rules[0].onExitCodes.values[0]",
            "Invalid value: 0: must not be 0 for the In operator",
        ),
        (
            {"values": [3, 2]},
            "spec.podFailurePolicy.rules[0].onExitCodes.values",
            "Invalid value: []int32{3, 2}: must be ordered",
        ),
        (
            {"values": [3, 3]},
            "spec.podFailurePolicy.rules[0].onExitCodes.values[1]",
            "Duplicate value: 3",
        ),
        (
            {"action": "Retry"},
            "spec.podFailurePolicy.rules[0].action",
            'Unsupported value: "Retry": supported values: "Count", "FailIndex", "FailJob", '
            '"Ignore"',
        ),
        (
            {"action": "FailIndex"},
            "spec.podFailurePolicy.rules[0].action",
            'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set',
        ),
        (
            {"containerName": "other"},
            "spec.podFailurePolicy.rules[0].onExitCodes.containerName",
            'Invalid value: "other": must be one of the container or initContainer names in '
            "the pod template",
        ),
        (
            {"onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            "spec.podFailurePolicy.rules[0]",
            "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
        ),
        (
            {"onExitCodes": None},
            "spec.podFailurePolicy.rules[0]",
            "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
        ),
    ],
    ids=["restart-on-failure", "in-0", "unordered", "duplicate", "action", "fail-index",
         "container", "both", "neither"],
)  # fmt: skip
async def test_a_pod_failure_policy_is_validated_as_kubernetes_does(
    api: Api, change: dict[str, Any], field: str, message: str
) -> None:
    body = job("invalid", command=["true"])
    rule = on_exit_codes("FailJob", 2, 3)
    body["spec"]["podFailurePolicy"] = failure_policy(rule)
    for key, value in change.items():
        if key == "restartPolicy":
            body["spec"]["template"]["spec"][key] = value
        elif key in ("action", "onPodConditions", "onExitCodes"):
            rule[key] = value
            if value is None:
                del rule[key]
        else:
            rule["onExitCodes"][key] = value
    status, refused = await api.post(JOBS, body)
    assert status == 422, refused
    causes = [(c["field"], c["message"]) for c in refused["details"]["causes"]]
    assert causes == [(field, message)], causes
    assert refused["message"] == f'Job.batch "invalid" is invalid: {field}: {message}'


async def test_other_images_fail_with_a_clear_reason(api: Api) -> None:
    await api.ok(
        "POST", JOBS, job("foreign", backoff=4, image="busybox:1.36", command=["echo", "hi"])
    )
    done = await finished(api, "foreign")
    failed = condition(done, "Failed")
    assert failed is not None and failed["reason"] == "UnsupportedImage"
    assert '"busybox:1.36"' in failed["message"]
    pods = await pods_of(api, "foreign")
    assert len(pods) == 1 and pods[0]["status"]["reason"] == "UnsupportedImage"


async def test_missing_command_is_a_start_error(api: Api) -> None:
    await api.ok("POST", JOBS, job("nocmd", command=["no-such-binary-here"]))
    done = await finished(api, "nocmd")
    assert condition(done, "Failed") is not None
    pod = (await pods_of(api, "nocmd"))[0]
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["reason"] == "StartError" and "no-such-binary-here" in state["message"]


async def test_active_deadline_kills_the_process(api: Api) -> None:
    body = job("slow", command=["sleep", "30"])
    body["spec"]["activeDeadlineSeconds"] = 1
    await api.ok("POST", JOBS, body)
    done = await finished(api, "slow")
    failed = condition(done, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    await api.wait_for(
        f"{NS}/pods",
        lambda listing: (
            not [p for p in listing["items"] if p["metadata"]["labels"].get("job-name") == "slow"]
        ),
    )


async def grant_default_account(api: Api, resource: str, verbs: list[str]) -> None:
    """Let the ``default`` service account of ``default`` use ``resource`` (RBAC)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    name = f"default-{resource}"
    await api.ok(
        "POST",
        f"{rbac}/roles",
        {
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": [resource], "verbs": verbs}],
        },
    )
    await api.ok(
        "POST",
        f"{rbac}/rolebindings",
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
        },
    )


async def test_env_volumes_and_api_access(api: Api, cluster: DevCluster) -> None:
    # Pod processes authenticate as their service account: grant what the script reads.
    await grant_default_account(api, "configmaps", ["get"])
    await api.ok(
        "POST",
        f"{NS}/configmaps",
        {"metadata": {"name": "settings"}, "data": {"mode": "fast", "conf.txt": "x=1"}},
    )
    await api.ok(
        "POST",
        f"{NS}/secrets",
        {"metadata": {"name": "creds"}, "data": {"token": base64.b64encode(b"s3cr3t").decode()}},
    )
    await api.ok(
        "POST",
        f"{NS}/persistentvolumeclaims",
        {
            "metadata": {"name": "results"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    claim = await api.wait_for(
        f"{NS}/persistentvolumeclaims/results",
        lambda c: c.get("status", {}).get("phase") == "Bound",
    )
    assert claim["status"]["capacity"] == {"storage": "1Gi"}
    script = (
        "import json, os, pathlib, sys\n"
        "from kubernetes import client, config\n"
        "config.load_kube_config()\n"
        "cm = client.CoreV1Api().read_namespaced_config_map('settings', 'default')\n"
        "out = pathlib.Path(sys.argv[1])\n"
        "out.write_text(json.dumps({\n"
        "  'mode': os.environ['MODE'], 'token': os.environ['TOKEN'],\n"
        "  'pod': os.environ['POD_NAME'], 'ns': os.environ['POD_NS'],\n"
        "  'greeting': os.environ['GREETING'], 'prefixed': os.environ['CFG_mode'],\n"
        "  'conf': pathlib.Path(os.environ['CONF_DIR'], 'conf.txt').read_text(),\n"
        "  'secret_file': pathlib.Path('/etc/creds/token').read_text(),\n"
        "  'via_api': cm.data['mode'],\n"
        "}))\n"
    )
    writer = job(
        "writer",
        command=["python", "-c", script, "/results/out.json"],
        env=[
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "GREETING", "value": "hello $(MODE)"},
            {"name": "CONF_DIR", "value": "/etc/settings"},
        ],
        envFrom=[{"prefix": "CFG_", "configMapRef": {"name": "settings"}}],
        volumeMounts=[
            {"name": "results", "mountPath": "/results"},
            {"name": "settings", "mountPath": "/etc/settings"},
            {"name": "creds", "mountPath": "/etc/creds"},
        ],
        volumes=[
            {"name": "results", "persistentVolumeClaim": {"claimName": "results"}},
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "creds"}},
        ],
    )
    await api.ok("POST", JOBS, writer)
    done = await finished(api, "writer")
    pod = (await pods_of(api, "writer"))[0]
    _, logs = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    assert condition(done, "Complete") is not None, logs

    reader = job(
        "reader",
        command=["cat", "/data/out.json"],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "results"}}],
    )
    await api.ok("POST", JOBS, reader)
    done = await finished(api, "reader")
    assert condition(done, "Complete") is not None
    pod = (await pods_of(api, "reader"))[0]
    _, logs = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    written = json.loads(logs)
    assert written == {
        "mode": "fast",
        "token": "s3cr3t",
        "pod": written["pod"],
        "ns": "default",
        "greeting": "hello fast",
        "prefixed": "fast",
        "conf": "x=1",
        "secret_file": "s3cr3t",
        "via_api": "fast",
    }
    assert written["pod"].startswith("writer-")
    assert (cluster.claim_dir("default", "results") / "out.json").exists()


async def test_missing_config_map_keeps_pod_pending_until_it_exists(api: Api) -> None:
    body = job(
        "waits",
        command=["sh", "-c", "echo $VALUE"],
        env=[{"name": "VALUE", "valueFrom": {"configMapKeyRef": {"name": "later", "key": "v"}}}],
    )
    await api.ok("POST", JOBS, body)
    pod = (
        await api.wait_for(
            f"{NS}/pods",
            lambda listing: any(
                (c.get("state", {}).get("waiting") or {}).get("reason")
                == "CreateContainerConfigError"
                for p in listing["items"]
                for c in p.get("status", {}).get("containerStatuses", [])
            ),
        )
    )["items"][0]
    assert pod["status"]["phase"] == "Pending"
    await api.ok("POST", f"{NS}/configmaps", {"metadata": {"name": "later"}, "data": {"v": "ok"}})
    done = await finished(api, "waits")
    assert condition(done, "Complete") is not None
    _, logs = await api.get(f"{NS}/pods/{pod['metadata']['name']}/log")
    assert logs == "ok\n"


async def test_deleting_a_job_kills_and_removes_its_pods(api: Api, cluster: DevCluster) -> None:
    await api.ok(
        "POST", JOBS, job("forever", command=[sys.executable, "-c", "import time; time.sleep(60)"])
    )
    await api.wait_for(
        f"{NS}/pods",
        lambda listing: any(p["status"].get("phase") == "Running" for p in listing["items"]),
    )
    pod = (await pods_of(api, "forever"))[0]["metadata"]["name"]
    assert cluster.kubelet.is_running("default", pod, "main")
    await api.ok("DELETE", f"{JOBS}/forever", {"propagationPolicy": "Background"})
    await api.wait_for(f"{NS}/pods", lambda listing: not listing["items"])
    await api.wait_for("/version", lambda _: not cluster.kubelet.is_running("default", pod, "main"))


async def test_deployment_gets_ready_pods(api: Api) -> None:
    deployments = "/apis/apps/v1/namespaces/default/deployments"
    await api.ok(
        "POST",
        deployments,
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
    ready = await api.wait_for(
        f"{deployments}/web",
        lambda d: d.get("status", {}).get("availableReplicas") == 2,
        timeout=30,
    )
    assert ready["status"]["readyReplicas"] == 2
    assert ready["status"]["observedGeneration"] == 1
    available = next(c for c in ready["status"]["conditions"] if c["type"] == "Available")
    assert available["status"] == "True"
    pods = (await api.ok("GET", f"{NS}/pods", params={"labelSelector": "app=web"}))["items"]
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    addresses = {p["status"]["podIP"] for p in pods}
    assert len(addresses) == 2 and all(a.startswith("127.10.") for a in addresses)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)

    await api.ok(
        "PATCH",
        f"{deployments}/web",
        {"spec": {"replicas": 1}},
        content_type="application/merge-patch+json",
    )
    await api.wait_for(
        f"{deployments}/web",
        lambda d: d["status"].get("replicas") == 1 and d["status"]["observedGeneration"] == 2,
    )
    await api.ok("DELETE", f"{deployments}/web")
    await api.wait_for(f"{NS}/pods", lambda listing: not listing["items"])
    await api.wait_for(
        "/apis/apps/v1/namespaces/default/replicasets", lambda listing: not listing["items"]
    )


async def test_stop_kills_running_processes(tmp_path: Path) -> None:
    async with DevCluster(workdir=tmp_path) as cluster, aiohttp.ClientSession() as session:
        api = Api(session, cluster.url)
        await api.ok(
            "POST",
            f"{NS}/persistentvolumeclaims",
            {
                "metadata": {"name": "pid"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Mi"}},
                },
            },
        )
        await api.ok(
            "POST",
            JOBS,
            job(
                "sleeper",
                # "$$$$" is the shell's "$$" once the kubelet has unescaped "$$" to "$".
                command=["sh", "-c", "echo $$$$ > /out/pid; exec sleep 60"],
                volumeMounts=[{"name": "out", "mountPath": "/out"}],
                volumes=[{"name": "out", "persistentVolumeClaim": {"claimName": "pid"}}],
            ),
        )
        pid_file = cluster.claim_dir("default", "pid") / "pid"
        await api.wait_for("/version", lambda _: pid_file.exists() and pid_file.read_text())
        pid = int(pid_file.read_text())
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_kubelet_paths_survive_a_tmp_mount(api: Api) -> None:
    """A pod with an emptyDir at /tmp still reaches the API through its kubeconfig."""
    script = (
        "import os, pathlib, sys; "
        "ok = pathlib.Path(os.environ['KUBECONFIG']).is_file() and "
        "pathlib.Path(os.environ['HOME']).is_dir(); "
        "pathlib.Path('/tmp/probe').write_text('x'); "
        "sys.exit(0 if ok else 3)"
    )
    # "python3" from PATH: an interpreter path under /tmp would itself be remapped.
    body = job("tmpmount", command=["python3", "-c", script])
    container = body["spec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    body["spec"]["template"]["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    await api.ok("POST", JOBS, body)
    done = await finished(api, "tmpmount")
    assert condition(done, "Complete") is not None, done["status"]
