"""``kyai judge --judge-api-key-file``: the key read from a file that is rotated mid-run.

A judge pod behind the judge gateway sends its projected ServiceAccount token, which the
kubelet replaces in its file while the judge runs. Against the LLM double on loopback (which
requires ``Authorization: Bearer <key>`` and whose key is switched when the file is), the
worker must send the new key from the first request after the rotation, keep every key out of
what it prints and stores, and treat a file it cannot read as a judge error of the rows it
could not send (never a crash), or as a usage error (exit 2) at the start.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from kyai.cli import main
from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
OLD = "token-one-aaaaaaaa"
NEW = "token-two-bbbbbbbb"
ROWS = 8
ROTATE_AFTER = 3


def rotate(path: Path, key: str) -> None:
    """Replace the key as the kubelet does: a new file swapped in under the same name."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(key + "\n")
    os.replace(fresh, path)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    rows = [
        {"instruction": f"Repeat the word w{index}.", "ground_truth_response": f"w{index}"}
        for index in range(ROWS)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def generate(double: LLMDouble, dataset: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAND_KEY", str(double.api_key))
    status = main([
        "generate", "--endpoint", double.url, "--model", "cand", "--api-key-env", "CAND_KEY",
        "--dataset", str(dataset), "--generation-prompt", GEN_PROMPT, "--judge-prompt",
        JUDGE_PROMPT, "--output", str(out), "--quiet",
    ])  # fmt: skip
    assert status == 0


def judge_args(double: LLMDouble, generations: Path, out: Path, key_file: Path) -> list[str]:
    return [
        "judge", "--generations", str(generations), "--judge-endpoint", double.base_url,
        "--judge-model", "judge", "--judge-api-key-file", str(key_file), "--output", str(out),
        "--concurrency", "1", "--max-retries", "0", "--quiet",
    ]  # fmt: skip


def test_a_key_file_rotated_mid_run_is_read_again(
    tmp_path: Path,
    dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key_file = tmp_path / "token"
    key_file.write_text(OLD + "\n")
    judged = 0
    lock = threading.Lock()

    def judge_and_rotate(request: ChatRequest) -> str:
        nonlocal judged
        verdict = substring_judge(request)
        with lock:
            judged += 1
            if judged == ROTATE_AFTER:  # the kubelet rotates; the old key stops working
                rotate(key_file, NEW)
                server.api_key = NEW
        return verdict

    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            Rule(model="judge", content=judge_and_rotate),
            Rule(
                match="Repeat the word", model="cand", content=lambda r: r.last_user_message[-3:-1]
            ),
        ],
        api_key=OLD,
        echo_headers=True,  # an error would carry the key back: it must never be stored
    )
    with server.start_in_thread() as double:
        generate(double, dataset, tmp_path / "gen", monkeypatch)
        double.reset()
        out = tmp_path / "judged"
        assert main(judge_args(double, tmp_path / "gen", out, key_file)) == 0
        sent = [r.headers.get("Authorization") for r in double.requests_for("judge")]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["count"] == ROWS and summary["error_count"] == 0
    assert summary["avg_score"] == 1.0
    # The first requests carried the old key, every one after the rotation the new one.
    assert sent == [f"Bearer {OLD}"] * ROTATE_AFTER + [f"Bearer {NEW}"] * (ROWS - ROTATE_AFTER)
    printed = capsys.readouterr()
    for text in (printed.out, printed.err, *(p.read_text() for p in out.iterdir())):
        assert OLD not in text and NEW not in text


def test_a_key_file_that_goes_away_is_a_judge_error_not_a_crash(
    tmp_path: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "token"
    key_file.write_text(OLD)
    judged = 0

    def judge_and_remove(request: ChatRequest) -> str:
        nonlocal judged
        judged += 1
        if judged == ROTATE_AFTER:
            key_file.unlink()
        return substring_judge(request)

    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[
            Rule(model="judge", content=judge_and_remove),
            Rule(model="cand", content=lambda r: r.last_user_message[-3:-1]),
        ],
        api_key=OLD,
    )
    with server.start_in_thread() as double:
        generate(double, dataset, tmp_path / "gen", monkeypatch)
        double.reset()
        out = tmp_path / "judged"
        assert main(judge_args(double, tmp_path / "gen", out, key_file)) == 0
        assert len(double.requests_for("judge")) == ROTATE_AFTER
    summary = json.loads((out / "summary.json").read_text())
    assert summary["count"] == ROWS
    assert summary["error_count"] == ROWS - ROTATE_AFTER
    assert summary["avg_score"] == ROTATE_AFTER / ROWS  # errors score 0 and stay counted
    records = [json.loads(line) for line in (out / "judgements.jsonl").read_text().splitlines()]
    errors = [r["error"] for r in records if r["error"] is not None]
    assert {e["kind"] for e in errors} == {"judge_credentials_error"}
    assert all(f"--judge-api-key-file: cannot read the API key from {key_file}" in e["message"]
               for e in errors)  # fmt: skip


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_an_unreadable_key_file_is_a_usage_error(
    tmp_path: Path,
    dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
) -> None:
    server = LLMDouble(models=[ModelSpec("cand"), ModelSpec("judge")], api_key=OLD)
    key_file = tmp_path / "token"
    if content is not None:
        key_file.write_text(content)
    with server.start_in_thread() as double:
        generate(double, dataset, tmp_path / "gen", monkeypatch)
        double.reset()
        status = main(judge_args(double, tmp_path / "gen", tmp_path / "judged", key_file))
        assert double.requests == []
    assert status == 2
    err = capsys.readouterr().err
    assert f"--judge-api-key-file: cannot read the API key from {key_file}" in err
    assert ("No such file" in err) if content is None else ("it is empty" in err)


def test_the_two_judge_key_flags_exclude_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([
            "judge", "--generations", str(tmp_path), "--output", str(tmp_path / "o"),
            "--judge-api-key-env", "K", "--judge-api-key-file", str(tmp_path / "t"),
        ])  # fmt: skip
    assert caught.value.code == 2
    assert "not allowed with argument --judge-api-key-env" in capsys.readouterr().err
