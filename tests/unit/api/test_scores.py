"""Per-question scores in a run's status: listed, packed, and the one reader of both."""

from __future__ import annotations

import base64
import random
import zlib

import pytest

from kyai.api import (
    MAX_LISTED_SCORES,
    PACKED_SCORES_BUDGET,
    EvaluationRunStatus,
    PackedScores,
    ScoresError,
    custom_resource_definitions,
    pack_scores,
    question_scores,
    status_patch,
    unpack_scores,
)

SHA = "a" * 64


def binary(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [float(rng.random() < 0.7) for _ in range(n)]


def continuous(n: int, seed: int = 2) -> list[float]:
    rng = random.Random(seed)
    return [rng.random() for _ in range(n)]


def tenths(n: int, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [rng.randint(0, 10) / 10 for _ in range(n)]


@pytest.mark.parametrize("n", [10_000, 100_000])
def test_binary_scores_pack_one_bit_each_and_come_back_exact(n: int) -> None:
    scores = binary(n)
    packed = pack_scores(scores, dataset_sha256=SHA)
    assert packed is not None and packed.encoding == "bits-zlib-base64"
    assert (packed.count, packed.dataset_sha256) == (n, SHA)
    assert unpack_scores(packed) == tuple(scores)
    # One bit per question before compression, base64 adds a third: well within the budget.
    assert len(packed.data) <= 4 * (n // 8) // 3 + 64
    print(f"\n{n:,} binary scores: {len(packed.data):,} characters packed")


def test_continuous_scores_pack_as_doubles_until_the_budget() -> None:
    small = continuous(10_000)
    packed = pack_scores(small)
    assert packed is not None and packed.encoding == "f64le-zlib-base64"
    assert unpack_scores(packed) == tuple(small)  # exact: the same doubles
    assert PACKED_SCORES_BUDGET // 2 > len(packed.data) > 8 * 10_000  # random doubles: no gain
    # 100,000 random doubles are 800 KB before base64: over the 256 KiB budget, not kept.
    assert pack_scores(continuous(100_000)) is None
    # Scores of few distinct values compress well: 100,000 judge scores in tenths fit.
    judged = tenths(100_000)
    packed_tenths = pack_scores(judged)
    assert packed_tenths is not None and len(packed_tenths.data) < PACKED_SCORES_BUDGET
    assert unpack_scores(packed_tenths) == tuple(judged)
    print(
        f"\n10,000 random continuous scores: {len(packed.data):,} characters; 100,000 in "
        f"tenths: {len(packed_tenths.data):,}"
    )


def test_the_budget_is_the_packed_size_limit() -> None:
    scores = continuous(2_000)
    packed = pack_scores(scores)
    assert packed is not None
    assert pack_scores(scores, budget=len(packed.data)) == packed
    assert pack_scores(scores, budget=len(packed.data) - 1) is None


def test_the_first_question_is_the_highest_bit_of_the_first_byte() -> None:
    packed = pack_scores([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    assert packed is not None
    assert zlib.decompress(base64.b64decode(packed.data)) == bytes([0x81, 0x80])


def test_mixed_or_empty_score_lists() -> None:
    mixed = pack_scores([0.0, 0.5, 1.0])
    assert mixed is not None and mixed.encoding == "f64le-zlib-base64"
    assert unpack_scores(mixed) == (0.0, 0.5, 1.0)
    empty = pack_scores([])
    assert empty is not None and empty.count == 0 and unpack_scores(empty) == ()


def damaged(packed: PackedScores, **changes: object) -> PackedScores:
    return packed.model_copy(update=changes)


def test_damaged_packed_scores_are_refused_naming_the_field() -> None:
    good = pack_scores(binary(100))
    assert good is not None
    with pytest.raises(ScoresError, match=r"status.scoresPacked.data cannot be decoded"):
        unpack_scores(damaged(good, data="not base64!"))
    with pytest.raises(ScoresError, match="cannot be decoded"):
        unpack_scores(damaged(good, data=base64.b64encode(b"not zlib").decode()))
    with pytest.raises(ScoresError, match="13 bytes of bits for 120 questions"):
        unpack_scores(damaged(good, count=120))
    doubles = pack_scores([0.5, 0.25])
    assert doubles is not None
    with pytest.raises(ScoresError, match="16 bytes of doubles for 3 questions"):
        unpack_scores(damaged(doubles, count=3))
    wild = base64.b64encode(zlib.compress(bytes(8) + b"\x00" * 7 + b"\x40")).decode()
    with pytest.raises(ScoresError, match=r"the score of row 1 is 2\.0, not in \[0, 1\]"):
        unpack_scores(damaged(doubles, data=wild))


def test_question_scores_read_the_list_then_the_packed_form() -> None:
    assert question_scores([1, 0.5], None) == (1.0, 0.5)
    many = binary(MAX_LISTED_SCORES + 1)
    packed = pack_scores(many)
    assert question_scores(None, packed, questions=len(many)) == tuple(many)
    with pytest.raises(ScoresError, match="holds 2 per-question scores for 3 questions"):
        question_scores([1.0, 0.0], None, questions=3)


def test_why_a_status_has_no_scores_is_said() -> None:
    with pytest.raises(ScoresError, match=r"^no per-question scores in the status of r \("):
        question_scores(None, None, questions=100, where="r")
    with pytest.raises(ScoresError, match=r"its 100,000 scores do not fit .* 256 KiB"):
        question_scores(None, None, questions=100_000, where="r")


def test_the_status_carries_packed_scores_through_the_api() -> None:
    scores = binary(5_000)
    status = EvaluationRunStatus(
        questions=5_000, scores_packed=pack_scores(scores, dataset_sha256=SHA)
    )
    patch = status_patch(status)
    assert set(patch["scoresPacked"]) == {"encoding", "count", "datasetSha256", "data"}
    read = EvaluationRunStatus.model_validate(patch)
    assert read.question_scores() == tuple(scores)
    assert EvaluationRunStatus(questions=2, scores=[0.0, 1.0]).question_scores() == (0.0, 1.0)


def test_the_crd_refuses_packed_data_over_the_budget() -> None:
    (run,) = [
        c for c in custom_resource_definitions() if c["spec"]["names"]["kind"] == "EvaluationRun"
    ]
    status = run["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    packed = status["properties"]["scoresPacked"]
    assert packed["properties"]["data"]["maxLength"] == PACKED_SCORES_BUDGET == 262_144
    assert packed["properties"]["encoding"]["enum"] == ["bits-zlib-base64", "f64le-zlib-base64"]
    assert set(packed["required"]) == {"encoding", "count", "data"}


def test_exclusive_bounds_are_written_as_openapi_3_0_wants_them() -> None:
    # Pydantic writes gt=0 as "exclusiveMinimum": 0 (JSON Schema 2020-12); kubectl cannot
    # read a number there (its openapi download fails) and an API server refuses the CRD.
    (run,) = [
        c for c in custom_resource_definitions() if c["spec"]["names"]["kind"] == "EvaluationRun"
    ]
    status = run["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    confidence = status["properties"]["avgScoreInterval"]["properties"]["confidence"]
    assert confidence["minimum"] == 0 and confidence["exclusiveMinimum"] is True
    assert confidence["maximum"] == 1 and confidence["exclusiveMaximum"] is True
