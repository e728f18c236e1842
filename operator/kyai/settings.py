"""The operator's settings: one object, documented field by field, validated at start.

Every field can be set from the environment (``KYAI_`` + the field name in upper case; the
Helm chart sets them from its values) and the most common ones from ``kyai operator`` flags.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kyai import __version__
from kyai.engines import ENGINES

#: The project's own image: evaluation Jobs run it.
DEFAULT_WORKER_IMAGE = f"ghcr.io/kyai-io/kyai-operator:{__version__}"

#: Default engine images, pinned in the engines registry (override per Workload with
#: spec.image, or with ``KYAI_<FRAMEWORK>_IMAGE``).
DEFAULT_ENGINE_IMAGES: dict[str, str] = {
    name: engine.default_image for name, engine in ENGINES.items()
}


def _image_setting(framework: str) -> str:
    """The settings key of a framework's image (``vllm_image``; env ``KYAI_VLLM_IMAGE``)."""
    return f"{framework}_image"


class OperatorSettings(BaseModel):
    """How the operator runs; see each field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch (empty: all namespaces)."""
    worker_image: str = DEFAULT_WORKER_IMAGE
    """Image of the generation and judge Jobs (this project's image)."""
    worker_image_pull_policy: str = "IfNotPresent"
    """Pull policy of the worker image."""
    lm_eval_worker_image: str | None = None
    """Image of the lm-eval Jobs (spec.lmEval): the project's image with the lm-eval extra
    (Containerfile.lm-eval); default: worker_image, which then must have lm-eval installed."""
    engine_images: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_ENGINE_IMAGES))
    """Default image per framework (every registered engine; ``<framework>_image`` keys, as
    the environment's ``KYAI_<FRAMEWORK>_IMAGE``, override one)."""
    default_judge_endpoint: str | None = None
    """The platform judge's OpenAI-compatible base URL, used when a run names no judge."""
    default_judge_model: str | None = None
    """The platform judge's model."""
    default_judge_secret_namespace: str | None = None
    """Namespace of the Secret holding the platform judge's API key (the operator copies
    the key into each run's namespace as an owned Secret)."""
    default_judge_secret_name: str | None = None
    """Name of the Secret holding the platform judge's API key."""
    default_judge_secret_key: str = "api-key"
    """Key within that Secret."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """Port of /metrics (0: not served)."""
    metrics_bind_address: str = "0.0.0.0"
    """Address /metrics binds to: an IPv4 or IPv6 address (``0.0.0.0`` every interface,
    ``127.0.0.1`` the pod only, ``::`` IPv6)."""
    health_port: int = Field(default=8081, ge=0, le=65535)
    """Port of the liveness endpoint /healthz (0: not served)."""
    workload_poll_seconds: float = Field(default=15.0, gt=0)
    """How often a Workload's /v1/models is read while it is not Ready."""
    max_concurrent_reconciles: int = Field(default=64, ge=1, le=1024)
    """Reconciles running at once (each a few API calls); the others wait their turn.

    A reconcile spends most of its time waiting for API round trips: at 16, a burst of 100
    new runs waited for slots, not for the CPU (apply -> generation Job p95 0.8 s at
    1,000 runs; 0.4 s at 64). The operator's API client keeps as many connections.
    """
    worker_start_timeout_seconds: float = Field(default=300.0, gt=0)
    """How long a worker pod may fail to start (CreateContainerConfigError, ErrImagePull,
    ImagePullBackOff, Unschedulable, ...) or a run may wait for its judge's Secret once
    generation is done, before the run ends Failed. The cause is on the run's conditions
    from the first look (within ~10 s)."""
    snapshot_configmap_limit_bytes: int = Field(default=900_000, ge=1024)
    """Largest ConfigMap the operator writes for a Snapshot (the API server's limit is
    1 MiB for the whole object)."""

    @model_validator(mode="before")
    @classmethod
    def _images(cls, value: object) -> object:
        if not isinstance(value, Mapping):
            return value
        values = dict(value)
        images = {**DEFAULT_ENGINE_IMAGES, **dict(values.pop("engine_images", None) or {})}
        for framework in ENGINES:
            image = values.pop(_image_setting(framework), None)
            if image:
                images[framework] = str(image)
        values["engine_images"] = images
        return values

    @field_validator("metrics_bind_address")
    @classmethod
    def _address(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not an IP address (e.g. 0.0.0.0, 127.0.0.1 or ::)"
            ) from None
        return value

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> OperatorSettings:
        """Settings from ``KYAI_*`` variables, then ``overrides`` (flags) on top."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in [*cls.model_fields, *map(_image_setting, ENGINES)]:
            variable = f"KYAI_{name.upper()}"
            if variable in environ:
                values[name] = environ[variable]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    def engine_image(self, framework: str) -> str:
        """The default image of a framework."""
        return self.engine_images[framework]
