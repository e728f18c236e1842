"""Building blocks of every KYAI resource: the model base, references, conditions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

#: A Kubernetes object name (RFC 1123 subdomain).
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

Name = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]

#: A container image reference as the distribution spec's grammar (reference/regexp.go)
#: has it: ``[registry[:port]/]path[:tag][@sha256:digest]``, lower-case path components,
#: tags of at most 128 characters. No spaces, no scheme (``https://``), no upper-case path.
IMAGE_REFERENCE = (
    r"^(([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?)(\.([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
    r"(:[0-9]+)?/)?"
    r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@sha256:[a-f0-9]{64})?$"
)

ImageReference = Annotated[str, Field(min_length=1, max_length=512, pattern=IMAGE_REFERENCE)]


class KyaiModel(BaseModel):
    """camelCase in the cluster, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The cluster form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class LocalObjectReference(KyaiModel):
    """A reference to an object of the same namespace."""

    name: Name
    """The object's name."""


class SecretKeyReference(KyaiModel):
    """A key of a Secret in the same namespace."""

    name: Name
    """The Secret's name."""
    key: str = Field(default="api-key", min_length=1)
    """The key within the Secret (default ``api-key``)."""


class ConfigMapKeyReference(KyaiModel):
    """A key of a ConfigMap in the same namespace."""

    name: Name
    """The ConfigMap's name."""
    key: str = Field(min_length=1)
    """The key within the ConfigMap."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KyaiModel):
    """One aspect of an object's state, as Kubernetes API conventions describe it."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    type: str
    """CamelCase type, e.g. Ready, Progressing, Degraded, Passed."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str
    """A CamelCase machine-readable reason for the last transition."""
    message: str = ""
    """A human-readable message about the last transition."""
    last_transition_time: str
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was computed from."""


Conditions = Annotated[
    list[Condition],
    Field(
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    ),
]


class StatusBase(KyaiModel):
    """What every KYAI status holds; fields this version does not know are ignored."""

    model_config = ConfigDict(extra="ignore")

    observed_generation: int | None = None
    """The metadata.generation this status describes."""
    conditions: Conditions = Field(default_factory=list)
    """The current conditions (list-map keyed by type)."""
    message: str | None = None
    """A one-line human summary of the current state."""

    def condition(self, type_: str) -> Condition | None:
        """The condition of ``type_``, if set."""
        return next((found for found in self.conditions if found.type == type_), None)


def status_patch(status: KyaiModel) -> dict[str, Any]:
    """The merge patch of a status model: the fields set (camelCase), a None one deleting.

    Writers build status through the models so that a key is spelled once, in api/; fields
    set to None stay in the patch as ``null``, which a JSON merge patch reads as "remove".
    """
    return status.model_dump(mode="json", by_alias=True, exclude_unset=True)
