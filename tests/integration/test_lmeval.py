"""kyai.lmeval and ``kyai lm-eval``: the real lm_eval CLI against the OpenAI-compatible double.

The documents are small local files in the native formats of gsm8k and IFEval (run offline
through a derived task, :func:`kyai.lmeval.derive_local_task`); the double's scripted answers
make every expected metric worked out by hand below. lm-eval is the ``lm-eval`` extra, which
``make setup`` installs: under CI a missing lm_eval fails these tests instead of skipping them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.lmeval import (
    MISSING,
    derive_local_task,
    load_results,
    newest_results,
    resolve_metric,
    run_lm_eval,
    task_metrics,
)
from kyai_testing.llm_double import LLMDouble, ModelSpec, Rule

if importlib.util.find_spec("lm_eval") is None:
    if os.environ.get("CI"):
        pytest.fail("lm_eval is not installed (make setup installs the lm-eval extra)")
    pytest.skip("lm_eval is not installed (pip install -e '.[lm-eval]')", allow_module_level=True)

# Each lm_eval run starts a fresh interpreter that imports datasets/pandas: ~20 s, more on a
# loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
MODEL = "cand"
OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}

# gsm8k's native rows: question, and an answer ending "#### <number>". By hand, with gsm8k's
# filters (strict-match: "#### (-?[0-9.,]+)"; flexible-extract: the last number-like run) and
# its exact_match (ignoring ",", "$", a final "." and everything up to "#### "):
#   q1 "#### 5"                  strict 5 = 5 ✓      flexible 5 ✓
#   q2 "So she has 6 apples."    strict [invalid] ✗  flexible 6 ✓
#   q3 "The total is $1,200."    strict [invalid] ✗  flexible $1,200. → 1200 ✓
#   q4 "#### 20" (target 21)     strict ✗            flexible ✗
# strict-match 1/4 = 0.25, flexible-extract 3/4 = 0.75.
GSM8K_ROWS = [
    {"question": "Tom has 2 apples and buys 3. How many?", "answer": "2+3=5\n#### 5"},
    {"question": "Ann had 10 apples and ate 4. How many?", "answer": "10-4=6\n#### 6"},
    {"question": "Twelve boxes of 100 dollars. Total?", "answer": "12*100=1200\n#### 1,200"},
    {"question": "Seven rows of three chairs. How many?", "answer": "7*3=21\n#### 21"},
]
GSM8K_RULES = [
    Rule(match="Tom has 2 apples", content="Tom has 2+3=5 apples.\n#### 5"),
    Rule(match="Ann had 10 apples", content="So she has 6 apples."),
    Rule(match="Twelve boxes", content="The total is $1,200."),
    Rule(match="Seven rows", content="#### 20"),
]

# IFEval's native rows (key, prompt, instruction_id_list, kwargs). By hand:
#   p1 no_comma ✓, english_lowercase ✓ ("hello world")        strict 2/2, loose 2/2
#   p2 no_comma ✗, number_bullet_lists(2) ✗ ("One, two")       strict 0/2, loose 0/2
#   p3 english_lowercase: "Sure!\nhello there" ✗ strictly; the loose check also tries the
#      response without its first line → "hello there" ✓        strict 0/1, loose 1/1
# prompt_level_strict 1/3, inst_level_strict 2/5, prompt_level_loose 2/3, inst_level_loose 3/5.
IFEVAL_ROWS = [
    {
        "key": 1,
        "prompt": "Greet the world without commas, all lowercase.",
        "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
        "kwargs": [{}, {}],
    },
    {
        "key": 2,
        "prompt": "Count to two in exactly 2 bullet points, no commas.",
        "instruction_id_list": ["punctuation:no_comma", "detectable_format:number_bullet_lists"],
        "kwargs": [{}, {"num_bullets": 2}],
    },
    {
        "key": 3,
        "prompt": "Say hello there in lowercase letters only.",
        "instruction_id_list": ["change_case:english_lowercase"],
        "kwargs": [{}],
    },
]
IFEVAL_RULES = [
    # Whole English sentences: lm-eval's lowercase check also asks langdetect for "en",
    # which is a coin toss on two words.
    Rule(
        match="Greet the world",
        content="hello world and good morning to everyone who is reading this message today",
    ),
    Rule(match="Count to two", content="One, two"),
    Rule(
        match="Say hello there",
        content="Sure!\nhello there and good morning to everyone who is reading this message today",
    ),
]


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def double() -> Iterator[LLMDouble]:
    rules = [*GSM8K_RULES, *IFEVAL_RULES]
    server = LLMDouble(models=[ModelSpec(MODEL, max_model_len=8192)], rules=rules)
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def gsm8k_run(double: LLMDouble, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One lm_eval gsm8k run on the local file (shared by the tests that read its results)."""
    work = tmp_path_factory.mktemp("gsm8k")
    data = write_jsonl(work / "test.jsonl", GSM8K_ROWS)
    task = derive_local_task("gsm8k", {"test": data}, work / "tasks", num_fewshot=0)
    double.reset()
    path = run_lm_eval(
        double.base_url,
        MODEL,
        task.name,
        work / "out",
        include_path=task.include_path,
        num_fewshot=0,
        max_concurrent=2,
        env=OFFLINE,
        echo=False,
    )
    return {"task": task, "path": path, "work": work, "requests": double.requests_for(MODEL)}


def test_gsm8k_metrics_match_the_hand_worked_values(gsm8k_run: dict[str, object]) -> None:
    task = gsm8k_run["task"]
    path = gsm8k_run["path"]
    assert isinstance(path, Path)
    metrics = resolve_metric(
        load_results(path),
        task.name,  # type: ignore[attr-defined]
        ["exact_match,strict-match", "exact_match,flexible-extract"],
    )
    assert metrics == {
        "exact_match,strict-match": pytest.approx(0.25),
        "exact_match,flexible-extract": pytest.approx(0.75),
    }


def test_gsm8k_run_talks_to_the_chat_endpoint_as_configured(
    gsm8k_run: dict[str, object],
) -> None:
    requests = gsm8k_run["requests"]
    assert isinstance(requests, list)
    assert len(requests) == len(GSM8K_ROWS)
    first = requests[0]
    assert first.headers["Authorization"] == "Bearer EMPTY"
    # gsm8k's own prompt and stop sequences reach the server unchanged (the derived task
    # only replaced where the documents come from).
    prompts = sorted(r.messages[-1]["content"] for r in requests)
    assert prompts[0].startswith("Question: ") and prompts[0].endswith("\nAnswer:")
    assert "Question:" in first.body["stop"]


def test_run_lm_eval_tees_its_log_and_finds_the_results_under_the_model_dir(
    gsm8k_run: dict[str, object],
) -> None:
    path = gsm8k_run["path"]
    work = gsm8k_run["work"]
    assert isinstance(path, Path) and isinstance(work, Path)
    assert path.parent == work / "out" / MODEL
    log = (work / "out" / "gsm8k_local_lm_eval.log").read_text(encoding="utf-8")
    assert "exact_match" in log and "gsm8k_local" in log
    # lm-eval's own results table, with its real headers (pytablewriter < 1 printed A|B|...).
    assert re.search(r"\|\s*Tasks\s*\|\s*Version\s*\|", log), log[-2000:]
    assert "| A |" not in log
    # lm-eval asks git for its working directory's hash: that noise is not in the log.
    assert "fatal: not a git repository" not in log


@pytest.mark.parametrize("problem", ["unreachable", "model not served"])
def test_kyai_lm_eval_stops_at_once_on_a_server_it_cannot_use(
    problem: str, double: LLMDouble, tmp_path: Path
) -> None:
    endpoint = "http://127.0.0.1:9/v1" if problem == "unreachable" else double.base_url
    argv = [
        sys.executable, "-m", "kyai.cli", "lm-eval", "--endpoint", endpoint,
        "--model", "no-such-model", "--task", "gsm8k", "--output", str(tmp_path / "o"),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    wanted = "cannot reach" if problem == "unreachable" else "does not serve it; it serves"
    assert wanted in done.stderr and "Traceback" not in done.stderr


def test_missing_metric_key_reads_minus_one_with_an_error_log(
    gsm8k_run: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    path = gsm8k_run["path"]
    assert isinstance(path, Path)
    results = load_results(path)
    with caplog.at_level("ERROR", logger="kyai.lmeval"):
        metrics = resolve_metric(
            results, "gsm8k_local", ["exact_match,strict-match", "exact_match,get-answer"]
        )
    assert metrics["exact_match,strict-match"] == pytest.approx(0.25)
    assert metrics["exact_match,get-answer"] == MISSING == -1
    assert "exact_match,get-answer" in caplog.text
    assert resolve_metric(results, "no_such_task", ["acc,none"]) == {"acc,none": -1}


def test_ifeval_metrics_match_the_hand_worked_values(double: LLMDouble, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "ifeval.jsonl", IFEVAL_ROWS)
    task = derive_local_task("leaderboard_ifeval", {"train": data}, tmp_path / "tasks")
    path = run_lm_eval(
        double.base_url,
        MODEL,
        task.name,
        tmp_path / "out",
        include_path=task.include_path,
        env=OFFLINE,
        echo=False,
    )
    assert task_metrics(load_results(path), task.name) == {
        "prompt_level_strict_acc,none": pytest.approx(1 / 3),
        "inst_level_strict_acc,none": pytest.approx(2 / 5),
        "prompt_level_loose_acc,none": pytest.approx(2 / 3),
        "inst_level_loose_acc,none": pytest.approx(3 / 5),
    }


def test_failing_lm_eval_raises_called_process_error(tmp_path: Path) -> None:
    # Nothing listens on port 9 of loopback: lm_eval cannot even find the task (unknown),
    # and exits non-zero; run_lm_eval raises with its exit status and the log kept.
    with pytest.raises(subprocess.CalledProcessError) as caught:
        run_lm_eval(
            "http://127.0.0.1:9",
            MODEL,
            "kyai_no_such_task",
            tmp_path / "out",
            env=OFFLINE,
            echo=False,
        )
    assert caught.value.returncode != 0
    assert "kyai_no_such_task" in (tmp_path / "out" / "kyai_no_such_task_lm_eval.log").read_text()


def test_newest_of_several_results_files_is_chosen(tmp_path: Path) -> None:
    model_dir = tmp_path / "out" / "org__model"
    model_dir.mkdir(parents=True)
    names = [
        "results_2026-11-30T23-59-59.999999.json",
        "results_2026-12-01T03-31-59.123456.json",  # newest by its timestamp
        "results_2026-12-01T03-31-58.999999.json",
    ]
    for offset, name in enumerate(names):
        path = model_dir / name
        path.write_text(json.dumps({"results": {"t": {"acc,none": offset}}}))
        # Modification times disagree with the names: the name's timestamp decides.
        os.utime(path, (time.time() - offset * 100, time.time() - (2 - offset) * 100))
    assert newest_results(tmp_path / "out").name == names[1]
    with pytest.raises(FileNotFoundError):
        newest_results(tmp_path / "empty")


def test_kyai_lm_eval_cli_gates_and_writes_summary(double: LLMDouble, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "test.jsonl", GSM8K_ROWS)

    def cli(*thresholds: str) -> tuple[int, dict[str, object]]:
        out = tmp_path / f"out{len(thresholds)}-{thresholds[-1][-4:] if thresholds else ''}"
        argv = [
            sys.executable, "-m", "kyai.cli", "lm-eval",
            "--endpoint", double.base_url, "--model", MODEL, "--task", "gsm8k",
            "--data-file", f"test={data}", "--num-fewshot", "0", "--output", str(out),
            "--quiet", *[a for t in thresholds for a in ("--threshold", t)],
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        summary = (
            json.loads((out / "summary.json").read_text()) if done.returncode in (0, 4) else {}
        )
        assert done.returncode in (0, 4), done.stderr[-2000:]
        return done.returncode, summary

    code, summary = cli(
        "exact_match,flexible-extract=0.7",
        "gsm8k/exact_match,strict-match=0.3",
        "exact_match,get-answer=0.1",  # a metric gsm8k does not produce
    )
    assert code == 4
    assert summary["metrics"] == {
        "gsm8k/exact_match,flexible-extract": pytest.approx(0.75),
        "gsm8k/exact_match,strict-match": pytest.approx(0.25),
        "gsm8k/exact_match,get-answer": -1,
    }
    verdicts = {v["key"]: v["passed"] for v in summary["thresholds"]}  # type: ignore[attr-defined]
    assert verdicts == {
        "gsm8k/exact_match,flexible-extract": True,
        "gsm8k/exact_match,strict-match": False,
        "gsm8k/exact_match,get-answer": False,
    }
    assert summary["passed"] is False
    assert summary["lm_eval_version"]
    info = summary["tasks"]["gsm8k"]  # type: ignore[index]
    assert info["lm_eval_task"] == "gsm8k_local" and info["version"] == 3.0
    assert len(info["config_sha256"]) == 64
    code, summary = cli("exact_match,flexible-extract=0.75")
    assert code == 0 and summary["passed"] is True


def test_task_lookup_without_importing_lm_eval_agrees_with_lm_eval() -> None:
    from kyai.lmeval._tasks import TaskError, find_task_yaml, probe_task, probe_tasks

    # One lm-eval interpreter answers for all of them (its task index takes seconds).
    tasks = ("gsm8k", "leaderboard_ifeval")
    slow = probe_tasks(tasks, python=[sys.executable])
    for task in tasks:
        fast = find_task_yaml(task)
        assert fast is not None
        assert slow[task] == fast
    # A group is not a single task: the fast path declines and lm-eval says why.
    assert find_task_yaml("mmlu_pro") is None
    with pytest.raises(TaskError, match=r"mmlu_pro.*not a single task"):
        probe_task("mmlu_pro")
