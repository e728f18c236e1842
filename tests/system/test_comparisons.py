"""Paired comparisons in the cluster (issue 21) and the serving figures in status (issue 22).

Two endpoint Workloads served by one LLM double answer the same Snapshot of 1,200 questions
(more than ``status.scores`` lists, so the judge worker packs them into
``status.scoresPacked``). The candidate's run, gated by ``thresholds.nonInferiority``
against the baseline's, is created first: it waits for its baseline, is woken when the
baseline succeeds, and its ``Passed`` is what :func:`kyai.stats.compare` says of the two
runs' own per-question scores. A run whose baseline has another comparison key gets Passed
False, NotComparable. The interval and the serving figures are in status and in ``kubectl get
er -o wide``; ``kyai leaderboard`` gives the cluster's runs the ranks their run directories get.

Issue 34: two runs that answer every question alike (no discordant question) are never
non-inferior on 3 questions, and on 100 are within a margin of 0.05 but not of 0.02 (the
Bonett–Price interval, about ±0.027), as ``kyai compare`` says of the same scores.

The operator's timers are shortened through its settings (devcluster only).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai.api import EvaluationRunStatus
from kyai.stats import compare, score_interval
from kyai_devcluster import DevClusterThread
from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import Kubectl, Operator
from system.test_operator import condition, phase_is, snapshot

pytestmark = pytest.mark.timeout(600)

#: Questions of the big Snapshot: more than the 1,000 status.scores lists.
QUESTIONS = 1200
GEN = "Answer with the code word only."
JUDGE = 'Score 1 if the response has the ground truth, else 0. Return JSON {"score": 0..1}.'


def code_word(index: int) -> str:
    return f"code-{index:05d}-word"


def base_right(index: int) -> bool:
    return index % 10 < 7  # 840 of 1,200


def cand_right(index: int) -> bool:
    return base_right(index) and index % 40 != 5  # loses 30 of the baseline's


def answering(right: Any) -> Any:
    def answer(request: ChatRequest) -> str:
        found = re.search(r"Question (\d+)", request.last_user_message)
        index = int(found.group(1)) if found else -1
        return code_word(index) if found and right(index) else "I do not know"

    return answer


@pytest.fixture(scope="module")
def pair() -> Iterator[LLMDouble]:
    """The baseline's model, the candidate's and the judge, on one double."""
    server = LLMDouble(
        models=[ModelSpec("base"), ModelSpec("cand"), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(model="base", content=answering(base_right)),
            Rule(model="cand", content=answering(cand_right)),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    pair: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the operator's timers are shortened by its environment (devcluster only)")
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": pair.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "HF_HUB_OFFLINE": "1",
            "KYAI_JOB_START_GRACE_SECONDS": "2",
            "KYAI_RUN_RESYNC_SECONDS": "3",
        },
    )
    running.start()
    yield running
    running.stop()


def rows_config_map(namespace: str) -> dict[str, Any]:
    lines = [
        json.dumps({"instruction": f"Question {i}: which code word?",
                    "ground_truth_response": code_word(i), "external_row_id": f"q{i}"})
        for i in range(QUESTIONS)
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "code-words", "namespace": namespace},
        "data": {"rows.jsonl": "\n".join(lines) + "\n"},
    }


def objects(namespace: str, pair: LLMDouble) -> list[dict[str, Any]]:
    big = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": "words", "namespace": namespace},
        "spec": {
            "source": {"configMapRef": {"name": "code-words", "key": "rows.jsonl"}},
            "prompts": {"generation": GEN, "judge": JUDGE},
        },
    }
    small = snapshot("capitals", namespace)
    workloads = [
        {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "Workload",
            "metadata": {"name": model, "namespace": namespace},
            "spec": {"framework": "vllm", "model": model, "endpoint": {"url": pair.base_url}},
        }
        for model in ("base", "cand")
    ]
    return [rows_config_map(namespace), big, small, *workloads]


def run(name: str, namespace: str, workload: str, snap: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "workloadRef": {"name": workload},
            "snapshotRef": {"name": snap},
            "generation": {"concurrency": 32},
            **spec,
        },
    }


def gate(baseline: str, margin: float) -> dict[str, Any]:
    return {"thresholds": {"nonInferiority": {"baselineRef": {"name": baseline}, "margin": margin}}}


def reason(obj: dict[str, Any], type_: str = "Ready") -> str | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return found[0]["reason"] if found else None


def leaderboard(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "leaderboard", *args, "-o", "json"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_non_inferiority_intervals_serving_and_ranks_in_the_cluster(
    kubectl: Kubectl, cluster: DevClusterThread, operator: Operator, pair: LLMDouble,
    namespace: str,
) -> None:  # fmt: skip
    kubectl.apply(*objects(namespace, pair))
    for name in ("words", "capitals"):
        kubectl.wait_for("snapshot", name, namespace, phase_is("Ready"), timeout=60)
    started = time.monotonic()
    # The candidates first: their baseline does not exist yet.
    kubectl.apply(
        run("cand", namespace, "cand", "words", **gate("base", 0.05)),
        run("strict", namespace, "cand", "words", **gate("base", 0.01)),
        run("small", namespace, "cand", "capitals", **gate("base", 0.05)),
    )
    waiting = kubectl.wait_for(
        "er", "cand", namespace, lambda o: reason(o) == "BaselineNotFound", timeout=240
    )
    assert waiting["status"]["phase"] == "Judging", waiting["status"]  # its Jobs are done
    assert "baseline EvaluationRun base" in condition(waiting, "Ready")["message"]
    assert waiting["status"]["avgScore"] == pytest.approx(810 / QUESTIONS)
    kubectl.apply(run("base", namespace, "base", "words"))
    done = {
        name: kubectl.wait_for("er", name, namespace, phase_is("Succeeded", "Failed"), timeout=300)
        for name in ("base", "cand", "strict", "small")
    }
    took = time.monotonic() - started
    for name, body in done.items():
        assert body["status"]["phase"] == "Succeeded", (name, body["status"], operator.logs())
    statuses = {name: EvaluationRunStatus.model_validate(b["status"]) for name, b in done.items()}

    # (a) Passed is the paired comparison of the runs' own per-question scores.
    base = statuses["base"].question_scores()
    assert statuses["base"].scores is None and statuses["base"].scores_packed is not None
    assert len(base) == QUESTIONS and sum(base) == 840
    for name, margin in (("cand", 0.05), ("strict", 0.01)):
        mine = statuses[name].question_scores()
        expected = compare(base, mine, non_inferiority=margin)
        passed = condition(done[name], "Passed")
        assert passed["status"] == str(expected.non_inferior), (name, passed)
        figures = statuses[name].non_inferiority
        assert figures is not None and figures.test == expected.test == "mcnemar-exact"
        assert figures.low == pytest.approx(expected.interval.low)
        assert figures.p_value == pytest.approx(expected.p_value)
        assert f"{expected.interval.low:+.4f}" in passed["message"], passed
    assert condition(done["cand"], "Passed")["status"] == "True"  # worse, but within 5 points
    assert condition(done["strict"], "Passed")["status"] == "False"  # not within 1 point
    small = condition(done["small"], "Passed")
    assert (small["status"], small["reason"]) == ("False", "NotComparable"), small
    keys = (statuses["small"].comparison_key, statuses["base"].comparison_key)
    assert keys[0] != keys[1] and all(str(key) in small["message"] for key in keys), small
    assert condition(done["small"], "Ready")["status"] == "True"  # the run itself succeeded

    # (b) The interval and the serving figures in status and in kubectl's wide columns.
    interval = statuses["base"].avg_score_interval
    assert interval is not None and interval.method == "wilson"
    # Rounded as avgScore is (6 decimals); summary.json keeps the exact ends.
    exact = score_interval(base)
    assert (interval.low, interval.high) == (round(exact.low, 6), round(exact.high, 6))
    serving = statuses["base"].serving
    assert serving is not None and serving.streamed is True and serving.requests == QUESTIONS
    assert serving.ttft_p50_ms is not None and serving.output_tokens_per_second
    assert serving.server is None and serving.gpus is None  # an endpoint: neither
    wide = kubectl.run("get", "er", "base", "-n", namespace, "-o", "wide").stdout.splitlines()
    header = wide[0].split()
    for column in ("SCORE-LOW", "SCORE-HIGH", "TTFT", "TOK/S"):
        assert column in header, wide[0]
    # Cut at the header's columns: an empty cell (PASSED of a run without gates) splits to nothing.
    starts = [found.start() for found in re.finditer(r"\S+", wide[0])]
    ends = [*starts[1:], None]
    cells = {wide[0][a:b].strip(): wide[1][a:b].strip() for a, b in zip(starts, ends, strict=True)}
    assert cells["PASSED"] == "", cells  # no spec.thresholds: no verdict
    assert float(cells["SCORE-LOW"]) == pytest.approx(interval.low, abs=1e-4)
    for end in ("SCORE-LOW", "SCORE-HIGH"):
        assert len(cells[end].partition(".")[2]) <= 6, cells  # as SCORE is, not 17 decimals
    assert float(cells["TTFT"]) == pytest.approx(serving.ttft_p50_ms, abs=1e-3)
    assert "SCORE-LOW" not in kubectl.run("get", "er", "base", "-n", namespace).stdout

    # (d) The cluster's ranks are those of the run directories (packed scores, 1,200 rows).
    key = str(statuses["base"].comparison_key)
    (board,) = leaderboard(kubectl, "-n", namespace, "--key", key)["boards"]
    folders = [
        cluster.cluster.claim_dir(namespace, str(statuses[name].results_claim)) / name
        for name in ("base", "cand", "strict")
    ]
    assert all((folder / "summary.json").is_file() for folder in folders)
    (files,) = leaderboard(kubectl, "--from", *map(str, folders))["boards"]
    from_cluster = [(e["run"], e["rank"], e["avg_score_interval"]) for e in board["entries"]]
    from_files = [(e["run"], e["rank"], e["avg_score_interval"]) for e in files["entries"]]
    assert from_cluster == from_files
    assert sorted((run_, rank) for run_, rank, _ in from_cluster) == [
        ("base", 1), ("cand", 2), ("strict", 2),
    ]  # fmt: skip
    assert all(e["rank_unavailable"] is None for e in board["entries"])
    print(f"\nfour runs of 1,200 and 4 questions compared in {took:.1f}s")


def spaced_snapshot(name: str, namespace: str, indices: range) -> dict[str, Any]:
    """A Snapshot of the questions ``indices``: multiples of 4, so no index is 5 mod 40 and
    both models answer each alike (no discordant question); some right, some wrong."""
    rows = [
        {"instruction": f"Question {i}: which code word?", "groundTruthResponse": code_word(i),
         "externalRowId": f"q{i}"}
        for i in indices
    ]  # fmt: skip
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"rows": rows}, "prompts": {"generation": GEN, "judge": JUDGE}},
    }


def test_no_discordant_question_proves_only_what_the_question_count_allows(
    kubectl: Kubectl, operator: Operator, pair: LLMDouble, namespace: str
) -> None:
    three, hundred = range(0, 12, 4), range(0, 400, 4)
    assert all(cand_right(i) == base_right(i) for i in hundred)
    kubectl.apply(
        spaced_snapshot("three", namespace, three),
        spaced_snapshot("hundred", namespace, hundred),
        *objects(namespace, pair)[3:],  # the two Workloads
    )
    for name in ("three", "hundred"):
        kubectl.wait_for("snapshot", name, namespace, phase_is("Ready"), timeout=60)
    kubectl.apply(
        run("base-3", namespace, "base", "three"),
        run("base-100", namespace, "base", "hundred"),
        run("cand-3", namespace, "cand", "three", **gate("base-3", 0.05)),
        run("cand-100", namespace, "cand", "hundred", **gate("base-100", 0.05)),
        run("cand-100-strict", namespace, "cand", "hundred", **gate("base-100", 0.02)),
    )
    names = ("base-3", "base-100", "cand-3", "cand-100", "cand-100-strict")
    done = {
        name: kubectl.wait_for("er", name, namespace, phase_is("Succeeded", "Failed"), timeout=240)
        for name in names
    }
    for name, body in done.items():
        assert body["status"]["phase"] == "Succeeded", (name, body["status"], operator.logs())
    statuses = {name: EvaluationRunStatus.model_validate(b["status"]) for name, b in done.items()}
    for name, base, margin, expected in (
        ("cand-3", "base-3", 0.05, False),  # about ±55 points: three questions prove nothing
        ("cand-100", "base-100", 0.05, True),  # about ±2.7 points
        ("cand-100-strict", "base-100", 0.02, False),
    ):
        mine, theirs = statuses[name].question_scores(), statuses[base].question_scores()
        assert mine == theirs and 0 < sum(mine) < len(mine)  # alike, some right, some wrong
        truth = compare(theirs, mine, non_inferiority=margin)
        assert truth.non_inferior is expected and truth.interval is not None
        passed = condition(done[name], "Passed")
        reason = "ThresholdsMet" if expected else "ThresholdsMissed"
        assert (passed["status"], passed["reason"]) == (str(expected), reason), passed
        figures = statuses[name].non_inferiority
        assert figures is not None and figures.interval_method == "bonett-price"
        assert figures.low == pytest.approx(truth.interval.low) and figures.low < 0
        assert figures.standard_error is not None and figures.standard_error > 0
        assert f"{truth.interval.low:+.4f}" in passed["message"], passed
    assert statuses["cand-3"].non_inferiority is not None
    assert statuses["cand-3"].non_inferiority.low == pytest.approx(-0.554, abs=1e-3)
