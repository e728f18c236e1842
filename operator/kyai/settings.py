"""The operator's settings: one object, documented field by field, validated at start.

Every field can be set from the environment (``KYAI_`` + the field name in upper case; the
Helm chart sets them from its values) and the most common ones from ``kyai operator`` flags.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kyai import __version__
from kyai._env import comma_separated, ip_address, json_object
from kyai.constants import JUDGE_GATEWAY_AUDIENCE, MIN_PROJECTED_TOKEN_SECONDS
from kyai.engines import ENGINES
from kyai.label_selector import LabelSelector

#: The project's own image: evaluation Jobs run it.
DEFAULT_WORKER_IMAGE = f"ghcr.io/kyai-io/kyai-operator:{__version__}"

#: Default engine images, pinned in the engines registry (override per Workload with
#: spec.image, or with ``KYAI_<FRAMEWORK>_IMAGE``).
DEFAULT_ENGINE_IMAGES: dict[str, str] = {
    name: engine.default_image for name, engine in ENGINES.items()
}


#: Kueue's rule for a queue name, as its webhooks apply it to the ``kueue.x-k8s.io/queue-name``
#: label of every Job, pod and Deployment they admit: ``ValidateQueueName`` calls
#: ``ValidateLabelAsCRDName(obj, constants.QueueLabel)``, which is
#: ``validation.IsDNS1123Subdomain(value)`` (kubernetes-sigs/kueue,
#: ``pkg/controller/jobframework/validation.go``), the rule of every LocalQueue's own name (a
#: CRD object's name). A label value is also at most 63 characters. A name outside it can never
#: name a LocalQueue: whatever carries it would wait forever (or Kueue's webhook refuses it).
KUEUE_QUEUE_NAME_RULE = (
    "a queue name is a LocalQueue's name, which Kueue requires to be a lowercase RFC 1123 "
    "subdomain (lower case letters, digits, '-' and '.', starting and ending with a letter or "
    "digit, e.g. 'team-a'; Kueue's ValidateQueueName), here also a label value of at most 63 "
    "characters"
)
#: ``validation.IsDNS1123Subdomain``'s regular expression (apimachinery).
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: The longest label value (and so the longest queue name a label can carry).
LABEL_VALUE_MAX = 63
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


def queue_name_problem(value: str) -> str | None:
    """Why ``value`` can never name a Kueue LocalQueue (None: it can).

    The rule is :data:`KUEUE_QUEUE_NAME_RULE`; the answer says what in ``value`` breaks it
    (upper-case letters, other characters, its ends or dots, its length).
    """
    if len(value) <= LABEL_VALUE_MAX and _DNS1123_SUBDOMAIN.fullmatch(value):
        return None
    wrong: list[str] = []
    if any(char in _UPPER for char in value):
        wrong.append("upper-case letters")
    others = sorted({char for char in value if char not in _ALLOWED and char not in _UPPER})
    if others:
        noun = "character" if len(others) == 1 else "characters"
        wrong.append(f"the {noun} " + " ".join(repr(char) for char in others))
    parts = value.split(".")
    if not value or any(not part or part[0] == "-" or part[-1] == "-" for part in parts):
        wrong.append("a part (between dots) that is empty or starts or ends with '-'")
    if len(value) > LABEL_VALUE_MAX:
        wrong.append(f"{len(value)} characters")
    return f"{KUEUE_QUEUE_NAME_RULE}; {value!r} has " + ", ".join(wrong)


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
    """The platform judge's OpenAI-compatible base URL, used when a run names no judge (and no
    gateway is set: with ``default_judge_gateway`` the workers call the gateway instead)."""
    default_judge_model: str | None = None
    """The platform judge's model."""
    default_judge_gateway: str | None = None
    """The judge gateway's base URL as judge workers reach it
    (``http://<release>-judge-gateway.<namespace>.svc:<port>/v1``; the chart sets it whenever
    the gateway runs). Set: a run that names no judge calls the gateway with its pod's
    projected ServiceAccount token, and the platform's key never leaves the operator's
    namespace. Not set: the default judge is called directly, with a key Secret of the run's
    own namespace only (see ``default_judge_secret_namespace``)."""
    default_judge_gateway_check: str | None = None
    """The judge gateway's check route on its admin port, where the operator checks the
    default judge before a run generates anything
    (``http://<release>-judge-gateway.<namespace>.svc:<metricsPort>/upstream/v1``; the chart
    sets it with ``default_judge_gateway``). Not set: the default judge behind the gateway is
    checked only by the judge pod, after the generation."""
    default_judge_gateway_audience: str = Field(default=JUDGE_GATEWAY_AUDIENCE, min_length=1)
    """The audience of the projected token a judge pod shows the gateway (the gateway's own
    ``audience`` setting; the chart's ``gateway.audience``)."""
    default_judge_gateway_token_seconds: int = Field(
        default=MIN_PROJECTED_TOKEN_SECONDS, ge=MIN_PROJECTED_TOKEN_SECONDS, le=86_400
    )
    """The lifetime of that token (``expirationSeconds``; the kubelet replaces it at 80 % of
    it, and the worker reads the file again when it changed). The API server issues no
    shorter one than 600 s."""
    default_judge_namespace_selector: LabelSelector = Field(default_factory=LabelSelector)
    """The namespaces whose runs may use the default judge: a Kubernetes label selector on
    namespaces (JSON ``{"matchLabels": {...}, "matchExpressions": [...]}``; the chart's
    ``defaultJudge.namespaceSelector``). Empty: every namespace. A run elsewhere that names no
    judge is Stalled (``DefaultJudgeNotAllowed``) until its namespace is labelled."""
    default_judge_secret_namespace: str | None = None
    """Namespace of the Secret holding the platform judge's API key when no gateway is set
    (None: each run's own namespace). The operator never copies a key into a tenant's
    namespace: a run of another namespace that names no judge is Stalled
    (``DefaultJudgeNeedsGateway``) until the gateway is set."""
    default_judge_secret_name: str | None = None
    """Name of the Secret holding the platform judge's API key (without a gateway)."""
    default_judge_secret_key: str = "api-key"
    """Key within that Secret."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """Port of /metrics (0: not served)."""
    metrics_bind_address: str = "0.0.0.0"
    """Address /metrics binds to: an IPv4 or IPv6 address (``0.0.0.0`` every interface,
    ``127.0.0.1`` the pod only, ``::`` IPv6)."""
    health_port: int = Field(default=8081, ge=0, le=65535)
    """Port of the liveness endpoint /healthz (0: not served)."""
    leader_elect: bool = False
    """Run as one of several replicas: only the holder of a ``coordination.k8s.io/v1`` Lease
    reconciles; a standby serves /healthz and /metrics and waits for the Lease; a holder that
    cannot renew it within ``leader_election_renew_deadline_seconds`` exits at once."""
    leader_election_namespace: str | None = None
    """Namespace of the Lease (None: the operator's own: ``$POD_NAMESPACE``, its service
    account's, else ``default``)."""
    leader_election_id: str = Field(default="kyai-operator", min_length=1, max_length=253)
    """Name of the Lease."""
    leader_election_identity: str | None = None
    """This replica's name in the Lease (None: ``$POD_NAME``, else the host name and a random
    suffix)."""
    leader_election_lease_seconds: float = Field(default=15.0, gt=0)
    """How long a standby waits, after it last saw the Lease change, before it takes it."""
    leader_election_renew_deadline_seconds: float = Field(default=10.0, gt=0)
    """How long the holder may fail to renew before it exits (less than the lease)."""
    leader_election_retry_seconds: float = Field(default=2.0, gt=0)
    """How often the holder renews and a standby tries (less than the renew deadline)."""
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
    snapshot_retry_seconds: float = Field(default=30.0, gt=0)
    """First wait before a Snapshot whose source is not available (HuggingFace unreachable,
    a ConfigMap or URL missing) is tried again; each later wait doubles, up to
    ``snapshot_retry_max_seconds``."""
    snapshot_retry_max_seconds: float = Field(default=300.0, gt=0)
    """The longest wait between two tries of a Snapshot's unavailable source."""
    run_resync_seconds: float = Field(default=20.0, gt=0)
    """How often the unfinished runs are looked at whatever happens (one loop for all runs,
    from the watch cache; a LIST only of the current Jobs of runs in a Job's phase): a safety
    net for lost events, waits and deadlines. Job and run events, and the times a reconcile
    asks to be looked at again, move runs on before it."""
    run_relist_seconds: float = Field(default=300.0, gt=0)
    """How often that resync LISTs every run from the API server first (as an informer
    relists): a run whose watch events never reached the operator is found within this."""
    api_retry_seconds: float = Field(default=5.0, gt=0)
    """Wait before a run is looked at again after an API call of its reconcile failed
    (a timeout, a 5xx, a 403)."""
    job_start_grace_seconds: float = Field(default=15.0, ge=0)
    """Seconds after its creation a worker Job's pods are first looked at (pods normally start
    within them); the run asks to be looked at again right after, so a pod that cannot start
    is reported then, well before ``worker_start_timeout_seconds``."""
    run_first_look_seconds: float = Field(default=10.0, gt=0)
    """A run the operator has not looked at this long after its creation (its create event
    was lost) is looked at by the next resync."""
    missing_reference_grace_seconds: float = Field(default=300.0, ge=0)
    """How long an object may wait for one that does not exist (a Workload, Snapshot,
    EngineArgsSet, source run or Secret it names) before it is called ``Stalled``."""
    snapshot_configmap_limit_bytes: int = Field(default=900_000, ge=1024)
    """Largest ConfigMap the operator writes for a Snapshot (the API server's limit is
    1 MiB for the whole object)."""
    default_queue_name: str | None = None
    """The Kueue LocalQueue (``kueue.x-k8s.io/queue-name``) of every Job and engine pod the
    operator makes for an object that names none (its own label, or its sweep's, wins). Empty
    or unset: none, and an unlabelled object's pods bypass Kueue as before. Where Kueue's
    CRDs are not installed, queued Jobs are not suspended (nothing would start them)."""

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
        return ip_address(value)

    @field_validator("default_judge_gateway", "default_judge_gateway_check")
    @classmethod
    def _gateway(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        text = value.strip().rstrip("/")
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value!r} is not an http:// or https:// URL with a host (e.g. "
                "http://kyai-judge-gateway.kyai-system.svc:8080/v1)"
            )
        return text

    @field_validator("default_queue_name")
    @classmethod
    def _queue_name(cls, value: str | None) -> str | None:
        problem = queue_name_problem(value) if value else None
        if problem is not None:
            raise ValueError(
                f"KYAI_DEFAULT_QUEUE_NAME (the chart's defaultQueueName) is {value!r}, which no "
                f"Kueue LocalQueue can be named, so every Job and engine pod it labels would wait "
                f"forever: {problem}"
            )
        return value

    @field_validator("default_judge_namespace_selector", mode="before")
    @classmethod
    def _selector(cls, value: object) -> object:
        return json_object(
            value, 'a label selector such as {"matchLabels": {"kyai.io/default-judge": "enabled"}}'
        )

    @model_validator(mode="after")
    def _leader_timings(self) -> OperatorSettings:
        lease = self.leader_election_lease_seconds
        deadline = self.leader_election_renew_deadline_seconds
        retry = self.leader_election_retry_seconds
        if not lease > deadline > retry:
            raise ValueError(
                f"leader_election_lease_seconds ({lease:g}) > "
                f"leader_election_renew_deadline_seconds ({deadline:g}) > "
                f"leader_election_retry_seconds ({retry:g}) does not hold: a holder must stop "
                "before a standby may take the Lease, and renew more than once before that"
            )
        return self

    @model_validator(mode="after")
    def _gateway_model(self) -> OperatorSettings:
        if self.default_judge_gateway and not self.default_judge_model:
            raise ValueError(
                "default_judge_gateway is set without default_judge_model: the gateway serves "
                "the default judge's one model (set KYAI_DEFAULT_JUDGE_MODEL)"
            )
        return self

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return comma_separated(value)

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


# -- the settings table (docs/reference/settings.md) -----------------------------------------------

#: The generated settings table of docs/reference/settings.md sits between these two lines.
TABLE_BEGIN = "<!-- settings-table: generated from OperatorSettings by `make crds` -->"
TABLE_END = "<!-- settings-table: end -->"


def _attribute_docs() -> dict[str, str]:
    """Each field's docstring (the string under it in the class body), whitespace collapsed."""
    import ast
    import inspect
    import textwrap

    (cls,) = ast.parse(textwrap.dedent(inspect.getsource(OperatorSettings))).body
    assert isinstance(cls, ast.ClassDef)
    docs: dict[str, str] = {}
    for statement, following in zip(cls.body, cls.body[1:], strict=False):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = " ".join(following.value.value.split())
    return docs


def _shown(value: object) -> str:
    """A default as the environment would spell it."""
    import json

    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(map(str, value)) if value else '""'
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(exclude_defaults=True, by_alias=True))
    return str(value).replace(f":{__version__}", ":<kyai version>")


def _cell(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|")


def settings_table() -> str:
    """Every setting as a Markdown table: environment variable, default, meaning.

    Generated from :class:`OperatorSettings` (its fields, defaults and docstrings) and the
    engines registry (one ``KYAI_<FRAMEWORK>_IMAGE`` per engine), so it cannot drift from
    the model: ``python -m kyai.settings docs/reference/settings.md`` (part of ``make crds``)
    rewrites it.
    """
    docs = _attribute_docs()
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in OperatorSettings.model_fields.items():
        if name == "engine_images":
            for framework, image in DEFAULT_ENGINE_IMAGES.items():
                variable = f"KYAI_{_image_setting(framework).upper()}"
                meaning = f"Default image of {framework} Workloads (a Workload's spec.image wins)."
                lines.append(f"| `{variable}` | `{image}` | {meaning} |")
            continue
        default = field.get_default(call_default_factory=True)
        meaning = _cell(docs.get(name) or field.description or "")
        lines.append(f"| `KYAI_{name.upper()}` | `{_shown(default)}` | {meaning} |")
    return "\n".join(lines)


def with_settings_table(text: str) -> str:
    """``text`` (a Markdown file holding the two marker lines) with the table between them."""
    before, found, rest = text.partition(TABLE_BEGIN)
    _, ended, after = rest.partition(TABLE_END)
    if not found or not ended:
        raise ValueError(f"the markers {TABLE_BEGIN!r} and {TABLE_END!r} are not both there")
    return f"{before}{TABLE_BEGIN}\n{settings_table()}\n{TABLE_END}{after}"


if __name__ == "__main__":  # python -m kyai.settings [FILE.md]: print, or rewrite FILE's table
    import sys
    from pathlib import Path

    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.write_text(with_settings_table(target.read_text(encoding="utf-8")), "utf-8")
    else:
        print(settings_table())
