"""A Workload's engine Deployment and Service, and the helpers every child manifest uses."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.builders import (
    ManifestError,
    dns_label,
    engine_name,
    label_value,
    owner_reference,
    spec_hash,
    worker_security_context,
    workload_deployment,
    workload_endpoint,
    workload_service,
)
from kyai.constants import ANNOTATION_ENGINE_ARGS_HASH, ANNOTATION_SPEC_HASH, LABEL_WORKLOAD
from kyai.settings import OperatorSettings

SETTINGS = OperatorSettings()
OWNER = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "Workload",
    "metadata": {"name": "qwen", "namespace": "team-a", "uid": "0c9e-4d2f"},
}
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def spec(**fields: Any) -> WorkloadSpec:
    base: dict[str, Any] = {"framework": "vllm", "model": "Qwen/Qwen3-8B"}
    return WorkloadSpec.model_validate({**base, **fields})


def eas(**args: Any) -> EngineArgsSetSpec:
    return EngineArgsSetSpec.model_validate({"framework": "vllm", "args": args})


def deployment(workload: WorkloadSpec, engine_args: EngineArgsSetSpec | None = None) -> Any:
    return workload_deployment("qwen", "team-a", workload, engine_args, SETTINGS, OWNER)


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    (only,) = manifest["spec"]["template"]["spec"]["containers"]
    return only


def volume(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    volumes = manifest["spec"]["template"]["spec"]["volumes"]
    return next(item for item in volumes if item["name"] == name)


def mount_of(manifest: dict[str, Any], volume_name: str) -> dict[str, Any]:
    return next(m for m in container(manifest)["volumeMounts"] if m["name"] == volume_name)


def env_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item for item in container(manifest).get("env", [])}


# -- probes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [60, 1805, 3600, 86400])
def test_startup_probe_covers_the_startup_timeout(timeout: int) -> None:
    engine = container(deployment(spec(probes={"startupTimeoutSeconds": timeout})))
    startup = engine["startupProbe"]
    allowed = startup["failureThreshold"] * startup["periodSeconds"]
    assert timeout <= allowed < timeout + startup["periodSeconds"]


@pytest.mark.parametrize("framework", ["vllm", "sglang", "trtllm"])
def test_all_probes_hit_health_on_the_http_port(framework: str) -> None:
    engine = container(deployment(spec(framework=framework)))
    ports = {port["name"]: port["containerPort"] for port in engine["ports"]}
    assert ports == {"http": 8000}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert engine[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # Liveness must not kill an engine that is merely busy: more patient than readiness.
    live, ready = engine["livenessProbe"], engine["readinessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > (
        ready["periodSeconds"] * ready["failureThreshold"]
    )


# -- resources, shm, token, cache ------------------------------------------------------------


def test_gpus_are_requested_and_limited_with_the_resource_name() -> None:
    manifest = deployment(
        spec(resources={"gpus": 4, "gpuResourceName": "amd.com/gpu", "cpu": "16", "memory": "1Ti"})
    )
    resources = container(manifest)["resources"]
    assert resources["requests"] == {"amd.com/gpu": "4", "cpu": "16", "memory": "1Ti"}
    assert resources["limits"] == {"amd.com/gpu": "4", "memory": "1Ti"}
    assert manifest["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_cpu_only_workload_asks_for_no_gpu() -> None:
    manifest = deployment(spec(resources={"gpus": 0}))
    resources = container(manifest)["resources"]
    assert not any("gpu" in key for part in resources.values() for key in part)
    assert "strategy" not in manifest["spec"]


def test_shared_memory_is_memory_backed_and_sized() -> None:
    manifest = deployment(spec(shmSize="32Gi"))
    assert volume(manifest, "dshm")["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert mount_of(manifest, "dshm")["mountPath"] == "/dev/shm"


def test_hf_token_comes_from_its_secret_key() -> None:
    manifest = deployment(spec(hfTokenSecretRef={"name": "hf-token", "key": "token"}))
    token = env_of(manifest)["HF_TOKEN"]
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    }
    assert "value" not in token


@pytest.mark.parametrize("read_only", [False, True])
def test_model_cache_claim_is_mounted_at_hf_home(read_only: bool) -> None:
    manifest = deployment(
        spec(modelCache={"claimName": "weights", "mountPath": "/models", "readOnly": read_only})
    )
    claim = volume(manifest, "model-cache")["persistentVolumeClaim"]
    assert claim == {"claimName": "weights", "readOnly": read_only}
    mount = mount_of(manifest, "model-cache")
    assert mount["mountPath"] == env_of(manifest)["HF_HOME"]["value"] == "/models"
    assert mount["readOnly"] is read_only


def test_no_cache_no_token_no_env() -> None:
    manifest = deployment(spec())
    assert "env" not in container(manifest)
    assert [v["name"] for v in manifest["spec"]["template"]["spec"]["volumes"]] == ["dshm"]


def test_node_placement_is_copied() -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
                ]
            }
        }
    }
    pod = deployment(
        spec(nodeSelector={"pool": "gpu"}, tolerations=[toleration], affinity=affinity)
    )["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert pod["tolerations"] == [toleration]
    assert pod["affinity"] == affinity


def test_command_line_and_image() -> None:
    manifest = deployment(spec(), eas(**{"max-model-len": 8192}))
    engine = container(manifest)
    assert engine["command"] == ["vllm", "serve"]
    assert engine["args"][0] == "Qwen/Qwen3-8B"
    assert engine["args"][-2:] == ["--max-model-len", "8192"]
    assert engine["image"] == SETTINGS.engine_image("vllm")
    custom = OperatorSettings(vllm_image="registry.local/vllm:pinned")
    other = workload_deployment("qwen", "team-a", spec(), None, custom)
    assert container(other)["image"] == "registry.local/vllm:pinned"
    own = deployment(spec(image="my/vllm:dev", imagePullPolicy="Always"))
    assert (container(own)["image"], container(own)["imagePullPolicy"]) == ("my/vllm:dev", "Always")


def test_service_links_and_token_mount_are_off() -> None:
    pod = deployment(spec())["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False


# -- hashes ---------------------------------------------------------------------------------


def test_engine_args_hash_changes_with_the_engine_args_set() -> None:
    def hashes(engine_args: EngineArgsSetSpec | None) -> tuple[str, str]:
        manifest = deployment(spec(), engine_args)
        template = manifest["spec"]["template"]["metadata"]["annotations"]
        return template[ANNOTATION_ENGINE_ARGS_HASH], manifest["metadata"]["annotations"][
            ANNOTATION_SPEC_HASH
        ]

    first = hashes(eas(**{"max-model-len": 8192, "enforce-eager": True}))
    same = hashes(eas(**{"enforce-eager": True, "max-model-len": 8192}))
    changed = hashes(eas(**{"max-model-len": 16384, "enforce-eager": True}))
    env_changed = hashes(
        EngineArgsSetSpec.model_validate(
            {
                "framework": "vllm",
                "args": {"max-model-len": 8192, "enforce-eager": True},
                "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
            }
        )
    )
    assert first == same
    assert len({first[0], changed[0], env_changed[0], hashes(None)[0]}) == 4
    assert len({first[1], changed[1], env_changed[1]}) == 3


def test_spec_hash_is_stable_and_sensitive() -> None:
    assert spec_hash({"a": 1, "b": [1, 2]}) == spec_hash({"b": [1, 2], "a": 1})
    assert spec_hash({"a": 1, "b": [1, 2]}) != spec_hash({"a": 1, "b": [2, 1]})
    assert spec_hash(spec()) == spec_hash(spec(replicas=1))  # default made explicit
    assert spec_hash(spec()) != spec_hash(spec(replicas=2))
    assert re.fullmatch(r"[0-9a-f]{16}", spec_hash(None))


# -- owner references, labels, names -----------------------------------------------------------


def test_owner_reference_is_a_blocking_controller() -> None:
    for manifest in (deployment(spec()), workload_service("qwen", "team-a", spec(), OWNER)):
        assert manifest["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Workload",
                "name": "qwen",
                "uid": "0c9e-4d2f",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    assert "ownerReferences" not in workload_service("qwen", "team-a", spec())["metadata"]


def test_owner_reference_needs_a_uid() -> None:
    with pytest.raises(ManifestError, match=r"metadata\.uid"):
        owner_reference({"apiVersion": "kyai.io/v1alpha1", "kind": "Workload", "metadata": {}})


def test_labels_and_selectors_line_up() -> None:
    manifest = deployment(spec(framework="sglang"))
    service = workload_service("qwen", "team-a", spec(framework="sglang"), OWNER)
    selector = manifest["spec"]["selector"]["matchLabels"]
    template_labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template_labels.items()
    assert service["spec"]["selector"] == selector
    for labels in (manifest["metadata"]["labels"], template_labels, service["metadata"]["labels"]):
        assert labels["app.kubernetes.io/name"] == "sglang"
        assert labels["app.kubernetes.io/instance"] == "qwen"
        assert labels["app.kubernetes.io/component"] == "engine"
        assert labels["app.kubernetes.io/part-of"] == "kyai"
        assert labels["app.kubernetes.io/managed-by"] == "kyai-operator"
        assert labels[LABEL_WORKLOAD] == "qwen"
    # The selector must survive a framework change (selectors are immutable).
    assert deployment(spec(framework="vllm"))["spec"]["selector"]["matchLabels"] == selector


def test_service_exposes_port_8000_named_http() -> None:
    service = workload_service("qwen", "team-a", spec())
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["metadata"]["name"] == deployment(spec())["metadata"]["name"]
    assert workload_endpoint("qwen", "team-a") == (
        f"http://{service['metadata']['name']}.team-a.svc:8000/v1"
    )


def test_names_fit_services_and_labels() -> None:
    long_a, long_b = "a" * 200 + ".one", "a" * 200 + ".two"
    for name in ("qwen", "llama.3.1", "7b-model", long_a, long_b):
        assert RFC1035.match(engine_name(name)), name
        assert len(engine_name(name)) <= 63
        assert len(label_value(name)) <= 63
    assert engine_name(long_a) != engine_name(long_b)
    assert label_value(long_a) != label_value(long_b)
    assert dns_label("a.b") != dns_label("a-b")
    assert engine_name("qwen") == "qwen-engine"


def test_endpoint_workloads_get_no_manifests() -> None:
    remote = spec(endpoint={"url": "https://api.example.test/v1"})
    with pytest.raises(ManifestError, match="endpoint"):
        deployment(remote)
    with pytest.raises(ManifestError, match="endpoint"):
        workload_service("qwen", "team-a", remote)


# -- security contexts ----------------------------------------------------------------------


def test_engine_runs_as_the_image_user_without_capabilities() -> None:
    manifest = deployment(spec())
    pod = manifest["spec"]["template"]["spec"]["securityContext"]
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "runAsNonRoot" not in pod  # the engine images run as root; see the builder's doc
    context = container(manifest)["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["privileged"] is False


def test_worker_security_is_restricted_with_a_writable_tmp() -> None:
    worker = worker_security_context()
    assert worker.pod["runAsNonRoot"] is True
    assert worker.pod["runAsUser"] == worker.pod["runAsGroup"] == 65532
    assert worker.pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert worker.container["readOnlyRootFilesystem"] is True
    assert worker.container["allowPrivilegeEscalation"] is False
    assert worker.container["capabilities"] == {"drop": ["ALL"]}
    (tmp,) = worker.volumes
    (mount,) = worker.volume_mounts
    assert mount == {"name": tmp["name"], "mountPath": "/tmp"}
    assert "emptyDir" in tmp


# -- schema validation (kubernetes-validate, offline OpenAPI schemas) ---------------------------


def test_manifests_validate_against_the_kubernetes_schemas() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    full = spec(
        resources={"gpus": 2, "cpu": "8", "memory": "64Gi"},
        modelCache={"claimName": "weights"},
        hfTokenSecretRef={"name": "hf"},
        nodeSelector={"pool": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    worker = worker_security_context()
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "w", "namespace": "team-a"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "securityContext": worker.pod,
                    "volumes": worker.volumes,
                    "containers": [
                        {
                            "name": "worker",
                            "image": SETTINGS.worker_image,
                            "securityContext": worker.container,
                            "volumeMounts": worker.volume_mounts,
                        }
                    ],
                }
            }
        },
    }
    for manifest in (
        deployment(full, eas(**{"max-model-len": 8192})),
        workload_service("qwen", "team-a", full, OWNER),
        job,
    ):
        kubernetes_validate.validate(manifest, "1.32.0", strict=True)
