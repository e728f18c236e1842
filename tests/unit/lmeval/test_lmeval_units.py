"""kyai.lmeval without lm_eval: the command line it builds, flag parsing, metric gates, the
lm-eval Job's plan, the spec's rules and the Passed condition from thresholds.metrics."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from kyai.api import EvaluationRunSpec
from kyai.api.plan import SecretEnv
from kyai.builders.lmeval import LMEVAL_DATA_MOUNT, lmeval_plan
from kyai.lmeval import api_url, build_argv, gate, resolve_metric, split_key
from kyai.lmeval.cli import (
    UsageError,
    parse_data_files,
    parse_task_options,
    parse_thresholds,
)
from kyai.metrics import RunMetrics


@pytest.mark.parametrize(
    ("base", "chat", "expected"),
    [
        ("http://h:8000", True, "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", True, "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1", False, "http://h:8000/v1/completions"),
        ("http://h/v1/chat/completions", True, "http://h/v1/chat/completions"),
    ],
)
def test_api_url_is_the_full_route(base: str, chat: bool, expected: str) -> None:
    assert api_url(base, use_chat=chat) == expected


def test_argv_has_the_seeds_options_and_no_secret() -> None:
    argv = build_argv(
        "http://h:8000/v1", "org/m", "gsm8k_cot_llama", "/out",
        fewshot_as_multiturn=True, num_fewshot=8, gen_kwargs="max_gen_toks=512", limit=50,
        max_concurrent=16, extra_args=["--seed", "1"],
    )  # fmt: skip
    assert argv[:3] == [sys.executable, "-m", "lm_eval"]
    model_args = argv[argv.index("--model_args") + 1]
    assert model_args == (
        "model=org/m,base_url=http://h:8000/v1/chat/completions,num_concurrent=16,"
        "tokenized_requests=False,tokenizer_backend=None"
    )
    assert argv[argv.index("--model") + 1] == "local-chat-completions"
    for flag, value in (("--num_fewshot", "8"), ("--limit", "50"), ("--tasks", "gsm8k_cot_llama")):
        assert argv[argv.index(flag) + 1] == value
    assert argv[argv.index("--gen_kwargs") + 1] == "max_gen_toks=512"
    assert "--apply_chat_template" in argv and "--fewshot_as_multiturn" in argv
    assert argv[-2:] == ["--seed", "1"]
    completions = build_argv("http://h", "m", "gsm8k", "/o", use_chat=False)
    assert completions[completions.index("--model") + 1] == "local-completions"
    assert "--apply_chat_template" not in completions
    with pytest.raises(ValueError, match="fewshot_as_multiturn"):
        build_argv("http://h", "m", "t", "/o", use_chat=False, fewshot_as_multiturn=True)
    with pytest.raises(ValueError, match="model"):
        build_argv("http://h", "a,b", "t", "/o")


def test_resolve_metric_and_gate() -> None:
    results = {"results": {"gsm8k": {"exact_match,strict-match": 0.4, "alias": "gsm8k"}}}
    flat = resolve_metric(results, "gsm8k", ["exact_match,strict-match", "acc,none"])
    assert flat == {"exact_match,strict-match": 0.4, "acc,none": -1}
    verdicts = gate(
        {"t/a,none": 0.5, "t/b,none": -1}, {"t/a,none": 0.5, "t/b,none": 0.0, "t/c,x": 0.1}
    )
    assert [v.passed for v in verdicts] == [True, False, False]
    assert "missing" in verdicts[1].reason and "missing" in verdicts[2].reason
    assert split_key("gsm8k/exact_match,flexible-extract") == (
        "gsm8k", "exact_match", "flexible-extract",
    )  # fmt: skip
    assert split_key("ifeval/prompt_level_strict_acc") == (
        "ifeval", "prompt_level_strict_acc", "none",
    )  # fmt: skip
    with pytest.raises(ValueError, match="task"):
        split_key("exact_match,none")


def test_cli_flag_parsing_names_the_flag() -> None:
    assert parse_thresholds(["exact_match,strict-match=0.4"], ["gsm8k"]) == {
        "gsm8k/exact_match,strict-match": 0.4
    }
    assert parse_thresholds(["ifeval/acc=1"], ["ifeval", "gsm8k"]) == {"ifeval/acc,none": 1.0}
    for bad, match in (
        (["acc=0.4"], "name the task"),
        (["x/acc=0.4"], "not among --task"),
        (["gsm8k/acc=high"], "not a number"),
        (["gsm8k/acc"], "KEY=VALUE"),
    ):
        with pytest.raises(UsageError, match=match):
            parse_thresholds(bad, ["gsm8k", "ifeval"])
    assert parse_data_files(["test=/a.jsonl"], ["gsm8k"]) == {"gsm8k": {"test": "/a.jsonl"}}
    assert parse_data_files(["gsm8k:train=/b"], ["gsm8k", "ifeval"]) == {"gsm8k": {"train": "/b"}}
    with pytest.raises(UsageError, match="--data-file"):
        parse_data_files(["test=/a"], ["gsm8k", "ifeval"])
    assert parse_task_options(
        ["gsm8k:limit=5", "gsm8k:gen_kwargs=a=1,b=2", "gsm8k:num_fewshot=0"], ["gsm8k"]
    ) == {"gsm8k": {"limit": 5, "gen_kwargs": "a=1,b=2", "num_fewshot": 0}}
    for bad in ("gsm8k:limit=0", "gsm8k:depth=1", "x:limit=1", "gsm8k:limit=many"):
        with pytest.raises(UsageError, match="--task-option"):
            parse_task_options([bad], ["gsm8k"])


def _spec(**extra: object) -> EvaluationRunSpec:
    body = {
        "workloadRef": {"name": "w"},
        "lmEval": {
            "tasks": [
                {
                    "name": "gsm8k",
                    "limit": 100,
                    "numFewshot": 0,
                    "dataFiles": [
                        {"split": "test", "configMapRef": {"name": "rows", "key": "test.jsonl"}},
                        {
                            "split": "train",
                            "persistentVolumeClaim": {"claimName": "sets", "path": "g/train.jsonl"},
                        },
                    ],
                },
                {"name": "leaderboard_ifeval", "genKwargs": "max_gen_toks=1280"},
            ]
        },
        **extra,
    }
    return EvaluationRunSpec.model_validate(body)


def test_lmeval_plan_mounts_data_files_and_passes_every_option() -> None:
    spec = _spec()
    assert spec.lm_eval is not None
    plan = lmeval_plan(
        spec.lm_eval, namespace="ns", run="r", endpoint="http://w:8000/v1", model="m",
        concurrency=8, request_timeout_seconds=60,
        candidate_secret=SecretEnv(env="KYAI_CANDIDATE_API_KEY", secret="s", key="k"),
    )  # fmt: skip
    args = plan.args
    assert args[0] == "lm-eval"
    assert args[args.index("--report-run") + 1] == "ns/r"
    assert args[args.index("--output") + 1] == "/results/r"
    assert args[args.index("--api-key-env") + 1] == "KYAI_CANDIDATE_API_KEY"
    options = [args[i + 1] for i, a in enumerate(args) if a == "--task-option"]
    assert options == [
        "gsm8k:limit=100",
        "gsm8k:num_fewshot=0",
        "leaderboard_ifeval:gen_kwargs=max_gen_toks=1280",
    ]
    files = [args[i + 1] for i, a in enumerate(args) if a == "--data-file"]
    assert files == [
        f"gsm8k:test={LMEVAL_DATA_MOUNT}/0/data.jsonl",
        f"gsm8k:train={LMEVAL_DATA_MOUNT}/1/g/train.jsonl",
    ]
    assert plan.volumes[0]["configMap"] == {
        "name": "rows",
        "items": [{"key": "test.jsonl", "path": "data.jsonl"}],
    }
    assert plan.volumes[1]["persistentVolumeClaim"] == {"claimName": "sets", "readOnly": True}
    assert all(mount["readOnly"] for mount in plan.mounts)
    assert plan.candidate_secret is not None and plan.candidate_secret.secret == "s"


def test_lmeval_spec_rules_name_the_field() -> None:
    with pytest.raises(ValidationError, match=r"spec\.lmEval excludes spec\.snapshotRef"):
        _spec(snapshotRef={"name": "s"})
    with pytest.raises(ValidationError, match="each task at most once"):
        EvaluationRunSpec.model_validate(
            {"workloadRef": {"name": "w"}, "lmEval": {"tasks": [{"name": "a"}, {"name": "a"}]}}
        )
    with pytest.raises(ValidationError, match="exactly one of configMapRef"):
        EvaluationRunSpec.model_validate(
            {
                "workloadRef": {"name": "w"},
                "lmEval": {"tasks": [{"name": "a", "dataFiles": [{"split": "test"}]}]},
            }
        )
    with pytest.raises(ValidationError, match="is not '<task or judge>/<metric>"):
        _spec(thresholds={"metrics": {"no slash": 0.5}})
    with pytest.raises(ValidationError):
        _spec(thresholds={"metrics": {f"t/m{i}": 0.1 for i in range(65)}})
    spec = EvaluationRunSpec.model_validate(
        {
            "workloadRef": {"name": "w"},
            "snapshotRef": {"name": "s"},
            "preprocessors": [{"source": "def transform(row):\n    return row\n"}],
            "embeddingModel": "text-embedding-3-small",
        }
    )
    assert spec.embedding_model == "text-embedding-3-small"
    with pytest.raises(ValidationError, match="exactly one of source, configMapRef"):
        EvaluationRunSpec.model_validate(
            {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}, "preprocessors": [{}]}
        )


def test_status_metrics_become_kyai_evaluation_metric_series() -> None:
    metrics = RunMetrics()
    body = {
        "metadata": {"namespace": "ns", "name": "r"},
        "spec": {"workloadRef": {"name": "w"}},
        "status": {
            "phase": "Succeeded",
            "metrics": {"gsm8k/exact_match,flexible-extract": 0.75, "ifeval/avg_score": 0.5},
        },
    }
    metrics.observe(body)
    text = "\n".join(
        f"{sample.labels['task']}|{sample.labels['metric']}|{sample.labels['filter']}={sample.value}"
        for family in metrics.collect()
        if family.name == "kyai_evaluation_metric"
        for sample in family.samples
    )
    assert text.splitlines() == [
        "gsm8k|exact_match|flexible-extract=0.75",
        "ifeval|avg_score|none=0.5",
    ]
    metrics.observe({**body, "status": {**body["status"], "phase": "Generating"}})
    assert not [
        s for f in metrics.collect() if f.name == "kyai_evaluation_metric" for s in f.samples
    ]
