"""Protobuf bodies of typed clients: Secrets, ConfigMaps, DeleteOptions (kubectl, helm)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kyai_devcluster import DevClusterThread
from kyai_devcluster._protobuf import MAGIC, decode

REPO = Path(__file__).resolve().parents[2]
HELM = shutil.which("helm") or str(REPO / ".venv/bin/helm")


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(key: str, value: bytes) -> bytes:
    return _field(1, key.encode()) + _field(2, value)


def test_decode_a_secret_envelope() -> None:
    meta = (
        _field(1, b"creds")
        + _field(3, b"team-a")
        + _field(11, _entry("owner", b"helm"))
        + _field(12, _entry("note", b"x"))
        + _field(14, b"example.com/keep")
    )
    secret = _field(1, meta) + _field(2, _entry("token", b"\x00\x01s3")) + _field(3, b"Opaque")
    type_meta = _field(1, b"v1") + _field(2, b"Secret")
    raw = MAGIC + _field(1, type_meta) + _field(2, secret)
    assert decode(raw) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "creds",
            "namespace": "team-a",
            "labels": {"owner": "helm"},
            "annotations": {"note": "x"},
            "finalizers": ["example.com/keep"],
        },
        "data": {"token": "AAFzMw=="},
        "type": "Opaque",
    }
    unknown = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Pod")) + _field(2, b"")
    assert decode(unknown) is None
    with pytest.raises(ValueError, match="no k8s"):
        decode(b"{}")


def test_kubectl_create_secret_and_configmap(
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    kubectl("create", "secret", "generic", "pb-secret", "--from-literal=key=value")
    kubectl("create", "configmap", "pb-config", "--from-literal=a=1", "--from-literal=b=2")
    got = kubectl("get", "secret", "pb-secret", "-o", "jsonpath={.data.key}").stdout
    assert got == "dmFsdWU="
    got = kubectl("get", "configmap", "pb-config", "-o", "jsonpath={.data}").stdout
    assert got == '{"a":"1","b":"2"}'
    # The namespace and service account a README creates imperatively.
    kubectl("create", "namespace", "pb-ns")
    got = kubectl("get", "namespace", "pb-ns", "-o", "jsonpath={.metadata.name}").stdout
    assert got == "pb-ns"
    kubectl("create", "serviceaccount", "pb-sa", "-n", "pb-ns")
    got = kubectl("get", "sa", "pb-sa", "-n", "pb-ns", "-o", "jsonpath={.metadata.namespace}")
    assert got.stdout == "pb-ns"
    # Kinds without a decoder still say what to do instead.
    refused = kubectl("create", "deployment", "pb-deploy", "--image=x", check=False)
    assert refused.returncode != 0 and "kubectl apply -f" in refused.stderr


@pytest.mark.skipif(not Path(HELM).exists(), reason="helm is not installed (make setup)")
def test_helm_install_list_and_uninstall(
    thread_cluster: DevClusterThread,
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    def helm(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [HELM, *args, "--kubeconfig", str(thread_cluster.kubeconfig_path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result

    chart = str(REPO / "charts/kyai-operator")
    helm("install", "kyai", chart, "-n", "helm-test", "--create-namespace", "--wait")
    assert "deployed" in helm("list", "-n", "helm-test").stdout
    releases = kubectl("get", "secrets", "-n", "helm-test", "-l", "owner=helm", "-o", "name")
    assert releases.stdout.strip() == "secret/sh.helm.release.v1.kyai.v1"
    kubectl("get", "clusterrole", "kyai-kyai-operator")
    helm("uninstall", "kyai", "-n", "helm-test")
    assert "kyai" not in helm("list", "-A").stdout
    gone = kubectl("get", "clusterrole", "kyai-kyai-operator", check=False)
    assert gone.returncode != 0


def test_decode_a_namespace_and_a_service_account() -> None:
    namespace = _field(1, _field(1, b"team-b") + _field(11, _entry("tier", b"eval")))
    namespace += _field(2, _field(1, b"kubernetes"))
    raw = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Namespace")) + _field(2, namespace)
    assert decode(raw) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-b", "labels": {"tier": "eval"}},
        "spec": {"finalizers": ["kubernetes"]},
    }
    account = _field(1, _field(1, b"runner") + _field(3, b"team-b"))
    account += _field(3, _field(1, b"regcred")) + bytes([4 << 3, 0])
    raw = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"ServiceAccount")) + _field(2, account)
    assert decode(raw) == {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "runner", "namespace": "team-b"},
        "imagePullSecrets": [{"name": "regcred"}],
        "automountServiceAccountToken": False,
    }
