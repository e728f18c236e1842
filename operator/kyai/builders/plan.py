"""What an EvaluationRun resolved when it started: a typed plan, kept in ``status.plan``.

The controller resolves the plan once (:mod:`kyai.controllers._plan`); the builders turn it
into Jobs and their arguments; :meth:`Plan.to_status` and :meth:`Plan.from_status` are the only
place that converts it to and from the status (the CRD keeps ``status.plan`` schemaless, so
these models are its contract).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from kyai.api import KyaiModel


class SecretEnv(KyaiModel):
    """An environment variable of a worker filled from a Secret key."""

    model_config = KyaiModel.model_config | ConfigDict(frozen=True)

    env: str
    """The variable's name (what the worker's ``--*-api-key-env`` flag names)."""
    secret: str
    """The Secret's name, in the run's namespace."""
    key: str
    """The key within the Secret."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_list(cls, value: Any) -> Any:
        # Plans written before this model kept a secret as [env, secret, key].
        if isinstance(value, list | tuple) and len(value) == 3:
            return {"env": value[0], "secret": value[1], "key": value[2]}
        return value

    def env_entry(self) -> dict[str, Any]:
        """The container ``env`` entry."""
        return {
            "name": self.env,
            "valueFrom": {"secretKeyRef": {"name": self.secret, "key": self.key}},
        }


class SecretSource(KyaiModel):
    """A Secret key in another namespace (the platform judge's), copied into the run's."""

    model_config = KyaiModel.model_config | ConfigDict(frozen=True)

    namespace: str
    """The Secret's namespace."""
    name: str
    """The Secret's name."""
    key: str
    """The key within the Secret."""

    @model_validator(mode="before")
    @classmethod
    def _legacy_list(cls, value: Any) -> Any:
        if isinstance(value, list | tuple) and len(value) == 3:
            return {"namespace": value[0], "name": value[1], "key": value[2]}
        return value


class LLMJudgePlan(KyaiModel):
    """A resolved LLM judge (also the model endpoint of model-backed graders)."""

    endpoint: str
    """The judge's OpenAI-compatible base URL."""
    model: str
    """The judge model."""
    secret: SecretEnv | None = None
    """Where the judge pod reads the API key from."""
    prompt: str | None = None
    """The run's own judge prompt (else the snapshot's)."""
    copy_secret_from: SecretSource | None = None
    """The platform judge's Secret the operator copies into ``secret`` first."""


class JudgesPlan(KyaiModel):
    """Every judge of a run: at most one LLM judge, the built-in grader, Python graders."""

    llm: LLMJudgePlan | None = None
    """The LLM endpoint (the LLM judge's, or the one model-backed graders call)."""
    use_llm: bool = False
    """Whether the LLM judge scores the answers (not only serves graders)."""
    builtin: bool = False
    """Whether the dataset's deterministic grader scores the answers."""
    graders: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Python grader declarations by the spec's judge name."""
    names: dict[str, str] = Field(default_factory=dict)
    """The spec's names of the ``llm`` and ``builtin`` judges (the worker reports these)."""

    @property
    def model(self) -> str:
        """What status.judgeModel shows: the LLM judge, else the first grader."""
        if self.use_llm and self.llm is not None:
            return self.llm.model
        if self.builtin:
            return "builtin"
        return next(iter(self.graders), "python")


class Plan(KyaiModel):
    """Everything a started run needs, resolved once and kept in its status."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    generate: bool
    """Whether the run generates answers (False: it re-judges another run's)."""
    generation_args: list[str] = Field(default_factory=list)
    """The generation worker's command line (empty when not generating)."""
    candidate_secret: SecretEnv | None = None
    """Where the generation pod reads the candidate's API key from."""
    snapshot_config_map: str | None = None
    """The Snapshot's ConfigMap the generation pod mounts."""
    snapshot_claim: str | None = None
    """The Snapshot's PVC the generation pod mounts read-only instead (large datasets)."""
    results_claim: str
    """The PVC holding the results."""
    own_claim: bool
    """Whether the operator creates that PVC."""
    judges: JudgesPlan
    """The judges."""
    generations_path: str
    """Where the judge reads the stored answers."""
    preprocess: dict[str, Any] | None = None
    """The spec's preprocessor declaration (``{"preprocess": {...}}``): the generation pod
    reads it from the graders ConfigMap (``PREPROCESS_KEY``) and runs it on the rows."""

    def to_status(self) -> dict[str, Any]:
        """The ``status.plan`` object."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_status(cls, data: Any) -> Plan:
        """The plan kept in ``status.plan``."""
        return cls.model_validate(data)
