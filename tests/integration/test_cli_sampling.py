"""Decoding settings and ``--limit`` on ``kyai run`` (issue 43, items 12 and 13).

No sampling parameter is sent unless the run declares one; declared ones go with every
request and enter the comparison key. ``--limit N`` asks the first N questions only, and the
result says it is a subset, with a comparison key of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kyai.cli import main
from kyai_testing import LLMDouble
from kyai_testing.siblings import sibling

_cli_tests = sibling(__file__, "test_cli")
# The fixtures of test_cli.py, by name (pytest finds fixtures among a module's names).
double = _cli_tests.double
dataset = _cli_tests.dataset
keys = _cli_tests.keys
run_args = _cli_tests.run_args

pytestmark = pytest.mark.usefixtures("keys")


def candidate_bodies(server: LLMDouble) -> list[dict[str, object]]:
    return [request.body for request in server.requests if request.model == "cand"]


def summary_of(out: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((out / "summary.json").read_text())
    return loaded


def test_no_sampling_parameter_is_sent_unless_declared(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    assert main(run_args(double, dataset, tmp_path / "plain")) == 0
    bodies = candidate_bodies(double)
    assert len(bodies) == 4
    for body in bodies:
        assert not {"temperature", "top_p", "seed"} & set(body), body
    summary = summary_of(tmp_path / "plain")
    assert "sampling" not in summary and "subset" not in summary


def test_declared_sampling_goes_with_every_request_and_changes_the_key(
    double: LLMDouble, dataset: Path, tmp_path: Path
) -> None:
    assert main(run_args(double, dataset, tmp_path / "plain")) == 0
    plain = summary_of(tmp_path / "plain")["comparison_key"]
    double.reset()
    sampled = [*run_args(double, dataset, tmp_path / "t03"), "--temperature", "0.3", "--seed", "7"]
    assert main(sampled) == 0
    bodies = candidate_bodies(double)
    assert len(bodies) == 4
    assert all(body["temperature"] == 0.3 and body["seed"] == 7 for body in bodies), bodies
    assert all("top_p" not in body for body in bodies)
    # The judge keeps its own greedy setting: the run's sampling is the candidate's only.
    judged = [r.body for r in double.requests if r.model == "judge"]
    assert judged and all(body["temperature"] == 0.0 and "seed" not in body for body in judged)
    summary = summary_of(tmp_path / "t03")
    assert summary["sampling"] == {"seed": 7, "temperature": 0.3}
    key = summary["comparison_key"]
    assert key != plain
    # Another temperature: another key again.
    other = [*run_args(double, dataset, tmp_path / "t05"), "--temperature", "0.5", "--seed", "7"]
    assert main(other) == 0
    assert summary_of(tmp_path / "t05")["comparison_key"] not in (plain, key)


def test_resuming_with_other_sampling_is_refused(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([*run_args(double, dataset, out), "--top-p", "0.9"]) == 0
    capsys.readouterr()
    assert main([*run_args(double, dataset, out), "--top-p", "0.8"]) == 2
    err = capsys.readouterr().err
    assert "already holds generations of another run" in err, err
    assert "sampling parameters (top_p=0.9 before)" in err, err


def test_limit_asks_the_first_questions_and_marks_a_subset(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(double, dataset, tmp_path / "full")) == 0
    full = summary_of(tmp_path / "full")
    double.reset()
    capsys.readouterr()
    assert main([*run_args(double, dataset, tmp_path / "two"), "--limit", "2"]) == 0
    asked = [body["messages"][-1]["content"] for body in candidate_bodies(double)]  # type: ignore[index]
    assert sorted(asked) == ["What is 2+2?", "What is the capital of France?"]
    summary = summary_of(tmp_path / "two")
    assert summary["count"] == 2 and summary["scores"] == [1.0, 1.0]
    assert summary["subset"] == {"limit": 2, "of": 4}
    assert summary["comparison_key"] != full["comparison_key"]
    line = capsys.readouterr().out
    assert f"comparison_key={summary['comparison_key']} subset=2/4 -> " in line, line
    # A limit of every question (or more) is the full run: the same key, no subset.
    assert main([*run_args(double, dataset, tmp_path / "all"), "--limit", "9"]) == 0
    everything = summary_of(tmp_path / "all")
    assert everything["comparison_key"] == full["comparison_key"]
    assert "subset" not in everything


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--temperature", "-0.1", "-0.1 is negative"),
        ("--top-p", "0", "0.0 is not above 0 and at most 1"),
        ("--top-p", "1.5", "1.5 is not above 0 and at most 1"),
        ("--limit", "0", "0 is not at least 1"),
        ("--seed", "x", "'x' is not a whole number"),
    ],
)
def test_bad_decoding_flags_exit_2_naming_the_flag(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    said: str,
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*run_args(double, dataset, tmp_path / "out"), flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {said}" in err, err
    assert double.requests == []
