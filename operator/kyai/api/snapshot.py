"""Snapshot: a named, immutable question set with its prompts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from kyai.api._base import ConfigMapKeyReference, KyaiModel, StatusBase
from kyai.datasets import builtin_names

if TYPE_CHECKING:
    BuiltinName = str
else:  # the datasets registry names the built-ins (and so the CRD's enum)
    BuiltinName = Literal[builtin_names()]


class InlineRow(KyaiModel):
    """One question written in the Snapshot itself."""

    instruction: str = Field(min_length=1)
    """The prompt sent to the candidate."""
    ground_truth_response: str
    """The reference answer the judge compares against."""
    external_row_id: str | None = None
    """An id for cross-referencing the row (default: its 1-based position)."""


class UrlSource(KyaiModel):
    """A dataset file fetched over HTTP(S), pinned by its sha256."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    """Where the file is."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    """The file's sha256 (hex); a different file is refused."""


#: Inline rows: at most this many (the CRD's maxItems) ...
MAX_INLINE_ROWS = 1000
#: ... and this many characters of instruction + groundTruthResponse in all (a CEL rule), so
#: the object stays far below the API server's ~1.5 MiB per object and kubectl apply's copy
#: of it below the 256 KiB of annotations. Larger datasets: configMapRef or url.
MAX_INLINE_CHARACTERS = 200_000

INLINE_TOO_LARGE = (
    f"inline rows hold at most {MAX_INLINE_ROWS} rows and {MAX_INLINE_CHARACTERS} characters "
    "of instruction and groundTruthResponse in all: put a larger dataset in a ConfigMap "
    "(spec.source.configMapRef) or at a URL pinned by its sha256 (spec.source.url)"
)

_INLINE_SIZE_RULE = {
    "rule": "self.map(r, size(r.instruction) + size(r.groundTruthResponse)).sum() <= "
    f"{MAX_INLINE_CHARACTERS}",
    "message": INLINE_TOO_LARGE,
}

InlineRows = Annotated[
    list[InlineRow],
    Field(
        max_length=MAX_INLINE_ROWS,
        json_schema_extra={"x-kubernetes-validations": [_INLINE_SIZE_RULE]},
    ),
]


class Source(KyaiModel):
    """Where the rows come from: exactly one of configMapRef, url, rows."""

    config_map_ref: ConfigMapKeyReference | None = None
    """A key of a ConfigMap holding a JSONL or CSV file (for a built-in: its native file)."""
    url: UrlSource | None = None
    """A file to download (JSONL, CSV; for a built-in: its native file, Parquet too)."""
    rows: InlineRows | None = None
    """The rows themselves, for small sets: at most 1000 rows and 200000 characters of
    instruction and groundTruthResponse in all (larger datasets: configMapRef or url)."""
    format: Literal["jsonl", "csv", "json", "parquet"] | None = None
    """The file's format (default: from the key's or URL's extension)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Source:
        given = [
            name
            for name, value in (
                ("configMapRef", self.config_map_ref),
                ("url", self.url),
                ("rows", self.rows),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "spec.source needs exactly one of configMapRef, url, rows"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.rows is not None:
            characters = sum(len(r.instruction) + len(r.ground_truth_response) for r in self.rows)
            if characters > MAX_INLINE_CHARACTERS:
                raise ValueError(f"spec.source.rows: {INLINE_TOO_LARGE} (got {characters})")
        return self


class Prompts(KyaiModel):
    """The generation system prompt and the judge prompt."""

    generation: str | None = Field(default=None, min_length=1)
    """Sent as the system message before each instruction."""
    judge: str | None = Field(default=None, min_length=1)
    """The judge's system prompt: how to score a response against the ground truth."""


class SnapshotSpec(KyaiModel):
    """A built-in dataset at a version, or custom rows with both prompts."""

    builtin: BuiltinName | None = None
    """A built-in KYAI dataset."""
    version: Literal["v1"] | None = None
    """The built-in's version (default v1)."""
    source: Source | None = None
    """Custom rows; with builtin, the built-in's native file (air-gapped clusters)."""
    hf_revision: str | None = None
    """For a built-in downloaded from HuggingFace: the dataset repository's revision."""
    prompts: Prompts = Field(default_factory=Prompts)
    """Required for custom datasets; for a built-in, replaces the methodology's prompts
    (results are then comparable only with runs using the same prompts)."""

    @model_validator(mode="after")
    def _builtin_or_custom(self) -> SnapshotSpec:
        if self.builtin is None:
            if self.source is None:
                raise ValueError("spec needs builtin or source")
            missing = [
                name for name in ("generation", "judge") if getattr(self.prompts, name) is None
            ]
            if missing:
                raise ValueError(
                    "a custom Snapshot needs both prompts: set "
                    + " and ".join(f"spec.prompts.{name}" for name in missing)
                )
            if self.version is not None or self.hf_revision is not None:
                raise ValueError("spec.version and spec.hfRevision apply to built-ins only")
        elif self.source is not None and self.hf_revision is not None:
            raise ValueError("spec.hfRevision applies only when the built-in is downloaded")
        return self


SnapshotPhase = Literal["Pending", "Resolving", "Ready", "Failed"]


class SnapshotStatus(StatusBase):
    """The resolved rows."""

    phase: SnapshotPhase | None = None
    """Pending, Resolving, Ready or Failed."""
    rows: int | None = None
    """How many questions the snapshot holds."""
    sha256: str | None = None
    """The content hash of the rows (part of every result's comparison key)."""
    dataset: str | None = None
    """The dataset's name (the built-in's, or the Snapshot's)."""
    version: str | None = None
    """v1 for built-ins, custom otherwise."""
    config_map: str | None = None
    """The ConfigMap holding the resolved rows and prompts, mounted by evaluation Jobs."""
    claim: str | None = None
    """The PersistentVolumeClaim holding the resolved rows and prompts instead, for a dataset
    too large for a ConfigMap (written by the Snapshot's load Job, mounted read-only by
    evaluation Jobs); only metadata stays in the API server."""
    compressed: bool | None = None
    """Whether the ConfigMap holds the rows gzip-compressed."""
    spec_hash: str | None = None
    """Hash of the spec the rows were resolved from (the spec may not change afterwards)."""
    resolved_at: str | None = None
    """When the rows were resolved."""
