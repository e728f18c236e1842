"""Where a run's per-question scores live in its status, and the one reader of them.

A paired comparison (``kyai leaderboard``'s ranks from the cluster, ``spec.thresholds.
nonInferiority``) needs every question's score, in row order. A run's status keeps them in
one of two fields, whichever the judge worker wrote:

- ``status.scores``: a plain list, for runs of at most :data:`MAX_LISTED_SCORES` questions
  (kubectl shows it; tools written before the packed form read it);
- ``status.scoresPacked``: above that, a compact form of the same numbers
  (:class:`PackedScores`): one bit per question when every score is 0 or 1
  (``bits-zlib-base64``), else the little-endian IEEE 754 doubles (``f64le-zlib-base64``),
  compressed with zlib and base64-encoded, at most :data:`PACKED_SCORES_BUDGET` characters
  (256 KiB: well within etcd's 1.5 MiB object limit beside the rest of the status). Scores
  that do not fit (more than about 24,000 continuous scores with many distinct values) are
  not kept; :func:`question_scores` then says so.

Both forms are exact: the decoded numbers are the ones ``summary.json`` holds, so the cluster
and the run directories give the same comparisons and ranks.

Rows are identified by the dataset's sha256 (``status.datasetSha256``, which hashes every row
and its id in order; the packed form carries it too): two runs are compared only when their
comparison keys, their question counts and their dataset sha256 are equal.
"""

from __future__ import annotations

import base64
import binascii
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from kyai.api._base import KyaiModel

__all__ = [
    "MAX_LISTED_SCORES",
    "PACKED_SCORES_BUDGET",
    "PackedScores",
    "ScoreInterval",
    "ScoresError",
    "pack_scores",
    "question_scores",
    "unpack_scores",
]

#: ``status.scores`` lists the scores of runs up to this many questions.
MAX_LISTED_SCORES = 1000

#: ``status.scoresPacked.data`` holds at most this many characters (256 KiB).
PACKED_SCORES_BUDGET = 256 * 1024

PackedEncoding = Literal["bits-zlib-base64", "f64le-zlib-base64"]


class ScoresError(ValueError):
    """Per-question scores that cannot be read from a status; the message says why."""


class ScoreInterval(KyaiModel):
    """The interval of a run's avgScore (``kyai.stats.score_interval``)."""

    low: float
    """Its low end."""
    high: float
    """Its high end."""
    standard_error: float = Field(ge=0)
    """sd/√n of the per-question scores (sample standard deviation, ddof 1)."""
    confidence: float = Field(default=0.95, gt=0, lt=1)
    """Its confidence (two-sided)."""
    method: Literal["wilson", "t"]
    """wilson: the Wilson score interval (every score 0 or 1); t: mean ± t(1-α/2, n-1)·sd/√n
    clipped to [0, 1]."""


class PackedScores(KyaiModel):
    """Every question's score in row order, packed (runs of more than 1,000 questions)."""

    encoding: PackedEncoding
    """bits-zlib-base64: one bit per question (every score 0 or 1), the first question in the
    highest bit of the first byte; f64le-zlib-base64: one little-endian IEEE 754 double per
    question. Either compressed with zlib (RFC 1950), then base64-encoded (RFC 4648)."""
    count: int = Field(ge=0)
    """Questions (scores) packed."""
    dataset_sha256: str | None = None
    """The sha256 of the dataset the scores are of (its rows and row ids in order)."""
    data: str = Field(max_length=PACKED_SCORES_BUDGET)
    """The packed scores (at most 256 KiB of base64)."""


def _binary(scores: Sequence[float]) -> bool:
    return all(score in (0.0, 1.0) for score in scores)


def _bits(scores: Sequence[float]) -> bytes:
    packed = bytearray((len(scores) + 7) // 8)
    for index, score in enumerate(scores):
        if score:
            packed[index >> 3] |= 0x80 >> (index & 7)
    return bytes(packed)


def _doubles(scores: Sequence[float]) -> bytes:
    values = array("d", (float(score) for score in scores))
    if sys.byteorder == "big":
        values.byteswap()
    return values.tobytes()


def pack_scores(
    scores: Sequence[float],
    *,
    dataset_sha256: str | None = None,
    budget: int = PACKED_SCORES_BUDGET,
) -> PackedScores | None:
    """``scores`` packed (bits when all are 0 or 1, else doubles); None when over ``budget``."""
    binary = _binary(scores)
    raw = _bits(scores) if binary else _doubles(scores)
    data = base64.b64encode(zlib.compress(raw, 9)).decode("ascii")
    if len(data) > budget:
        return None
    return PackedScores(
        encoding="bits-zlib-base64" if binary else "f64le-zlib-base64",
        count=len(scores),
        dataset_sha256=dataset_sha256,
        data=data,
    )


def unpack_scores(packed: PackedScores, *, where: str = "status.scoresPacked") -> tuple[float, ...]:
    """The scores of ``packed``; :class:`ScoresError` (naming ``where``) when damaged."""
    try:
        raw = zlib.decompress(base64.b64decode(packed.data, validate=True))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise ScoresError(f"{where}.data cannot be decoded ({packed.encoding}): {exc}") from exc
    count = packed.count
    if packed.encoding == "bits-zlib-base64":
        if len(raw) != (count + 7) // 8:
            raise ScoresError(
                f"{where}: {len(raw)} bytes of bits for {count} questions "
                f"(expected {(count + 7) // 8})"
            )
        return tuple(float(raw[i >> 3] >> (7 - (i & 7)) & 1) for i in range(count))
    if len(raw) != 8 * count:
        raise ScoresError(
            f"{where}: {len(raw)} bytes of doubles for {count} questions (expected {8 * count})"
        )
    values = array("d")
    values.frombytes(raw)
    if sys.byteorder == "big":
        values.byteswap()
    for index, value in enumerate(values):
        if not 0.0 <= value <= 1.0:  # also NaN
            raise ScoresError(f"{where}: the score of row {index} is {value!r}, not in [0, 1]")
    return tuple(values)


def question_scores(
    scores: Sequence[float] | None,
    packed: PackedScores | None,
    *,
    questions: int | None = None,
    where: str = "the run",
) -> tuple[float, ...]:
    """A run's per-question scores from its status (``scores``, else ``scoresPacked``).

    Raises :class:`ScoresError` saying why there are none (a run whose scores did not fit the
    status's budget, a run of a version that kept none) or why they cannot be read; ``where``
    names the run in the message.
    """
    if scores is not None:
        found = tuple(float(score) for score in scores)
    elif packed is not None:
        found = unpack_scores(packed, where=f"status.scoresPacked of {where}")
    elif questions is not None and questions > MAX_LISTED_SCORES:
        raise ScoresError(
            f"no per-question scores in the status of {where}: its {questions:,} scores do "
            f"not fit (status.scores up to {MAX_LISTED_SCORES:,} questions, "
            f"status.scoresPacked up to {PACKED_SCORES_BUDGET // 1024} KiB); compare its "
            "summary.json instead"
        )
    else:
        raise ScoresError(
            f"no per-question scores in the status of {where} (neither status.scores nor "
            "status.scoresPacked)"
        )
    if questions is not None and len(found) != questions:
        raise ScoresError(
            f"the status of {where} holds {len(found)} per-question scores for {questions} "
            "questions"
        )
    return found
