"""Continuous evaluation in the devcluster: an EvaluationSchedule (issue 44).

A schedule on an endpoint Workload is run on request (``kyai run-now``) and scores 1.0; the
Workload is pointed at a server that answers badly, and the change makes a run on its own
once the Workload is Ready again; the schedule says Regressed with the difference, its
interval and p; the history limit deletes the older run and the history keeps it. A schedule
whose cron fires every minute makes its run within 70 s (made at the start of the module, so
that its minute passes while the other test runs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai.cli import main as kyai_main
from kyai.constants import LABEL_SCHEDULE
from kyai_testing import LLMDouble, ModelSpec, Rule
from system.helpers import Kubectl, Operator
from system.test_operator import condition, snapshot, workload

pytestmark = pytest.mark.timeout(600)

#: Twenty questions the good server gets right and the bad one gets wrong: a difference of
#: 1.0 on 20 discordant questions, far beyond a 0.05 margin.
ROWS = [
    {"instruction": f"Capital of France? ({index})", "groundTruthResponse": "Paris"}
    for index in range(20)
]


@pytest.fixture(scope="module")
def bad() -> Iterator[LLMDouble]:
    """A server that answers every question wrongly."""
    server = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096)],
        rules=[Rule(model="cand", content="I do not know")],
    )
    with server.start_in_thread() as running:
        yield running


def schedule(name: str, namespace: str, double: LLMDouble, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "runTemplate": {
            "metadata": {"labels": {"team": "evals"}},
            "spec": {
                "workloadRef": {"name": "cand"},
                "snapshotRef": {"name": "france"},
                "judge": {"type": "llm", "llm": {"endpoint": double.base_url, "model": "judge"}},
            },
        },
        **spec,
    }
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationSchedule",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def schedule_runs(kubectl: Kubectl, namespace: str, name: str) -> list[dict[str, Any]]:
    return kubectl.items("evaluationruns", namespace, "-l", f"{LABEL_SCHEDULE}={name}")


@pytest.fixture(scope="module")
def every_minute(kubectl: Kubectl, operator: Operator, double: LLMDouble) -> tuple[str, float]:
    """A namespace with a schedule firing every minute, made before the other test runs."""
    namespace = "every-minute"
    kubectl.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        snapshot("france", namespace, ROWS),
        workload("cand", namespace, double),
        schedule("minutely", namespace, double, schedule="* * * * *"),
    )
    return namespace, time.monotonic()


def test_a_change_of_the_engine_is_evaluated_and_its_regression_said(
    kubectl: Kubectl,
    operator: Operator,
    double: LLMDouble,
    bad: LLMDouble,
    namespace: str,
    every_minute: tuple[str, float],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubectl.apply(
        snapshot("france", namespace, ROWS),
        workload("cand", namespace, double),
        schedule(
            "nightly", namespace, double,
            triggers={"onWorkloadChange": True},
            successfulRunsHistoryLimit=1,
            regression={"margin": 0.05},
        ),
    )  # fmt: skip
    # The schedule notes the Workload's serving configuration once it is Ready (no run).
    noted = kubectl.wait_for(
        "evaluationschedule", "nightly", namespace,
        lambda obj: bool((obj.get("status") or {}).get("servingHash")), timeout=60,
    )  # fmt: skip
    assert schedule_runs(kubectl, namespace, "nightly") == []
    assert noted["status"]["phase"] == "Active"

    # On request: `kyai run-now` sets the annotation, the operator makes one run.
    monkeypatch.setenv("KUBECONFIG", str(kubectl.kubeconfig))  # undone after the test
    assert kyai_main(["run-now", "nightly", "-n", namespace]) == 0
    assert "for a run (kyai.io/run-now=" in capsys.readouterr().out
    assert kyai_main(["run-now", "no-such", "-n", namespace]) == 2
    assert f"no EvaluationSchedule no-such in {namespace}" in capsys.readouterr().err
    first = kubectl.wait_for(
        "evaluationschedule", "nightly", namespace,
        lambda obj: [e.get("phase") for e in (obj.get("status") or {}).get("history") or []]
        == ["Succeeded"],
        timeout=120,
    )  # fmt: skip
    (entry,) = first["status"]["history"]
    assert entry["trigger"] == "request" and entry["score"] == 1.0, entry
    assert first["status"]["lastScore"] == 1.0
    annotations = first["metadata"].get("annotations") or {}
    assert "kyai.io/run-now" not in annotations, annotations  # acted on once, removed
    (made,) = schedule_runs(kubectl, namespace, "nightly")
    assert made["metadata"]["labels"]["team"] == "evals"  # the template's metadata
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "EvaluationSchedule",
        "nightly",
        True,
    )

    # Argo CD syncs a new engine: the Workload points at a server that answers badly.
    changed_at = time.monotonic()
    kubectl.run(
        "patch", "workload", "cand", "-n", namespace, "--type", "merge",
        "-p", f'{{"spec": {{"endpoint": {{"url": "{bad.base_url}"}}}}}}',
    )  # fmt: skip

    def regressed(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Regressed" and c["status"] == "True" for c in conditions)

    done = kubectl.wait_for("evaluationschedule", "nightly", namespace, regressed, timeout=120)
    took = time.monotonic() - changed_at
    print(f"Workload changed -> Regressed in {took:.1f} s")
    assert took < 120
    status = done["status"]
    said = condition(done, "Regressed")
    assert said["reason"] == "WorseThanMargin", said
    result = status["regression"]
    assert result["difference"] == -1.0 and result["questions"] == 20, result
    assert result["high"] < -0.05 and result["pValue"] < 0.001, result
    assert result["baseline"] == entry["run"]
    assert "p = " in said["message"] and entry["run"] in said["message"], said
    history = status["history"]
    assert [h["trigger"] for h in history] == ["request", "change"], history
    assert history[1]["regressed"] is True and history[1]["score"] == 0.0
    assert status["change"] == -1.0 and status["lastScore"] == 0.0
    # The run says it too.
    newest = kubectl.get("evaluationrun", history[1]["run"], namespace)
    assert condition(newest, "Regressed")["status"] == "True"

    # successfulRunsHistoryLimit 1: the older run is deleted, its history entry stays.
    def only_newest(_: Any) -> bool:
        names = [r["metadata"]["name"] for r in schedule_runs(kubectl, namespace, "nightly")]
        return names == [history[1]["run"]]

    kubectl.wait_for("evaluationschedule", "nightly", namespace, only_newest, timeout=60)
    kept = kubectl.get("evaluationschedule", "nightly", namespace)
    assert [h["run"] for h in kept["status"]["history"]] == [h["run"] for h in history]
    table = kubectl.run("get", "esched", "-n", namespace).stdout
    assert "True" in table and "nightly" in table, table  # REGRESSED column


def test_a_schedule_every_minute_makes_its_run_within_70_s(
    kubectl: Kubectl, operator: Operator, every_minute: tuple[str, float]
) -> None:
    namespace, created = every_minute

    def made(obj: dict[str, Any]) -> bool:
        return bool((obj.get("status") or {}).get("lastScheduleTime"))

    remaining = max(1.0, 70 - (time.monotonic() - created))
    found = kubectl.wait_for("evaluationschedule", "minutely", namespace, made, timeout=remaining)
    runs = schedule_runs(kubectl, namespace, "minutely")
    assert len(runs) == 1, [r["metadata"]["name"] for r in runs]
    annotations = runs[0]["metadata"]["annotations"]
    assert annotations["kyai.io/schedule-trigger"] == "schedule"
    assert found["status"]["nextScheduleTime"] > found["status"]["lastScheduleTime"]
