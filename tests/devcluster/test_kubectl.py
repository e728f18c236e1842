"""The real ``kubectl`` against ``kyai devcluster`` (the issue's acceptance scenario)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from devcluster.helpers import KUBECTL, WIDGET_CRD, widget
from kyai import __version__
from kyai_devcluster import DevClusterThread

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def manifest(*objects: object) -> str:
    return yaml.safe_dump_all(objects)


@pytest.fixture(scope="module")
def widgets_ready(kubectl: Kubectl) -> None:
    result = kubectl("apply", "-f", "-", stdin=manifest(WIDGET_CRD))
    assert (
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created" in result.stdout
    )


def test_apply_get_patch_delete_custom_object(kubectl: Kubectl, widgets_ready: None) -> None:
    result = kubectl("apply", "-f", "-", stdin=manifest(widget("w1", size=3)))
    assert result.stdout.strip() == "widget.example.com/w1 created"

    table = kubectl("get", "widgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "SIZE", "PHASE", "AGE"]
    assert table[1].split()[:2] == ["w1", "3"]
    assert kubectl("get", "wd", "w1", "-o", "jsonpath={.spec.color}").stdout == "red"

    kubectl("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"size":5}}')
    kubectl(
        "patch",
        "widget",
        "w1",
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/color","value":"blue"}]',
    )
    kubectl(
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Ready"}}',
    )
    shown = json.loads(kubectl("get", "widget", "w1", "-o", "json").stdout)
    assert shown["spec"]["size"] == 5 and shown["spec"]["color"] == "blue"
    assert shown["status"] == {"phase": "Ready"}
    assert shown["metadata"]["generation"] == 3
    assert kubectl("get", "widgets", "--no-headers").stdout.split()[:3] == ["w1", "5", "Ready"]

    reapplied = kubectl("apply", "-f", "-", stdin=manifest(widget("w1", size=4)))
    assert reapplied.stdout.strip() == "widget.example.com/w1 configured"
    assert kubectl("get", "wd", "w1", "-o", "jsonpath={.spec.size}").stdout == "4"

    deleted = kubectl("delete", "widget", "w1")
    assert deleted.stdout.strip() == 'widget.example.com "w1" deleted'
    missing = kubectl("get", "widget", "w1", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_schema_violations_are_reported_by_field(kubectl: Kubectl, widgets_ready: None) -> None:
    bad = kubectl(
        "apply", "-f", "-", stdin=manifest(widget("bad", size=30, color="green")), check=False
    )
    assert bad.returncode != 0
    assert 'The Widget "bad" is invalid' in bad.stderr
    assert "spec.size" in bad.stderr and "spec.color" in bad.stderr
    unknown = kubectl("apply", "-f", "-", stdin=manifest(widget("unk", typo=1)), check=False)
    assert unknown.returncode != 0
    assert 'unknown field "spec.typo"' in unknown.stderr


def test_get_watch_follows_changes(
    kubectl: Kubectl, widgets_ready: None, thread_cluster: DevClusterThread, tmp_path: Path
) -> None:
    assert KUBECTL is not None
    kubectl("apply", "-f", "-", stdin=manifest(widget("watched", size=1)))
    command = [
        KUBECTL,
        "--kubeconfig",
        str(thread_cluster.kubeconfig_path),
        "--cache-dir",
        str(tmp_path / "cache"),
        "get",
        "widgets",
        "-w",
    ]
    watcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 15
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        kubectl("patch", "widget", "watched", "--type=merge", "-p", '{"spec":{"size":2}}')
        kubectl(
            "patch",
            "widget",
            "watched",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Done"}}',
        )
        while len(lines) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.terminate()
        watcher.communicate(timeout=10)
        reader.join(5)
    rows = [line.split() for line in lines]
    assert rows[0] == ["NAME", "SIZE", "PHASE", "AGE"]
    assert rows[1][:2] == ["watched", "1"]
    assert rows[2][:2] == ["watched", "2"]
    assert rows[3][:3] == ["watched", "2", "Done"]


def test_job_of_project_image_runs_and_logs(kubectl: Kubectl) -> None:
    jobs = manifest(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "kyai-version"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "kyai",
                                "image": "ghcr.io/kyai-io/kyai-operator:latest",
                                "command": ["kyai", "--version"],
                            }
                        ],
                    }
                }
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "broken"},
            "spec": {
                "backoffLimit": 1,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "kyai-operator:dev",
                                "command": ["sh", "-c", "echo broken >&2; exit 1"],
                            }
                        ],
                    }
                },
            },
        },
    )
    kubectl("apply", "-f", "-", stdin=jobs)
    kubectl("wait", "--for=condition=complete", "job/kyai-version", "--timeout=30s")
    status = json.loads(kubectl("get", "job", "kyai-version", "-o", "json").stdout)["status"]
    assert status["succeeded"] == 1
    assert kubectl("logs", "job/kyai-version").stdout.strip() == f"kyai {__version__}"

    kubectl("wait", "--for=condition=failed", "job/broken", "--timeout=30s")
    broken = json.loads(kubectl("get", "job", "broken", "-o", "json").stdout)["status"]
    assert broken["failed"] == 2
    reason = next(c["reason"] for c in broken["conditions"] if c["type"] == "Failed")
    assert reason == "BackoffLimitExceeded"
    assert "broken" in kubectl("logs", "job/broken").stdout
    listing = kubectl("get", "jobs").stdout
    assert "Complete" in listing and "Failed" in listing


def test_builtin_kinds_through_kubectl(kubectl: Kubectl) -> None:
    objects = manifest(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "play"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "play"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": "kyai-operator:dev",
                                "command": ["python", "-c", "import time; time.sleep(600)"],
                            }
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "play"},
            "data": {"a": "1"},
        },
    )
    kubectl("apply", "-f", "-", stdin=objects)
    kubectl("-n", "play", "rollout", "status", "deployment/web", "--timeout=20s")
    kubectl("-n", "play", "scale", "deployment/web", "--replicas=3")
    kubectl(
        "-n",
        "play",
        "wait",
        "--for=jsonpath={.status.availableReplicas}=3",
        "deployment/web",
        "--timeout=20s",
    )
    pods = kubectl("-n", "play", "get", "pods", "--no-headers").stdout.splitlines()
    assert len(pods) == 3 and all("Running" in line for line in pods)
    kubectl("-n", "play", "patch", "configmap", "cfg", "-p", '{"data":{"b":"2"}}')
    data = json.loads(kubectl("-n", "play", "get", "cm", "cfg", "-o", "json").stdout)["data"]
    assert data == {"a": "1", "b": "2"}
    kubectl("delete", "namespace", "play", "--timeout=20s")
    assert "play" not in kubectl("get", "namespaces").stdout
