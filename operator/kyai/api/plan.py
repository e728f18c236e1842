"""What an EvaluationRun resolved when it started: ``status.plan``, one typed plan per run kind.

The operator resolves a run's references once, when the run starts, and keeps the result in
``status.plan``; the run goes on with it whatever changes afterwards. ``status.plan`` is a
discriminated union on ``kind``: one model per kind of run (:data:`RunPlan`). The CRD keeps
the field schemaless (the operator alone writes it); these models are its contract, and the
only place that reads or writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, model_validator

from kyai.api._base import KyaiModel


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


class GatewayToken(KyaiModel):
    """The projected ServiceAccount token a judge pod shows the judge gateway."""

    model_config = KyaiModel.model_config | ConfigDict(frozen=True)

    audience: str
    """The token's audience (the gateway's)."""
    expiration_seconds: int
    """The token's lifetime; the kubelet replaces it at 80 % of it."""


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
    gateway_token: GatewayToken | None = None
    """Set when the judge is the default judge behind the judge gateway: the judge pod mounts
    this token and sends it as its key (``--judge-api-key-file``); there is no Secret."""

    @model_validator(mode="before")
    @classmethod
    def _no_copy(cls, value: Any) -> Any:
        # Plans written before the gateway named a Secret to copy the platform's key from;
        # the key is never copied any more (the run's ``secret`` is all it reads).
        if isinstance(value, Mapping):
            return {
                k: v for k, v in value.items() if k not in ("copySecretFrom", "copy_secret_from")
            }
        return value


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


class PlanBase(KyaiModel):
    """What every kind of run resolves: where its results live."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    results_claim: str
    """The PVC holding the results."""
    own_claim: bool
    """Whether the operator creates that PVC."""

    def to_status(self) -> dict[str, Any]:
        """The ``status.plan`` object (every field, the ``kind`` among them)."""
        return self.model_dump(mode="json", by_alias=True)


class JudgedPlan(PlanBase):
    """A run whose answers are judged: its judges and where the stored answers are."""

    judges: JudgesPlan
    """The judges."""
    generations_path: str
    """Where the judge reads the stored answers."""


class GeneratePlan(JudgedPlan):
    """Generate answers of a Workload on a Snapshot, then judge them."""

    kind: Literal["generate"] = "generate"
    """The run kind (the union's discriminator)."""
    generation_args: list[str] = Field(default_factory=list)
    """The generation worker's command line."""
    candidate_secret: SecretEnv | None = None
    """Where the generation pod reads the candidate's API key from."""
    snapshot_config_map: str | None = None
    """The Snapshot's ConfigMap the generation pod mounts."""
    snapshot_claim: str | None = None
    """The Snapshot's PVC the generation pod mounts read-only instead (large datasets)."""
    preprocess: dict[str, Any] | None = None
    """The spec's preprocessor declaration (``{"preprocess": {...}}``): the generation pod
    reads it from the graders ConfigMap (``PREPROCESS_KEY``) and runs it on the rows."""


class RejudgePlan(JudgedPlan):
    """Judge the stored answers of another run again (``spec.generationFrom``)."""

    kind: Literal["rejudge"] = "rejudge"
    """The run kind (the union's discriminator)."""


class LmEvalPlan(PlanBase):
    """Run lm-evaluation-harness tasks against a Workload (``spec.lmEval``)."""

    kind: Literal["lmEval"] = "lmEval"
    """The run kind (the union's discriminator)."""
    args: list[str]
    """The worker's command line (``kyai lm-eval ...``)."""
    tasks: list[str]
    """The lm-eval tasks."""
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    """The data files' volumes."""
    mounts: list[dict[str, Any]] = Field(default_factory=list)
    """Their mounts."""
    candidate_secret: SecretEnv | None = None
    """Where the pod reads the candidate's API key from."""


#: ``status.plan``: one plan per kind of run, told apart by ``kind``.
RunPlan = Annotated[GeneratePlan | RejudgePlan | LmEvalPlan, Field(discriminator="kind")]

_RUN_PLAN: TypeAdapter[GeneratePlan | RejudgePlan | LmEvalPlan] = TypeAdapter(RunPlan)


def legacy_plan(value: Any) -> Any:
    """A plan as runs started before ``kind`` existed kept it, in today's form.

    Those kept an lm-eval plan under ``lmEval`` beside ``resultsClaim`` and ``ownClaim``,
    and told generating from re-judging runs by ``generate``.
    """
    if not isinstance(value, Mapping) or "kind" in value:
        return value
    if isinstance(value.get("lmEval"), Mapping):
        return {
            **value["lmEval"],
            "kind": "lmEval",
            "resultsClaim": value.get("resultsClaim"),
            "ownClaim": bool(value.get("ownClaim")),
        }
    return {**value, "kind": "generate" if value.get("generate", True) else "rejudge"}


def plan_from_status(data: Any) -> GeneratePlan | RejudgePlan | LmEvalPlan:
    """The typed plan of a ``status.plan`` object (today's or an earlier form)."""
    return _RUN_PLAN.validate_python(legacy_plan(data))
