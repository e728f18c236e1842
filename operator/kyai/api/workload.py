"""Workload: one candidate model, served by the operator or reached at an endpoint."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from kyai.api._base import (
    ImageReference,
    KyaiModel,
    LocalObjectReference,
    Name,
    SecretKeyReference,
    StatusBase,
)
from kyai.api.engineargsset import Framework
from kyai.engines import framework_list

PreserveObject = Annotated[
    dict[str, Any],
    Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}),
]
Quantity = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?|[mkMGTPE]|e[0-9]+)?$")]


class Resources(KyaiModel):
    """What the engine's pod asks for."""

    gpus: int = Field(default=1, ge=0, le=64)
    """GPUs per replica (requests and limits). 0 for a CPU-only engine."""
    gpu_resource_name: str = "nvidia.com/gpu"
    """The extended resource that counts GPUs (e.g. nvidia.com/gpu, amd.com/gpu)."""
    cpu: Quantity | None = None
    """CPU request, e.g. "8"."""
    memory: Quantity | None = None
    """Memory request and limit, e.g. "64Gi"."""


class ModelCache(KyaiModel):
    """A PersistentVolumeClaim that keeps downloaded weights between restarts."""

    claim_name: Name
    """The PVC's name (it must exist in the Workload's namespace)."""
    mount_path: str = "/root/.cache/huggingface"
    """Where the claim is mounted; HF_HOME points there."""
    read_only: bool = False
    """Mount read-only (a pre-filled cache shared by many Workloads)."""


class Endpoint(KyaiModel):
    """A model served elsewhere: no pods are launched."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    """The OpenAI-compatible base URL, e.g. http://vllm.team-a.svc:8000/v1."""
    api_key_secret_ref: SecretKeyReference | None = None
    """The Secret key holding the endpoint's API key, if it needs one."""


class Probes(KyaiModel):
    """How long the engine may take to become healthy."""

    startup_timeout_seconds: int = Field(default=3600, ge=60, le=86400)
    """Time allowed from container start to the first healthy /health (weights download and
    load can take many minutes)."""


class WorkloadSpec(KyaiModel):
    """One candidate: a model on a serving engine, or an endpoint serving it."""

    framework: Framework | None = Field(
        default=None,
        description=f"The serving framework: {framework_list()} (required unless spec.endpoint "
        "is set; for an endpoint it only labels results).",
    )
    model: str = Field(min_length=1)
    """The model to serve: a HuggingFace id (org/name) or a path inside the container."""
    served_model_name: str | None = None
    """The name clients ask for (default: the model)."""
    engine_args_set_ref: LocalObjectReference | None = None
    """The EngineArgsSet with the engine's flags (its framework must match)."""
    image: ImageReference | None = None
    """The engine's container image, ``[registry[:port]/]repository[:tag][@sha256:digest]``
    (default: the operator's configured image for the framework)."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """When to pull the image."""
    replicas: int = Field(default=1, ge=0, le=64)
    """Engine replicas behind the Service."""
    nodes: int = Field(default=1, ge=1, le=64)
    """Nodes (pods) serving one replica of the model. With more than 1, each replica is a
    LeaderWorkerSet group of this many pods, ``resources`` (its GPUs) per pod: vLLM on Ray,
    SGLang with ``--nnodes``; the engine's parallel sizes must use every GPU of the group.
    TensorRT-LLM serves on one node only. Needs LeaderWorkerSet in the cluster."""
    resources: Resources = Field(default_factory=Resources)
    """GPU, CPU and memory of each replica."""
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods must match."""
    tolerations: list[PreserveObject] = Field(default_factory=list)
    """Pod tolerations (core/v1 Toleration objects)."""
    affinity: PreserveObject | None = None
    """Pod affinity (a core/v1 Affinity object)."""
    model_cache: ModelCache | None = None
    """A PVC for the weights cache."""
    hf_token_secret_ref: SecretKeyReference | None = None
    """The Secret key holding a HuggingFace token (HF_TOKEN) for gated models."""
    shm_size: Quantity = "16Gi"
    """Size of the memory-backed /dev/shm (NCCL and tensor parallelism need it)."""
    probes: Probes = Field(default_factory=Probes)
    """Startup, readiness and liveness timing."""
    restart_limit: int = Field(default=3, ge=0, le=1000)
    """Restarts of an engine container (it exited: an error, an OOM kill) after which the
    Workload stops waiting for it: Failed (Stalled), and the runs waiting on it fail at once.
    Each crash is reported at once before that, with the exit code, the termination message
    and the container's last log lines; an engine that becomes ready again makes the
    Workload Ready."""
    endpoint: Endpoint | None = None
    """Set instead of serving: the model is already served at this URL."""

    @model_validator(mode="after")
    def _endpoint_or_engine(self) -> WorkloadSpec:
        if self.endpoint is None and self.framework is None:
            raise ValueError(
                f"spec.framework is required ({framework_list()}) unless spec.endpoint is set"
            )
        if self.endpoint is not None and self.engine_args_set_ref is not None:
            raise ValueError(
                "spec.endpoint and spec.engineArgsSetRef exclude each other: a Workload with an "
                "endpoint launches no engine"
            )
        if self.nodes > 1 and self.endpoint is not None:
            raise ValueError(
                f"spec.nodes is {self.nodes} but spec.endpoint is set: a Workload with an "
                "endpoint launches no engine, so spec.nodes must be 1"
            )
        if self.nodes > 1 and self.framework == "trtllm":
            raise ValueError(
                f"spec.nodes is {self.nodes}, but the operator serves TensorRT-LLM on one node "
                "only (its multi-node launch is mpirun with trtllm-llmapi-launch, which has no "
                "LeaderWorkerSet form): set spec.nodes to 1 (more GPUs per node with "
                "spec.resources.gpus), or use vllm or sglang"
            )
        return self

    @property
    def engine(self) -> Framework:
        """The serving framework of a Workload the operator serves (not an endpoint)."""
        if self.framework is None:
            raise ValueError("a Workload served by the operator needs spec.framework")
        return self.framework

    @property
    def served_name(self) -> str:
        """The name clients ask for."""
        return self.served_model_name or self.model


WorkloadPhase = Literal["Pending", "Deploying", "Ready", "Failed"]


class WorkloadStatus(StatusBase):
    """Where the candidate can be reached, and what it serves."""

    phase: WorkloadPhase | None = None
    """Pending, Deploying, Ready or Failed."""
    endpoint: str | None = None
    """The OpenAI-compatible base URL of the candidate."""
    served_model_name: str | None = None
    """The model name the server reports."""
    max_model_len: int | None = None
    """The context window: what the server reports on /v1/models, else the engine's
    context-length flag, else the model's HuggingFace config.json."""
    max_model_len_source: Literal["server", "engine-args", "config"] | None = None
    """Where maxModelLen comes from."""
    ready_replicas: int | None = None
    """Replicas passing their readiness probe (on several nodes: ready groups)."""
    ready_groups: int | None = None
    """On several nodes (spec.nodes > 1): the LeaderWorkerSet's groups whose leader and
    workers are all ready (its status.readyReplicas); unset on one node."""
    engine_args_hash: str | None = None
    """Hash of the EngineArgsSet the Deployment was built from."""
    metrics_url: str | None = None
    """The engine's Prometheus metrics (vLLM: always; SGLang: with --enable-metrics; none for
    TensorRT-LLM and endpoint Workloads): runs read its serving histograms around generation."""
