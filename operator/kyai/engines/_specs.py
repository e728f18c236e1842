"""What the engines read of a Workload and an EngineArgsSet, as structural types.

The engines sit below the API models (``kyai.api`` derives its framework enum and owned
flags from the engines' registry), so they never import those models, not even for type
checking: :class:`~kyai.api.WorkloadSpec` and :class:`~kyai.api.EngineArgsSetSpec` satisfy
these protocols, and so does anything else with the same attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class SecretKeyLike(Protocol):
    """A key of a Secret."""

    @property
    def name(self) -> str:
        """The Secret's name."""

    @property
    def key(self) -> str:
        """The key in the Secret's data."""


class ModelCacheLike(Protocol):
    """Where the model cache is mounted."""

    @property
    def mount_path(self) -> str:
        """The mount path inside the engine container."""


class ResourcesLike(Protocol):
    """The accelerators one pod takes."""

    @property
    def gpus(self) -> int:
        """GPUs per pod."""


class WorkloadLike(Protocol):
    """A Workload's spec as the engines read it."""

    @property
    def framework(self) -> str | None:
        """The serving framework (None for an endpoint)."""

    @property
    def engine(self) -> str:
        """The framework of a served Workload (raises when there is none)."""

    @property
    def model(self) -> str:
        """The model argument."""

    @property
    def served_model_name(self) -> str | None:
        """The name asked for in ``spec.servedModelName``, if any."""

    @property
    def served_name(self) -> str:
        """The name clients ask for."""

    @property
    def endpoint(self) -> object | None:
        """Set when the model is served elsewhere."""

    @property
    def image(self) -> str | None:
        """The engine image named in the spec, if any."""

    @property
    def nodes(self) -> int:
        """Nodes per replica."""

    @property
    def resources(self) -> ResourcesLike:
        """What each pod takes."""

    @property
    def model_cache(self) -> ModelCacheLike | None:
        """The model cache, if any."""

    @property
    def hf_token_secret_ref(self) -> SecretKeyLike | None:
        """The HuggingFace token's Secret key, if any."""


class EnvVarLike(Protocol):
    """One literal environment variable."""

    @property
    def name(self) -> str:
        """Its name."""

    @property
    def value(self) -> str:
        """Its value."""


class EngineArgsLike(Protocol):
    """An EngineArgsSet's spec as the engines read it."""

    @property
    def framework(self) -> str:
        """The framework the flags are for."""

    @property
    def args(self) -> Mapping[str, Any]:
        """Flag name to value."""

    @property
    def extra_args(self) -> Sequence[str]:
        """Arguments passed verbatim."""

    @property
    def env(self) -> Sequence[EnvVarLike]:
        """The engine container's variables."""
