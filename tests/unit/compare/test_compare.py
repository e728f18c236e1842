"""``kyai compare BASELINE CANDIDATE`` on run directories written by the test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sp

from kyai.cli import main


def right_on(rows: set[int], n: int = 100) -> list[float]:
    return [1.0 if i in rows else 0.0 for i in range(n)]


def run_dir(
    root: Path, name: str, scores: list[float], *, key: str = "key-a",
    row_ids: list[str] | None = None, judges: str | None = None, **extra: Any,
) -> Path:  # fmt: skip
    folder = root / name
    folder.mkdir(parents=True)
    summary: dict[str, Any] = {
        "comparison_key": key, "dataset": "capitals", "dataset_sha256": "sha-1",
        "candidate_model": f"model-{name}", "count": len(scores), "scores": scores,
        "avg_score": round(sum(scores) / len(scores), 6), **extra,
    }  # fmt: skip
    ids = row_ids if row_ids is not None else [f"q{i}" for i in range(len(scores))]
    log = "".join(
        json.dumps({"row_index": i, "row_id": row_id, "score": score}) + "\n"
        for i, (row_id, score) in enumerate(zip(ids, scores, strict=True))
    )
    if judges is None:
        (folder / "judgements.jsonl").write_text(log)
    else:  # several judges: the first one's judgements under judges/<name>/
        summary["judges"] = [{"name": judges}, {"name": "second"}]
        (folder / "judges" / judges).mkdir(parents=True)
        (folder / "judges" / judges / "judgements.jsonl").write_text(log)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def compare(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


BASE = right_on(set(range(60)))  # 0.60
BETTER = right_on(set(range(59)) | set(range(60, 68)))  # 0.67: b = 1, c = 8


def bonett_price(b: int, c: int, n: int) -> tuple[float, float, float]:
    """Bonett & Price (2012) for candidate - baseline: low, high and standard error."""
    pi_b, pi_c = (b + 1) / (n + 2), (c + 1) / (n + 2)
    se = float(np.sqrt((pi_b + pi_c - (pi_c - pi_b) ** 2) / (n + 2)))
    z = sp.norm.ppf(0.975)
    return pi_c - pi_b - z * se, pi_c - pi_b + z * se, se


def test_json_holds_the_issue_keys_with_scipy_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = run_dir(tmp_path, "bf16", BASE), run_dir(tmp_path, "fp8", BETTER)
    status, out, _ = compare(capsys, base, cand, "-o", "json")
    assert status == 0
    data = json.loads(out)
    assert data["n"] == 100 and data["test"] == "mcnemar-exact"
    assert data["discordant"] == {"baseline_only": 1, "candidate_only": 8}
    assert data["p_value"] == sp.binomtest(1, 9, 0.5).pvalue
    assert data["significant"] is True and data["verdict"] == "better"
    assert data["mean_difference"] == pytest.approx(0.07)
    low, high, se = bonett_price(1, 8, 100)
    assert data["interval_method"] == "bonett-price" and data["not_estimable"] is None
    assert (data["interval"]["low"], data["interval"]["high"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    assert data["standard_error"] == pytest.approx(se)
    mde = (sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * se
    assert data["minimum_detectable_effect"] == pytest.approx(mde)
    assert "non_inferior" not in data
    assert data["baseline"]["run"] == "bf16" and data["candidate"]["model"] == "model-fp8"
    wilson = sp.binomtest(60, 100).proportion_ci(0.95, method="wilson")
    assert data["baseline"]["avg_score_interval"]["low"] == pytest.approx(wilson.low)
    assert data["comparison_key"] == "key-a"


def test_the_table_says_it_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = run_dir(tmp_path, "bf16", BASE), run_dir(tmp_path, "fp8", BETTER)
    status, out, _ = compare(capsys, base, cand)
    assert status == 0
    first = out.splitlines()[0]
    assert first == (
        "fp8 (model-fp8) is better than bf16 (model-bf16): +7.0 points (95 % CI +0.6 to "
        "+13.1; McNemar exact p = 0.039) on 100 paired questions."
    )
    assert "score interval" in out and "(95 %, wilson)" in out and "8.9 points with 80 %" in out
    assert "+0.6 to +13.1 points (95 %, Bonett-Price)" in out
    status, out, _ = compare(capsys, cand, base)
    assert out.startswith("bf16 (model-bf16) is worse than fp8 (model-fp8): -7.0 points")
    same = run_dir(tmp_path, "again", right_on(set(range(57))))  # 3 rows fewer: p = 0.25
    status, out, _ = compare(capsys, base, same)
    assert status == 0
    assert out.startswith("No detectable difference between again (model-again) and bf16")
    assert "McNemar exact p = 0.25" in out.splitlines()[0]
    assert "only a true difference of about" in out.splitlines()[0]


def test_non_inferiority_is_a_gate_with_exit_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = run_dir(tmp_path, "bf16", right_on(set(range(70))))
    worse = run_dir(tmp_path, "fp8", right_on(set(range(67))))  # -3 points, CI -7.2 to +1.3
    status, out, _ = compare(capsys, base, worse, "--non-inferiority", "0.02")
    assert status == 4
    assert out.splitlines()[1] == (
        "fp8 (model-fp8) is NOT shown non-inferior to bf16 (model-bf16) with a margin of 2.0 "
        "points: the interval's low end -7.2 points is not above -2.0 (exit status 4)."
    )
    status, out, _ = compare(capsys, base, worse, "--non-inferiority", "0.08", "-o", "json")
    data = json.loads(out)
    assert status == 0 and data["non_inferior"] is True and data["non_inferiority_margin"] == 0.08
    assert data["interval"]["low"] == pytest.approx(bonett_price(3, 0, 100)[0])
    assert data["interval"]["low"] > -0.08
    status, out, _ = compare(capsys, base, worse, "--non-inferiority", "0.08")
    assert status == 0 and "is non-inferior to bf16 (model-bf16) with a margin of 8.0" in out


def test_three_questions_without_discordance_are_never_non_inferior(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The issue: both wrong on all three questions. The interval is about ±55 points.
    a = run_dir(tmp_path, "a", [0.0, 0.0, 0.0])
    b = run_dir(tmp_path, "b", [0.0, 0.0, 0.0])
    status, out, _ = compare(capsys, a, b, "--non-inferiority", "0.05")
    assert status == 4
    lines = out.splitlines()
    assert lines[0] == (
        "No detectable difference between b (model-b) and a (model-a): +0.0 points (95 % CI "
        "-55.4 to +55.4; McNemar exact p = 1) on 3 paired questions; only a true difference "
        "of about 79.2 points or more would be detected with 80 % power."
    )
    assert lines[1] == (
        "b (model-b) is NOT shown non-inferior to a (model-a) with a margin of 5.0 points: "
        "the interval's low end -55.4 points is not above -5.0 (exit status 4)."
    )
    assert "-55.4 to +55.4 points (95 %, Bonett-Price)" in out
    status, out, _ = compare(capsys, a, b, "--non-inferiority", "0.05", "-o", "json")
    data = json.loads(out)
    assert status == 4 and data["non_inferior"] is False
    assert data["interval"]["low"] == pytest.approx(-sp.norm.ppf(0.975) * np.sqrt(0.08))
    assert data["minimum_detectable_effect"] > 0.7 and data["standard_error"] > 0


def test_a_hundred_questions_without_discordance_pass_005_not_002(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = run_dir(tmp_path, "a", right_on(set(range(60))))
    b = run_dir(tmp_path, "b", right_on(set(range(60))))
    status, out, _ = compare(capsys, a, b, "--non-inferiority", "0.05", "-o", "json")
    data = json.loads(out)
    assert status == 0 and data["non_inferior"] is True
    low, high, se = bonett_price(0, 0, 100)
    assert (data["interval"]["low"], data["interval"]["high"]) == pytest.approx((low, high))
    assert high == pytest.approx(0.027, abs=5e-4) and data["standard_error"] == pytest.approx(se)
    assert data["minimum_detectable_effect"] == pytest.approx(
        (sp.norm.ppf(0.975) + sp.norm.ppf(0.8)) * se
    )
    assert "only a true difference of about 3.9 points" in compare(capsys, a, b)[1]
    status, out, _ = compare(capsys, a, b, "--non-inferiority", "0.02")
    assert status == 4 and "NOT shown non-inferior" in out.splitlines()[1]
    assert "low end -2.7 points is not above -2.0" in out.splitlines()[1]


def test_continuous_scores_that_differ_equally_everywhere_give_no_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = run_dir(tmp_path, "a", [0.25, 0.5, 0.75])
    same = run_dir(tmp_path, "same", [0.25, 0.5, 0.75])
    status, out, _ = compare(capsys, a, same, "--non-inferiority", "0.05")
    assert status == 4  # the gate cannot pass on no evidence
    lines = out.splitlines()
    assert lines[0].startswith(
        "No verdict between same (model-same) and a (model-a): +0.0 points (no interval, no "
        "paired t p-value) on 3 paired questions; every one of the 3 paired differences"
    )
    assert "cannot be estimated" in lines[0]
    assert lines[1] == (
        "same (model-same) is NOT shown non-inferior to a (model-a) with a margin of 5.0 "
        "points: the interval of the difference cannot be estimated, so no verdict is drawn "
        "(exit status 4)."
    )
    assert "not estimable (95 %, t)" in out and "no p-value, no verdict" in out
    assert "non-inferior to a (model-a) with" not in out.replace("NOT shown non-inferior", "")
    up = run_dir(tmp_path, "up", [0.35, 0.6, 0.85])  # +0.1 on every question
    status, out, _ = compare(capsys, a, up, "-o", "json")
    data = json.loads(out)
    assert status == 0  # no gate asked: nothing failed
    assert data["verdict"] is None and data["interval"] is None and data["p_value"] is None
    assert data["minimum_detectable_effect"] is None and data["standard_error"] is None
    assert "is +0.1" in data["not_estimable"] and data["significant"] is False


def test_alpha_changes_the_test_and_the_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = run_dir(tmp_path, "a", BASE), run_dir(tmp_path, "b", BETTER)
    status, out, _ = compare(capsys, base, cand, "--alpha", "0.01", "-o", "json")
    data = json.loads(out)
    assert (
        status == 0 and data["confidence"] == 0.99 and data["verdict"] == "no detectable difference"
    )
    assert data["baseline"]["avg_score_interval"]["confidence"] == 0.99


def test_continuous_scores_use_the_paired_t_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(11)
    base_scores = list(np.round(rng.uniform(size=100), 3))
    cand_scores = list(
        np.clip(np.round(np.array(base_scores) + rng.normal(0.03, 0.1, 100), 3), 0, 1)
    )
    base, cand = run_dir(tmp_path, "a", base_scores), run_dir(tmp_path, "b", cand_scores)
    status, out, _ = compare(capsys, base, cand, "-o", "json")
    data = json.loads(out)
    assert status == 0 and data["test"] == "paired-t" and data["discordant"] is None
    assert data["p_value"] == pytest.approx(sp.ttest_rel(cand_scores, base_scores).pvalue)
    ci = sp.ttest_rel(cand_scores, base_scores).confidence_interval(0.95)
    assert data["interval_method"] == "t"
    assert (data["interval"]["low"], data["interval"]["high"]) == (
        pytest.approx(ci.low),
        pytest.approx(ci.high),
    )
    assert data["baseline"]["avg_score_interval"]["method"] == "t"


def test_the_first_judge_of_several_gives_the_row_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = run_dir(tmp_path, "a", BASE, judges="llm")
    ids = [f"q{i}" for i in range(100)]
    ids[7] = "x"
    cand = run_dir(tmp_path, "b", BETTER, row_ids=ids, judges="llm")
    status, _, err = compare(capsys, base, cand)
    assert status == 2 and "row 7 is row_id 'q7'" in err and "judges/llm/judgements.jsonl" in err


@pytest.mark.parametrize(
    ("candidate", "complaint"),
    [
        ({"key": "key-b"}, "the comparison keys differ (baseline "),
        ({"scores": BETTER[:99]}, "the row counts differ"),
        ({"dataset_sha256": "sha-2"}, "dataset_sha256 'sha-1' and 'sha-2'"),
        ({"row_ids": [f"r{i}" for i in range(100)]}, "row 0 is row_id 'q0'"),
    ],
)
def test_runs_that_do_not_answer_the_same_rows_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], candidate: dict[str, Any], complaint: str
) -> None:
    base = run_dir(tmp_path, "a", BASE)
    options = {"scores": BETTER, **candidate}
    cand = run_dir(tmp_path, "b", options.pop("scores"), **options)
    status, out, err = compare(capsys, base, cand)
    assert status == 2 and out == ""
    assert err.startswith("kyai compare: ") and complaint in err
    assert str(base) in err and str(cand) in err
    if "key" in candidate:
        assert "'key-a' and 'key-b'" in err and "never compared" in err


def test_unreadable_runs_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = run_dir(tmp_path, "a", BASE)
    status, _, err = compare(capsys, base, tmp_path / "nope")
    assert status == 2 and "nope: no such file or directory" in err
    (tmp_path / "empty").mkdir()
    status, _, err = compare(capsys, base, tmp_path / "empty")
    assert status == 2 and "no summary.json" in err
    old = run_dir(tmp_path, "old", BASE)
    summary = json.loads((old / "summary.json").read_text())
    del summary["scores"]
    (old / "summary.json").write_text(json.dumps(summary))
    status, _, err = compare(capsys, base, old)
    assert status == 2 and "no per-question 'scores'" in err
    broken = run_dir(tmp_path, "broken", BASE)
    (broken / "judgements.jsonl").write_text('{"row_index": 0, "row_id": "q0"}\n{oops\n')
    status, _, err = compare(capsys, base, broken)
    assert status == 2 and "judgements.jsonl, line 2: not JSON" in err
    short = run_dir(tmp_path, "short", BASE)
    (short / "judgements.jsonl").write_text('{"row_index": 0, "row_id": "q0"}\n')
    status, _, err = compare(capsys, base, short)
    assert status == 2 and "missing row_index [1, 2, 3, 4, 5]" in err
    one = run_dir(tmp_path, "one", [1.0])
    status, _, err = compare(capsys, one, one, "--allow-same")
    assert status == 2 and "needs at least 2" in err


@pytest.mark.parametrize(
    ("flags", "flag"),
    [(["--alpha", "0"], "--alpha"), (["--alpha", "x"], "--alpha"),
     (["--non-inferiority", "-0.1"], "--non-inferiority"), (["--non-inferiority", "2"],
      "--non-inferiority")],
)  # fmt: skip
def test_bad_flags_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], flag: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compare", str(tmp_path), str(tmp_path), *flags])
    assert exited.value.code == 2 and flag in capsys.readouterr().err


def test_a_summary_json_path_works_as_its_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = run_dir(tmp_path, "a", BASE), run_dir(tmp_path, "b", BETTER)
    status, out, _ = compare(capsys, base / "summary.json", cand, "-o", "json")
    assert status == 0 and json.loads(out)["baseline"]["run"] == "a"


def test_two_50000_row_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(5)
    n = 50_000
    base = (rng.uniform(size=n) < 0.7).astype(float)
    cand = np.where(rng.uniform(size=n) < 0.95, base, 1.0 - base)
    a, b = run_dir(tmp_path, "a", list(base)), run_dir(tmp_path, "b", list(cand))
    status, out, _ = compare(capsys, a, b, "-o", "json")
    data = json.loads(out)
    bb = int(((base == 1) & (cand == 0)).sum())
    cc = int(((base == 0) & (cand == 1)).sum())
    assert status == 0 and data["n"] == n
    assert data["discordant"] == {"baseline_only": bb, "candidate_only": cc}
    assert data["p_value"] == pytest.approx(sp.binomtest(min(bb, cc), bb + cc, 0.5).pvalue)


def test_a_run_compared_with_itself_is_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_dir(tmp_path, "a", BASE)
    (tmp_path / "link").symlink_to(run)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("summary.json", "judgements.jsonl"):
        (copy / name).write_bytes((run / name).read_bytes())
    # The same directory twice, under two paths (its summary.json, a link), or a copy.
    for other, said in (
        (run, "are the same file"),
        (run / "summary.json", "are the same file"),
        (tmp_path / "link", "are the same file"),
        (copy, "are identical (a copy of one run)"),
    ):
        status, out, err = compare(capsys, run, other, "--non-inferiority", "0.05")
        assert status == 2 and out == "", err
        assert "the baseline and the candidate are one run" in err and said in err
        assert "--allow-same" in err
    # Asked for: compared, with a warning on stderr.
    status, out, err = compare(capsys, run, run, "--allow-same", "-o", "json")
    assert status == 0 and json.loads(out)["mean_difference"] == 0.0
    assert "warning: comparing a run with itself" in err
    # Two runs with the same scores are two runs: compared without a word.
    other = run_dir(tmp_path, "b", BASE)
    status, _, err = compare(capsys, run, other)
    assert status == 0 and err == ""
