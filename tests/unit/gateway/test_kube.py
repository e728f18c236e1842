"""How the gateway finds the API server: in a pod, or from a kubeconfig."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

from kyai.gateway import (
    MIN_TOKEN_EXPIRATION_SECONDS,
    TOKEN_MOUNT_PATH,
    ApiServerConfig,
    ClusterConfigError,
    GatewayMetrics,
    token_mount,
    token_volume,
)


def test_in_a_pod_the_mounted_account_is_used(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("ca")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    config = ApiServerConfig.in_cluster(env, tmp_path)
    assert config == ApiServerConfig(
        server="https://10.96.0.1:443",
        ca_file=str(tmp_path / "ca.crt"),
        token_file=str(tmp_path / "token"),
    )
    ipv6 = ApiServerConfig.in_cluster({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, tmp_path)
    assert ipv6 is not None and ipv6.server == "https://[fd00::1]:443"
    assert ApiServerConfig.in_cluster({}, tmp_path) is None
    assert ApiServerConfig.in_cluster(env, tmp_path / "nowhere") is None


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_a_kubeconfig_gives_server_token_and_ca(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    path = kubeconfig(
        tmp_path / "config",
        {"server": "https://127.0.0.1:6443/", "certificate-authority-data": ca},
        {"token": "sa-token"},
    )
    config = ApiServerConfig.from_kubeconfig(str(path))
    assert (config.server, config.token, config.verify_tls) == (
        "https://127.0.0.1:6443",
        "sa-token",
        True,
    )
    assert config.ca_file is not None and Path(config.ca_file).read_bytes().startswith(b"-----")
    insecure = kubeconfig(
        tmp_path / "insecure",
        {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
        {"token": "t"},
    )
    context = ApiServerConfig.from_kubeconfig(str(insecure)).ssl_context()
    assert context is not None and context.verify_mode == ssl.CERT_NONE
    assert ApiServerConfig(server="http://127.0.0.1:1").ssl_context() is None


def test_an_unusable_kubeconfig_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(ClusterConfigError, match=str(missing)):
        ApiServerConfig.from_kubeconfig(str(missing))
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with pytest.raises(ClusterConfigError, match="broken"):
        ApiServerConfig.from_kubeconfig(str(broken))


def test_the_worker_token_volume_validates_as_part_of_a_pod() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    volume = token_volume(expiration_seconds=900)
    source = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert source == {"audience": "kyai-judge-gateway", "expirationSeconds": 900, "path": "token"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "judge"},
        "spec": {
            "containers": [{"name": "judge", "image": "kyai", "volumeMounts": [token_mount()]}],
            "volumes": [volume],
        },
    }
    kubernetes_validate.validate(pod, "1.32.0", strict=True)
    assert token_mount()["mountPath"] == TOKEN_MOUNT_PATH
    with pytest.raises(ValueError, match="at least 600 s"):
        token_volume(expiration_seconds=MIN_TOKEN_EXPIRATION_SECONDS - 1)


def test_metrics_families_and_their_labels() -> None:
    metrics = GatewayMetrics(in_flight=lambda: {"team-b": 2, "team-a": 0})
    metrics.answered("team-a", 200)
    metrics.answered("team-a", 200)
    metrics.answered("unknown", 401)
    metrics.usage("team-a", {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107})
    metrics.usage("team-a", {"prompt_tokens": True, "completion_tokens": -1})
    metrics.usage("team-a", None)
    metrics.review("accepted")
    metrics.overhead.observe(0.0012)
    text = metrics.exposition().decode()
    for line in (
        'kyai_judge_gateway_requests_total{code="200",namespace="team-a"} 2.0',
        'kyai_judge_gateway_requests_total{code="401",namespace="unknown"} 1.0',
        'kyai_judge_gateway_tokens_total{kind="prompt",namespace="team-a"} 100.0',
        'kyai_judge_gateway_tokens_total{kind="completion",namespace="team-a"} 7.0',
        'kyai_judge_gateway_token_reviews_total{result="accepted"} 1.0',
        'kyai_judge_gateway_in_flight_requests{namespace="team-b"} 2.0',
        'kyai_judge_gateway_in_flight_requests{namespace="team-a"} 0.0',
        'kyai_judge_gateway_overhead_seconds_bucket{le="0.002"} 1.0',
        "# TYPE kyai_judge_gateway_requests_total counter",
    ):
        assert line in text, line
    assert "kyai_evaluation" not in text and "python_gc" not in text  # its own registry
