"""The judge gateway's settings: one object, documented field by field, validated at start.

Every field can be set from the environment (``KYAI_GATEWAY_`` + the field name in upper
case; the Helm chart sets them from its values), the main ones also from ``kyai
judge-gateway`` flags. ``namespace_limits`` and ``namespace_selector`` take JSON.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from kyai._env import comma_separated, ip_address, json_object
from kyai.constants import JUDGE_GATEWAY_AUDIENCE, LABEL_COMPONENT, LABEL_RUN
from kyai.label_selector import LabelSelector

#: The prefix of every variable the gateway reads.
ENV_PREFIX = "KYAI_GATEWAY_"

#: The audience a judge pod's projected ServiceAccount token must carry (the token is useless
#: against the API server and any other service).
DEFAULT_AUDIENCE = JUDGE_GATEWAY_AUDIENCE

#: The component label value of the operator's judge Job pods.
JUDGE_COMPONENT = "judge"


def normalise_upstream(url: str) -> str:
    """``https://host``, ``…/v1`` and ``…/v1/`` all become ``https://host/v1`` (or ValueError)."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
    base = text.rstrip("/")
    if base.endswith("/chat/completions"):
        base = base[: -len("/chat/completions")]
    if not base.endswith("/v1"):
        base += "/v1"
    return base


class LimitOverride(BaseModel):
    """Per-namespace limits that differ from the defaults (camelCase keys, as in the chart)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    concurrency: int | None = Field(default=None, ge=1, le=100_000)
    queue: int | None = Field(default=None, ge=0, le=100_000)
    queue_timeout_seconds: float | None = Field(default=None, ge=0, le=3600)
    requests_per_second: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)


class Limits(BaseModel):
    """The limits one namespace gets (see :class:`GatewaySettings` for each)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int
    queue: int
    queue_timeout_seconds: float
    requests_per_second: float
    burst: int


class GatewaySettings(BaseModel):
    """How the judge gateway runs; see each field."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    upstream_url: str
    """The default judge's OpenAI-compatible base URL (the chart's ``defaultJudge.endpoint``);
    ``/v1`` is appended when missing."""
    model: str = Field(min_length=1)
    """The default judge's model: the only model a chat request may name."""
    api_key_file: str | None = None
    """A file holding the judge's API key (the chart mounts ``defaultJudge.apiKeySecret``);
    re-read when it changes, so a rotated Secret takes effect without a restart. None: the
    judge needs no key."""
    audience: str = Field(default=DEFAULT_AUDIENCE, min_length=1)
    """The audience a caller's projected ServiceAccount token must have."""
    bind_address: str = "0.0.0.0"
    """The address the proxy and the metrics endpoints listen on."""
    port: int = Field(default=8080, ge=0, le=65535)
    """Port of the proxy (``/v1/chat/completions``, ``/v1/models``); 0 picks a free one."""
    metrics_port: int = Field(default=9090, ge=0, le=65535)
    """Port of ``/metrics``, ``/healthz`` and ``/readyz`` (kept off the proxy's port, which
    only worker pods may reach); 0 picks a free one."""
    concurrency: int = Field(default=32, ge=1, le=100_000)
    """Judge requests of one namespace in flight at once (a run's judge sends 16 at once by
    default: two runs of a namespace judge side by side at full speed)."""
    queue: int = Field(default=64, ge=0, le=100_000)
    """Requests of one namespace that may wait for a free slot (and for a requests-per-second
    token) instead of being refused at once; beyond them: 429."""
    queue_timeout_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a waiting request waits for a slot before it gets a 429."""
    requests_per_second: float = Field(default=20.0, gt=0)
    """Sustained judge requests per second of one namespace (a token bucket)."""
    burst: int = Field(default=40, ge=1)
    """Requests one namespace may send at once above the sustained rate (the bucket's size)."""
    namespace_limits: dict[str, LimitOverride] = Field(default_factory=dict)
    """Limits of particular namespaces, over the defaults above (JSON:
    ``{"team-a": {"concurrency": 64, "requestsPerSecond": 100}}``)."""
    namespace_selector: LabelSelector = Field(default_factory=LabelSelector)
    """The namespaces whose workers may use the judge (``defaultJudge.namespaceSelector``,
    JSON); empty: every namespace. A non-empty selector makes the gateway read the caller's
    Namespace (RBAC: ``get namespaces``)."""
    token_cache_seconds: float = Field(default=60.0, ge=0, le=3600)
    """How long a verified caller is trusted without a new TokenReview (never past the
    token's own ``exp``)."""
    failure_cache_seconds: float = Field(default=10.0, ge=0, le=3600)
    """How long a refused token stays refused without a new TokenReview."""
    max_concurrent_reviews: int = Field(default=16, ge=1, le=1024)
    """TokenReviews and pod reads in flight at once (the API server's protection)."""
    run_label: str = Field(default=LABEL_RUN, min_length=1)
    """The label naming a worker pod's EvaluationRun."""
    component_label: str = Field(default=LABEL_COMPONENT, min_length=1)
    """The label naming a worker pod's role."""
    worker_components: tuple[str, ...] = (JUDGE_COMPONENT,)
    """The roles (``component_label`` values) that may call the judge (comma-separated)."""
    upstream_timeout_seconds: float = Field(default=600.0, gt=0)
    """The longest a judge request may take upstream before the gateway answers 504."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """The largest request body accepted (413 beyond)."""
    file_check_seconds: float = Field(default=1.0, ge=0)
    """How often the key file and the gateway's own token file are checked for a change."""
    kubeconfig: str | None = None
    """A kubeconfig to reach the API server with; None: the pod's in-cluster ServiceAccount,
    else ``$KUBECONFIG`` or ``~/.kube/config``."""

    @field_validator("upstream_url")
    @classmethod
    def _upstream(cls, value: str) -> str:
        return normalise_upstream(value)

    @field_validator("bind_address")
    @classmethod
    def _address(cls, value: str) -> str:
        return ip_address(value)

    @field_validator("worker_components", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return comma_separated(value)

    @field_validator("worker_components")
    @classmethod
    def _some(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("name at least one worker component (e.g. judge)")
        return value

    @field_validator("namespace_limits", "namespace_selector", mode="before")
    @classmethod
    def _json(cls, value: object) -> object:
        return json_object(value)

    def limits_for(self, namespace: str) -> Limits:
        """The limits of ``namespace``: its override's values over the defaults."""
        values = {
            "concurrency": self.concurrency,
            "queue": self.queue,
            "queue_timeout_seconds": self.queue_timeout_seconds,
            "requests_per_second": self.requests_per_second,
            "burst": self.burst,
        }
        override = self.namespace_limits.get(namespace)
        if override is not None:
            values.update(override.model_dump(exclude_none=True))
        return Limits.model_validate(values)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: object
    ) -> GatewaySettings:
        """Settings from ``KYAI_GATEWAY_*`` variables, then ``overrides`` (flags) on top."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for name in cls.model_fields:
            variable = env_variable(name)
            if variable in environ:
                values[name] = environ[variable]
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls.model_validate(values)


def env_variable(field: str) -> str:
    """The environment variable of a settings field (``KYAI_GATEWAY_UPSTREAM_URL``)."""
    return f"{ENV_PREFIX}{field.upper()}"


def describe_errors(error: ValidationError) -> str:
    """One line per invalid setting, naming its field and its variable."""
    lines = []
    for item in error.errors():
        location = [str(part) for part in item["loc"]]
        field = location[0] if location else "?"
        where = ".".join(location)
        message = item["msg"]
        if item["type"] == "missing":
            message = "required"
        lines.append(f"{where} ({env_variable(field)}): {message}")
    return "; ".join(lines)
