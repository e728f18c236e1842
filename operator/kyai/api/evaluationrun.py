"""EvaluationRun: one candidate on one snapshot, generated then judged."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kyai.api._base import (
    ConfigMapKeyReference,
    KyaiModel,
    LocalObjectReference,
    Name,
    SecretKeyReference,
    StatusBase,
)
from kyai.api.plan import GeneratePlan, LmEvalPlan, RejudgePlan, RunPlan, legacy_plan
from kyai.api.scores import PackedScores, ScoreInterval, question_scores
from kyai.api.serving import ServingStatus
from kyai.api.workload import Quantity

PreservedObject = Annotated[
    dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
]
JudgeName = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]


class LLMJudge(KyaiModel):
    """An OpenAI-compatible judge: an endpoint and model, or an in-cluster Workload."""

    endpoint: Annotated[str, Field(pattern=r"^https?://")] | None = None
    """The judge's OpenAI-compatible base URL."""
    model: str | None = None
    """The judge model's name (default with workloadRef: the Workload's served name)."""
    api_key_secret_ref: SecretKeyReference | None = None
    """The Secret key holding the judge's API key."""
    workload_ref: LocalObjectReference | None = None
    """A Workload serving the judge (instead of endpoint)."""


class PythonGrader(KyaiModel):
    """A Python grader declaration (the grader contract's fields)."""

    contract: Literal["sample", "batch", "model_backed"] = "sample"
    """sample: grade(sample, item[, ctx]); batch: grade_batch(samples[, ctx]); model_backed:
    either, with ctx.responses_create / ctx.embeddings_create routed to the judge."""
    execution: Literal["per_sample", "aggregate"] | None = None
    """Override of the execution mode (default set by the contract)."""
    model_access: Literal["mka1", "none"] | None = None
    """mka1 enables ctx.responses_create / ctx.embeddings_create (default: mka1 for
    model_backed, none otherwise)."""
    metric_id: str = "score"
    """The score key used when the grader returns a single float."""
    source: str | None = None
    """Inline Python source."""
    config_map_ref: ConfigMapKeyReference | None = None
    """A ConfigMap key holding the Python file (instead of source)."""
    timeout_seconds: int = Field(default=120, ge=1, le=600)
    """Sandbox time limit per grader execution."""
    max_model_calls: int = Field(default=64, ge=0, le=500)
    """Model calls one execution may make."""
    metrics: list[str] | None = None
    """Declared metric ids; unexpected batch metrics are dropped."""

    @model_validator(mode="after")
    def _one_source(self) -> PythonGrader:
        if (self.source is None) == (self.config_map_ref is None):
            raise ValueError("a python grader needs exactly one of source, configMapRef")
        return self


class JudgeSpec(KyaiModel):
    """How answers are scored."""

    name: JudgeName | None = None
    """A short name for this judge's results (needed when several judges are listed)."""
    type: Literal["llm", "builtin", "python"] = "llm"
    """llm: an LLM judge (KYAI's default); builtin: the dataset's deterministic grader;
    python: a Python grader."""
    llm: LLMJudge | None = None
    """The LLM judge (type llm; default: the operator's configured platform judge)."""
    workload_ref: LocalObjectReference | None = None
    """Shorthand for llm.workloadRef."""
    python: PythonGrader | None = None
    """The Python grader (type python)."""
    prompt: str | None = Field(default=None, min_length=1)
    """Replaces the snapshot's judge prompt for this judge (changes the comparison key)."""

    @model_validator(mode="after")
    def _consistent(self) -> JudgeSpec:
        if self.type == "python" and self.python is None:
            raise ValueError("judge.type python needs judge.python")
        if self.type != "python" and self.python is not None:
            raise ValueError("judge.python applies only to judge.type python")
        if self.type != "llm" and (self.llm is not None or self.workload_ref is not None):
            raise ValueError("judge.llm and judge.workloadRef apply only to judge.type llm")
        if (
            self.llm is not None
            and self.llm.endpoint
            and (self.llm.workload_ref is not None or self.workload_ref is not None)
        ):
            raise ValueError("judge.llm.endpoint and a judge workloadRef exclude each other")
        return self

    @property
    def judge_workload(self) -> str | None:
        """The Workload serving this LLM judge, if any."""
        if self.workload_ref is not None:
            return self.workload_ref.name
        if self.llm is not None and self.llm.workload_ref is not None:
            return self.llm.workload_ref.name
        return None


class SamplingSettings(KyaiModel):
    """Sampling parameters sent with every generation request (each enters the comparison key).

    Unset: the parameter is not sent, and the server's and the model's generation defaults
    decide.
    """

    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature (0: greedy)."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling's top_p."""
    seed: int | None = Field(default=None, ge=0)
    """The sampling seed."""

    def sent(self) -> dict[str, float | int]:
        """The parameters as the request names them (only those set)."""
        chosen = {"temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        return {name: value for name, value in chosen.items() if value is not None}


class GenerationSettings(KyaiModel):
    """How the candidate is asked."""

    concurrency: int = Field(default=16, ge=1, le=1024)
    """Requests in flight at most."""
    request_timeout_seconds: int = Field(default=600, ge=1, le=86400)
    """Time one request may take."""
    max_retries: int = Field(default=5, ge=0, le=50)
    """Retries after 429, 5xx, time-outs and connection errors."""
    stream: bool = True
    """Ask for streamed answers (server-sent events), which time the first token (TTFT) and
    each token after it; false: whole answers (the worker's --no-stream), no TTFT, TPOT or
    ITL. The answers stored are the same either way."""
    sampling: SamplingSettings | None = None
    """Sampling parameters sent with every request (temperature, topP, seed); they enter the
    comparison key, so runs with other settings are never ranked together. Unset: none are
    sent (the server's and the model's generation defaults)."""
    limit: int | None = Field(default=None, ge=1)
    """Ask only the first N questions (a smoke test, lm-eval's --limit): the result is marked
    as a subset, with a comparison key of its own, never ranked with runs of every
    question."""


class GenerationFrom(KyaiModel):
    """Re-judge the stored answers of another run: the candidate is not called."""

    run_ref: LocalObjectReference
    """The EvaluationRun whose generations are judged again: a run that generated answers,
    or a re-judge of one (never this run itself, refused at admission; re-judges in a circle
    are Stalled, CircularRejudge)."""


#: The CRD's admission rule against a re-judge of itself. At the root, where a rule may read
#: ``metadata.name`` (set by then, ``generateName`` too: the API server names the object
#: before it validates it). Only while the run has no status (a create; an update before
#: the operator first looked): an object stored before the rule must still take the status
#: and finalizer writes it gets; the operator Stalls a re-judge of itself
#: (``CircularRejudge``) whatever admitted it.
GENERATION_FROM_SELF_RULE = {
    "rule": "has(self.status) || !has(self.spec.generationFrom) || "
    "self.spec.generationFrom.runRef.name != self.metadata.name",
    "message": "spec.generationFrom.runRef.name names this EvaluationRun itself: a re-judge "
    "judges the stored answers of another run (name the run that generated them)",
}


# -- lm-evaluation-harness runs and metric gates (issue 13) ---------------------------------

#: status.metrics and thresholds.metrics hold at most this many entries (object size).
MAX_METRICS = 64

#: A metric's key: "<task or judge>/<metric>[,<filter>]" (lm-eval's "<metric>,<filter>").
_METRIC_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,100}/[A-Za-z0-9_.:-]{1,100}(,[A-Za-z0-9_.:-]{1,100})?")


class LmEvalPersistentVolumeFile(KyaiModel):
    """A file on a PersistentVolumeClaim of the run's namespace."""

    claim_name: Name
    """The claim."""
    path: Annotated[str, Field(min_length=1, pattern=r"^[^/].*$")]
    """The file's path inside the claim (relative)."""


class LmEvalDataFile(KyaiModel):
    """One split of a task's documents, in the task's native format (JSON lines)."""

    split: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=63)]
    """The split the task reads (gsm8k: test, and train for few-shot examples)."""
    config_map_ref: ConfigMapKeyReference | None = None
    """A ConfigMap key holding the file."""
    persistent_volume_claim: LmEvalPersistentVolumeFile | None = None
    """A file on a PVC (large sets)."""

    @model_validator(mode="after")
    def _one_source(self) -> LmEvalDataFile:
        if (self.config_map_ref is None) == (self.persistent_volume_claim is None):
            raise ValueError("a data file needs exactly one of configMapRef, persistentVolumeClaim")
        return self


class LmEvalTask(KyaiModel):
    """One lm-evaluation-harness task."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)]
    """The lm-eval task (gsm8k, gsm8k_cot, leaderboard_ifeval, ...)."""
    limit: int | None = Field(default=None, ge=1)
    """At most this many documents."""
    num_fewshot: int | None = Field(default=None, ge=0, le=64)
    """Few-shot examples per prompt (default: the task's)."""
    gen_kwargs: str | None = Field(default=None, max_length=1000)
    """lm-eval's --gen_kwargs (k=v,k=v)."""
    data_files: list[LmEvalDataFile] | None = Field(default=None, max_length=8)
    """Run offline on these files (the task's native format) instead of downloading."""


class LmEvalSpec(KyaiModel):
    """Run lm-evaluation-harness tasks against the Workload (instead of a Snapshot)."""

    tasks: list[LmEvalTask] = Field(min_length=1, max_length=16)
    """The tasks, run one after the other."""
    chat: bool = True
    """Use the chat endpoint (local-chat-completions, with the chat template); false:
    /v1/completions."""
    fewshot_as_multiturn: bool = False
    """Few-shot examples as a multi-turn chat."""

    @model_validator(mode="after")
    def _unique(self) -> LmEvalSpec:
        names = [task.name for task in self.tasks]
        if len(set(names)) != len(names):
            raise ValueError("spec.lmEval.tasks: each task at most once")
        return self


class PreprocessorSpec(KyaiModel):
    """A Python preprocessor run on the snapshot's rows before generation (seed 001)."""

    contract: Literal["sample", "batch"] = "sample"
    """sample: transform(row); batch: transform_batch(rows)."""
    source: str | None = None
    """Inline Python source."""
    config_map_ref: ConfigMapKeyReference | None = None
    """A ConfigMap key holding the Python file (instead of source)."""
    timeout_seconds: int = Field(default=120, ge=1, le=600)
    """Sandbox time limit for the whole preprocessing."""

    @model_validator(mode="after")
    def _one_source(self) -> PreprocessorSpec:
        if (self.source is None) == (self.config_map_ref is None):
            raise ValueError("a preprocessor needs exactly one of source, configMapRef")
        return self


class NonInferiority(KyaiModel):
    """Gate on a paired comparison with a baseline run (same comparison key, same rows)."""

    baseline_ref: LocalObjectReference
    """The EvaluationRun this run is compared with (the baseline; this run is the candidate)."""
    margin: float = Field(ge=0, le=1)
    """The margin M in score units (0.02 is 2 points): this run passes when the low end of the
    95 % interval of the paired difference (this run - the baseline) is above -M."""


class Thresholds(KyaiModel):
    """Gates reported in the Passed condition."""

    avg_score: float | None = Field(default=None, ge=0, le=1)
    """The lowest acceptable avgScore."""
    max_error_rate: float | None = Field(default=None, ge=0, le=1)
    """The highest acceptable share of rows that errored."""
    metrics: dict[str, float] | None = Field(
        default=None, max_length=MAX_METRICS, json_schema_extra={"maxProperties": MAX_METRICS}
    )
    """The lowest acceptable value of any metric in status.metrics, by its key
    ("gsm8k/exact_match,flexible-extract", "ifeval/prompt_level_strict_acc"); a gated metric
    that is missing fails the gate (and reads -1 in status.metrics)."""
    non_inferiority: NonInferiority | None = None
    """Passes when this run is non-inferior to a baseline run by a paired comparison of their
    per-question scores (95 % interval: Bonett-Price and McNemar exact for 0/1 scores, else t
    and paired t). The run waits for the baseline to succeed once its own Jobs are done; runs
    of different comparison keys or rows are never compared (Passed False, NotComparable),
    nor continuous scores whose differences are all equal (Passed False, NotEstimable)."""

    @field_validator("metrics")
    @classmethod
    def _metric_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not _METRIC_KEY.fullmatch(key):
                raise ValueError(
                    f"thresholds.metrics: {key!r} is not '<task or judge>/<metric>[,<filter>]' "
                    "(letters, digits, _ . : -)"
                )
        return value


class Storage(KyaiModel):
    """Where raw outputs live: a PVC per run, or an existing claim."""

    existing_claim: Name | None = None
    """Use this PVC (results go to a sub-directory named after the run)."""
    size: Quantity = "1Gi"
    """Size of the PVC the operator creates."""
    storage_class_name: str | None = None
    """StorageClass of the PVC the operator creates (default: the cluster's)."""


class JobSettings(KyaiModel):
    """The generation and judge Jobs."""

    backoff_limit: int = Field(default=2, ge=0, le=10)
    """Pod retries of each Job (a retried generation resumes where it stopped)."""
    active_deadline_seconds: int | None = Field(default=None, ge=60)
    """Time limit of each Job."""


#: The kinds of run: generate answers then judge them, judge another run's stored answers
#: again, run lm-evaluation-harness tasks. The status plan of each: :mod:`kyai.api.plan`.
RunKindName = Literal["generate", "rejudge", "lmEval"]


@dataclass(frozen=True)
class KindField:
    """A spec field that makes a run of another kind than generate + judge."""

    kind: RunKindName
    """The kind of run it makes."""
    field: str
    """The spec field (Python name)."""
    needs: tuple[tuple[str, str], ...] = ()
    """Other fields it needs, each with why."""
    excludes: tuple[str, ...] = ()
    """Fields it cannot be combined with."""


#: The spec fields choosing the kind of run, the first set one wins (none: generate + judge).
#: A new kind of run is one more line here (and its spec field).
KIND_FIELDS: tuple[KindField, ...] = (
    KindField(
        "lmEval",
        "lm_eval",
        needs=(("workload_ref", "the server it asks"),),
        excludes=("snapshot_ref", "judge", "judges", "generation_from", "preprocessors"),
    ),
    KindField("rejudge", "generation_from"),
)


def _spec_path(field: str) -> str:
    """``spec.<camelCase>`` of a spec field's Python name."""
    return f"spec.{to_camel(field)}"


class EvaluationRunSpec(KyaiModel):
    """One candidate (Workload) on one question set (Snapshot)."""

    workload_ref: LocalObjectReference | None = None
    """The candidate. Required unless generationFrom is set."""
    snapshot_ref: LocalObjectReference | None = None
    """The question set. Required unless generationFrom is set."""
    judge: JudgeSpec | None = None
    """How answers are scored (default: the operator's configured judge)."""
    judges: list[JudgeSpec] | None = None
    """Several judges on the same answers (each its own score and comparison key, plus
    agreement figures); instead of judge."""
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    """How the candidate is asked."""
    generation_from: GenerationFrom | None = None
    """Re-judge another run's stored answers instead of generating."""
    thresholds: Thresholds | None = None
    """Gates for the Passed condition."""
    storage: Storage = Field(default_factory=Storage)
    """Where raw outputs live."""
    jobs: JobSettings = Field(default_factory=JobSettings)
    """Job settings."""
    lm_eval: LmEvalSpec | None = None
    """Run lm-evaluation-harness tasks against the Workload instead of a Snapshot and judges
    (their metrics go to status.metrics; gate them with thresholds.metrics)."""
    preprocessors: list[PreprocessorSpec] | None = Field(default=None, max_length=1)
    """A Python preprocessor applied to the snapshot's rows before generation."""
    embedding_model: str | None = Field(default=None, min_length=1, max_length=253)
    """The embedding model of model_backed graders (ctx.embeddings_create with model auto)."""

    @model_validator(mode="after")
    def _refs(self) -> EvaluationRunSpec:
        chosen = self.kind_field
        if chosen is not None:
            self._check_kind_field(chosen)
        elif self.workload_ref is None or self.snapshot_ref is None:
            missing = [
                field
                for field, value in (
                    ("spec.workloadRef", self.workload_ref),
                    ("spec.snapshotRef", self.snapshot_ref),
                )
                if value is None
            ]
            raise ValueError(
                f"{' and '.join(missing)} required (or spec.generationFrom to re-judge)"
            )
        if self.judge is not None and self.judges:
            raise ValueError("set spec.judge or spec.judges, not both")
        if self.thresholds is not None and self.thresholds.non_inferiority is not None:
            if self.lm_eval is not None:
                raise ValueError(
                    "spec.thresholds.nonInferiority compares per-question scores, which "
                    "spec.lmEval runs do not have: gate them with thresholds.metrics"
                )
        if self.judges:
            names = [judge.name for judge in self.judges]
            if len(self.judges) > 1 and (None in names or len(set(names)) != len(names)):
                raise ValueError("spec.judges: each judge needs a unique name")
        return self

    def _check_kind_field(self, chosen: KindField) -> None:
        clash = [_spec_path(field) for field in chosen.excludes if getattr(self, field)]
        generation = self.generation
        for name in ("sampling", "limit"):  # only a run that generates asks the candidate
            if getattr(generation, name) is not None:
                clash.append(f"spec.generation.{name}")
        if clash:
            raise ValueError(f"{_spec_path(chosen.field)} excludes {', '.join(clash)}")
        for field, why in chosen.needs:
            if getattr(self, field) is None:
                raise ValueError(f"{_spec_path(chosen.field)} needs {_spec_path(field)} ({why})")

    @property
    def kind_field(self) -> KindField | None:
        """The spec field that makes this run another kind than generate + judge, if any."""
        return next((entry for entry in KIND_FIELDS if getattr(self, entry.field)), None)

    @property
    def kind(self) -> RunKindName:
        """The kind of run: ``generate`` (+ judge), ``rejudge`` or ``lmEval``."""
        chosen = self.kind_field
        return chosen.kind if chosen is not None else "generate"

    def judge_list(self) -> list[JudgeSpec]:
        """The judges to run (an empty JudgeSpec stands for the default judge)."""
        if self.judges:
            return list(self.judges)
        return [self.judge or JudgeSpec()]


EvaluationRunPhase = Literal["Pending", "Generating", "Judging", "Succeeded", "Failed"]


class Progress(KyaiModel):
    """Live progress reported by the workers."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    phase: str | None = None
    """generate or judge."""
    done: int | None = None
    """Rows finished."""
    total: int | None = None
    """Rows in all."""
    errors: int | None = None
    """Rows that errored so far."""
    message: str | None = None
    """What the worker is doing when it is not only answering rows: the endpoint check, a
    retry ("candidate unreachable: connection refused; attempt 3 of 6, next in 4 s"), the
    reason an endpoint check failed."""
    updated_at: str | None = None
    """When the workers last reported."""


class JudgeResult(KyaiModel):
    """One judge's result when several judges score the same answers."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    name: str
    """The judge's name."""
    avg_score: float | None = None
    """Its average score."""
    comparison_key: str | None = None
    """Its comparison key."""
    error_count: int | None = None
    """Rows it scored 0 because of an error."""
    judge_model: str | None = None
    """The judge model, or the grader's name."""


class Subset(KyaiModel):
    """The questions a run asked when it asked only the first ones (``generation.limit``)."""

    limit: int
    """The first ``limit`` questions were asked."""
    of: int
    """Of this many in the snapshot."""


class WorkerStatus(KyaiModel):
    """The status fields a worker Job may write into its run (the operator owns the others).

    Workers (``kyai generate``, ``kyai judge``, ``kyai run``, ``kyai lm-eval``) report live
    progress and, once done, their result; phase, conditions and the plan are the operator's.
    A field a worker writes is added here (and so to :class:`EvaluationRunStatus`).
    """

    model_config = KyaiModel.model_config | ConfigDict(extra="forbid")

    progress: Progress | None = None
    """Live progress of the current phase."""
    avg_score: float | None = None
    """Mean score over every question (errors count 0)."""
    avg_latency_ms: float | None = None
    """Mean latency of the candidate's successful answers."""
    questions: int | None = None
    """Questions in the snapshot (the questions asked, for a subset)."""
    subset: Subset | None = None
    """Set when only the first questions were asked (spec.generation.limit): the score is a
    subset's, with a comparison key of its own."""
    errors: dict[str, int] | None = None
    """Rows scored 0 because of an error, by kind."""
    error_count: int | None = None
    """Rows scored 0 because of an error."""
    comparison_key: str | None = None
    """Results with equal keys may be ranked against each other."""
    dataset: str | None = None
    """The snapshot's dataset name."""
    dataset_version: str | None = None
    """The snapshot's version."""
    dataset_sha256: str | None = None
    """The snapshot's content hash."""
    judge_model: str | None = None
    """The judge model (or grader) that scored the answers."""
    scores: list[float] | None = None
    """Per-question scores in row order, for runs of at most 1,000 questions (larger runs:
    scoresPacked)."""
    scores_packed: PackedScores | None = None
    """Per-question scores in row order, packed, for runs of more than 1,000 questions (none
    when they do not fit its 256 KiB)."""
    avg_score_interval: ScoreInterval | None = None
    """The 95 % interval of avgScore (Wilson for 0/1 scores, else t; none under 2 questions)."""
    serving: ServingStatus | None = None
    """The generation phase's serving figures (TTFT, TPOT, ITL, E2E, throughput, GPU-seconds;
    the engine's own under serving.server)."""
    judges: list[JudgeResult] | None = None
    """Per-judge results when several judges are listed."""
    metrics: dict[str, float] | None = Field(
        default=None, max_length=MAX_METRICS, json_schema_extra={"maxProperties": MAX_METRICS}
    )
    """Named run-level metrics ("<task or judge>/<metric>[,<filter>]"): lm-eval's, the
    built-in graders' and the Python graders' (at most 64; -1 for a gated metric missing)."""
    agreement: Annotated[
        dict[str, Any] | None,
        Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}),
    ] = None
    """Agreement between judges (exact agreement, mean absolute difference, Cohen's kappa)."""

    def not_comparable_with(self, baseline: WorkerStatus, *, this: str, name: str) -> str | None:
        """Why this run (called ``this``) and the run ``name`` answer different questions.

        None when they answer the same ones: the same comparison key, as many questions, the
        same rows (dataset sha256, when both report it). Said as the run's conditions say it.
        """
        if self.comparison_key != baseline.comparison_key:
            return (
                f"not compared with the baseline {name}: the comparison keys differ ({this} "
                f"{self.comparison_key}, {name} {baseline.comparison_key}); runs of different "
                "keys answer different questions (dataset, prompts, judge or scoring)"
            )
        if self.questions != baseline.questions:
            return (
                f"not compared with the baseline {name}: {this} has {self.questions} "
                f"questions, {name} {baseline.questions}"
            )
        shas = (self.dataset_sha256, baseline.dataset_sha256)
        if None not in shas and shas[0] != shas[1]:
            return (
                f"not compared with the baseline {name}: the rows differ (dataset sha256 "
                f"{shas[0]} in {this}, {shas[1]} in {name})"
            )
        return None

    def question_scores(self, *, where: str = "the run") -> tuple[float, ...]:
        """Every question's score in row order, from ``scores`` or ``scoresPacked``.

        Raises :class:`~kyai.api.scores.ScoresError` saying why there are none (``where``
        names the run).
        """
        return question_scores(
            self.scores, self.scores_packed, questions=self.questions, where=where
        )


class NonInferiorityResult(KyaiModel):
    """The paired comparison with the baseline that set Passed (thresholds.nonInferiority)."""

    model_config = KyaiModel.model_config | ConfigDict(extra="ignore")

    baseline: str
    """The baseline run."""
    margin: float
    """The margin M (score units)."""
    questions: int
    """Questions compared (paired)."""
    mean_difference: float
    """Mean of (this run's score - the baseline's) over the questions."""
    standard_error: float | None = None
    """The standard error of the interval: Bonett-Price's for 0/1 scores, else sd/√n of the
    differences (none when not estimable)."""
    low: float | None = None
    """Low end of the difference's interval (none when not estimable)."""
    high: float | None = None
    """High end of the difference's interval (none when not estimable)."""
    interval_method: Literal["bonett-price", "t"] | None = None
    """bonett-price (every score of both runs 0 or 1) or t."""
    confidence: float
    """The interval's confidence."""
    test: Literal["mcnemar-exact", "paired-t"]
    """The test: exact McNemar when every score of both runs is 0 or 1, else paired t."""
    p_value: float | None = None
    """Its two-sided p-value (none when not estimable)."""
    non_inferior: bool | None = None
    """Whether low > -margin; none when no verdict can be drawn (notEstimable)."""
    not_estimable: str | None = None
    """Why the interval cannot be estimated (continuous scores whose differences are all
    equal): no verdict, Passed False (NotEstimable)."""


#: The phases in which a run's worker Jobs run, and the status field naming each one's Job.
JOB_PHASES: dict[str, str] = {"Generating": "generation_job", "Judging": "judge_job"}


class RunStatusHead(StatusBase):
    """The fields of a run's status the operator reads on every event (a quick parse)."""

    phase: EvaluationRunPhase | None = None
    """Pending, Generating, Judging, Succeeded or Failed."""
    generation_job: str | None = None
    """The generation Job's name."""
    judge_job: str | None = None
    """The judge Job's name."""
    accepted_spec: PreservedObject | None = None
    """The spec the run started with."""

    @property
    def finished(self) -> bool:
        """Whether the run has ended (Succeeded or Failed)."""
        return self.phase in ("Succeeded", "Failed")

    def current_job(self) -> str | None:
        """The Job of the current phase (None outside Generating and Judging)."""
        field = JOB_PHASES.get(self.phase or "")
        return None if field is None else getattr(self, field)


def _plan_schema() -> dict[str, Any]:
    # Schemaless in the CRD: the operator alone writes it, through the models of kyai.api.plan.
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


class EvaluationRunStatus(RunStatusHead, WorkerStatus):
    """The run's phase and, once judged, its scores."""

    model_config = StatusBase.model_config | ConfigDict(extra="ignore")

    started_at: str | None = None
    """When generation started."""
    completed_at: str | None = None
    """When the run finished."""
    results_claim: str | None = None
    """The PVC holding generations.jsonl, judgements.jsonl and summary.json."""
    results_path: str | None = None
    """The directory of this run's results inside the claim."""
    workload: str | None = None
    """The Workload whose answers are scored (a re-judge's: its source run's)."""
    snapshot: str | None = None
    """The Snapshot the answers are to (a re-judge's: its source run's)."""
    model: str | None = None
    """The candidate's served model name."""
    framework: str | None = None
    """The candidate's serving framework."""
    engine_args_set: str | None = None
    """The EngineArgsSet the served Workload named when the run started (none: the engine's
    own defaults, or an endpoint Workload; a re-judge's: its source run's). Kept with the
    run, so the leaderboard, a sweep's report and kyai view show it after the Workload is
    gone."""
    engine_args_hash: str | None = None
    """The hash of that EngineArgsSet's spec (flags, extra args, env) the engine was rendered
    from when the run started: the Workload's status.engineArgsHash, as its pods' annotation
    kyai.io/engine-args-hash."""
    spec_hash: str | None = None
    """Hash of the spec the run started with (later spec changes are ignored)."""
    non_inferiority: NonInferiorityResult | None = None
    """The paired comparison with spec.thresholds.nonInferiority's baseline, once made."""
    plan: Annotated[
        RunPlan | None, BeforeValidator(legacy_plan), WithJsonSchema(_plan_schema())
    ] = None
    """What the operator resolved when the run started (endpoints, models, Secret names,
    worker arguments): the run goes on with it whatever changes afterwards."""

    @field_serializer("plan")
    def _whole_plan(self, plan: GeneratePlan | RejudgePlan | LmEvalPlan | None) -> Any:
        # Every field of the plan, its kind among them, even in a patch of the fields set.
        return None if plan is None else plan.to_status()
