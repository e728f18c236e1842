"""EvaluationSweep end to end (issue 23): the operator runs a matrix and ranks it.

In the devcluster, with the operator as a process resolving Service names as a pod does (so
served Workloads' engine stand-ins are reachable) and timers shortened by its settings. The
LLM double serves three endpoint candidates of known accuracies and the judge; every run of
a sweep is watched (``kubectl get -w``) from before the sweep exists, so what is asserted
about the runs (never more unfinished than ``parallelism``, each made once) holds for every
event, not for samples.

- three endpoint Workloads on one Snapshot, ``parallelism: 2``: at most two unfinished runs,
  Succeeded, the tie-aware ranks :func:`kyai.stats.ranks` gives on the runs' own
  ``status.scores``, ``best`` = the Workloads ranked 1; ``kubectl get esw``, the Ready
  condition, ``kyai_sweep_cells`` and ``kyai leaderboard --sweep`` agree;
- one served Workload × two EngineArgsSets: two derived Workloads (never both at once under
  ``parallelism: 1``), each Ready, both cells run, both Workloads deleted after;
- a Workload added to a finished sweep: exactly one new run; the old runs keep their uids;
- the operator SIGKILLed mid-sweep and started again: no run or Workload made twice,
  ``parallelism`` still held, the sweep finishes;
- issue 34: two candidates that answer every question alike, against a baseline with a
  margin: never non-inferior on 3 questions; on 100, non-inferior at 0.05 and not at 0.02,
  as the non-inferiority gate and ``kyai compare`` say.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai import stats
from kyai.api import EngineArgsSetSpec, EvaluationRunStatus, EvaluationSweepStatus
from kyai.builders import engine_args_hash
from kyai.cli import main as kyai_main
from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from kyai_testing.kubectl_watch import json_documents
from system.helpers import Kubectl, Operator, pod_network_operator
from system.test_operator import condition, phase_is, snapshot

pytestmark = pytest.mark.timeout(300)

GROUP = "kyai.io/v1alpha1"
#: Twelve questions, all answered "Paris" when right. cand-a is always right, cand-b wrong on
#: question 0 only, cand-c never right: paired McNemar tests separate c from a and b, not a
#: from b.
ROWS = [
    {
        "instruction": f"Question {i}: what is the capital of France?",
        "groundTruthResponse": "Paris",
        "externalRowId": f"q{i}",
    }
    for i in range(12)
]
#: Two rows for the served stand-ins (one answer fits each).
CAPITALS = [
    {"instruction": "Capital of France?", "groundTruthResponse": "Paris", "externalRowId": "fr"},
    {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima", "externalRowId": "pe"},
]
FINISHED = ("Succeeded", "Failed")


def questions(count: int) -> list[dict[str, str]]:
    """``count`` questions whose right answer is Paris (cand-a and cand-d both give it)."""
    return [
        {"instruction": f"Question {i}: what is the capital of France?",
         "groundTruthResponse": "Paris", "externalRowId": f"q{i}"}
        for i in range(1, count + 1)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def sweep_double() -> Iterator[LLMDouble]:
    """Four endpoint candidates of known accuracies on ROWS, and the judge."""
    server = LLMDouble(
        models=[
            *(ModelSpec(f"cand-{x}", max_model_len=4096) for x in "abcd"),
            ModelSpec("judge", max_model_len=8192),
        ],
        rules=[
            Rule(match="Question 0:", model="cand-b", content="Lyon"),
            Rule(model="cand-a", content="Paris"),
            Rule(model="cand-b", content="Paris"),
            Rule(model="cand-c", content="I do not know"),
            Rule(model="cand-d", content="It is Paris"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    sweep_double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    if cluster is None:
        pytest.skip("the engine stand-ins and shortened timers need the devcluster")
    running = pod_network_operator(
        cluster, kubectl.kubeconfig, tmp_path_factory.mktemp("operator"), sweep_double.base_url,
        KYAI_RUN_RESYNC_SECONDS="3", KYAI_JOB_START_GRACE_SECONDS="2",
    )  # fmt: skip
    running.start()
    yield running
    running.stop()


# -- objects ------------------------------------------------------------------------------------


def endpoint_workload(name: str, namespace: str, double: LLMDouble) -> dict[str, Any]:
    return {
        "apiVersion": GROUP,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"framework": "vllm", "model": name, "endpoint": {"url": double.base_url}},
    }


def served_objects(namespace: str) -> list[dict[str, Any]]:
    """A served vLLM Workload (no set of its own) and two EngineArgsSets answering apart."""

    def engine_args(name: str, answer: str, seqs: int) -> dict[str, Any]:
        return {
            "apiVersion": GROUP,
            "kind": "EngineArgsSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "framework": "vllm",
                "args": {"max-model-len": 4096, "max-num-seqs": seqs},
                "env": [{"name": "KYAI_STANDIN_ANSWER", "value": answer}],
            },
        }

    return [
        engine_args("set-a", "Paris", 8),
        engine_args("set-b", "Paris or Lima", 16),
        {
            "apiVersion": GROUP,
            "kind": "Workload",
            "metadata": {"name": "served", "namespace": namespace},
            "spec": {"framework": "vllm", "model": "Qwen/Qwen3-8B"},
        },
    ]


def sweep(
    name: str, namespace: str, double: LLMDouble, workloads: list[str], **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workloads": [{"name": w} for w in workloads],
        "snapshots": [{"name": "capitals"}],
        "run": {
            "judge": {"type": "llm", "llm": {"endpoint": double.base_url, "model": "judge"}},
            "generation": {"concurrency": 4},
        },
        **spec,
    }
    return {
        "apiVersion": GROUP,
        "kind": "EvaluationSweep",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


# -- watching -----------------------------------------------------------------------------------


class Watch:
    """Every event of a kind in a namespace (``kubectl get -w``), from before it starts."""

    def __init__(self, kubectl: Kubectl, kind: str, namespace: str, *selector: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            ["kubectl", "get", kind, "-n", namespace, *selector, "--watch",
             "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "KUBECONFIG": str(kubectl.kubeconfig)},
        )  # fmt: skip
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._kubectl, self._kind, self._namespace = kubectl, kind, namespace

    def _read(self) -> None:
        assert self._process.stdout is not None
        for event in json_documents(self._process.stdout):
            with self._lock:
                self.events.append((str(event["type"]), event["object"]))

    def snapshot(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return list(self.events)

    def states(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The objects that exist after each event, by name."""
        current: dict[str, dict[str, Any]] = {}
        for kind, obj in self.snapshot():
            name = str(obj["metadata"]["name"])
            if kind == "DELETED":
                current.pop(name, None)
            else:
                current[name] = obj
            yield dict(current)

    def added(self) -> Counter[str]:
        """How often each name was created (a uid seen for the first time)."""
        uids: dict[str, set[str]] = {}
        for _, obj in self.snapshot():
            uids.setdefault(str(obj["metadata"]["name"]), set()).add(obj["metadata"]["uid"])
        return Counter({name: len(found) for name, found in uids.items()})

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)
        self._thread.join(timeout=10)
        assert self._process.stdout is not None
        self._process.stdout.close()


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for watch in started:
        watch.close()


def watch(watches: list[Watch], kubectl: Kubectl, kind: str, namespace: str) -> Watch:
    found = Watch(kubectl, kind, namespace)
    watches.append(found)
    time.sleep(1.0)  # the watch is established before anything is created
    return found


def unfinished(objects: dict[str, dict[str, Any]]) -> int:
    return sum(
        (obj.get("status") or {}).get("phase") not in FINISHED
        and not obj["metadata"].get("deletionTimestamp")
        for obj in objects.values()
    )


def most_unfinished(runs: Watch) -> int:
    return max((unfinished(state) for state in runs.states()), default=0)


def finished_sweep(kubectl: Kubectl, name: str, namespace: str, timeout: float = 200) -> Any:
    done = kubectl.wait_for("esw", name, namespace, phase_is(*FINISHED), timeout=timeout)
    return done


def own_runs(kubectl: Kubectl, name: str, namespace: str) -> list[dict[str, Any]]:
    return kubectl.items("er", namespace, "-l", f"kyai.io/sweep={name}")


# -- the scenarios ------------------------------------------------------------------------------


def test_three_endpoint_workloads_rank_within_parallelism(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str,
    watches: list[Watch], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        *(endpoint_workload(f"cand-{x}", namespace, sweep_double) for x in "abc"),
    )
    for x in "abc":
        kubectl.wait_for("workload", f"cand-{x}", namespace, phase_is("Ready"))
    runs = watch(watches, kubectl, "evaluationruns", namespace)
    kubectl.apply(
        sweep("pick", namespace, sweep_double, ["cand-a", "cand-b", "cand-c"], parallelism=2)
    )
    done = finished_sweep(kubectl, "pick", namespace)
    status = EvaluationSweepStatus.model_validate(done["status"])
    assert status.phase == "Succeeded", (done["status"], operator.logs()[-3000:])
    # Never more than two unfinished runs, and two at once at some point.
    assert most_unfinished(runs) == 2
    assert sorted(runs.added().values()) == [1, 1, 1]
    # The ranks kyai.stats gives on the runs' own per-question scores.
    by_workload = {}
    for run in own_runs(kubectl, "pick", namespace):
        run_status = EvaluationRunStatus.model_validate(run["status"])
        assert run_status.phase == "Succeeded" and run_status.scores is not None
        by_workload[run["spec"]["workloadRef"]["name"]] = run_status
    names = sorted(by_workload)
    expected = dict(zip(names, stats.ranks([by_workload[n].scores or [] for n in names]),
                        strict=True))  # fmt: skip
    assert status.table is not None
    assert {row.workload: row.rank for row in status.table} == expected
    assert expected == {"cand-a": 1, "cand-b": 1, "cand-c": 3}  # the double's accuracies
    assert {row.workload: row.avg_score for row in status.table} == {
        name: by_workload[name].avg_score for name in names
    }
    assert status.best is not None
    assert sorted(choice.workload for choice in status.best) == ["cand-a", "cand-b"]
    assert status.cells is not None and (status.cells.total, status.cells.succeeded) == (3, 3)
    assert condition(done, "Ready")["status"] == "True"
    assert condition(done, "Reconciling")["status"] == "False"
    assert condition(done, "Stalled")["status"] == "False"
    assert status.observed_generation == done["metadata"]["generation"]
    table = kubectl.run("get", "esw", "pick", "-n", namespace).stdout
    assert "Succeeded" in table and "cand-a, cand-b" in table, table
    metrics = operator.metrics()
    line = f'kyai_sweep_cells{{namespace="{namespace}",phase="Succeeded",sweep="pick"}} 3.0'
    assert line in metrics, [m for m in metrics.splitlines() if "sweep" in m]
    # kyai leaderboard --sweep prints the same table.
    monkeypatch.setenv("KUBECONFIG", str(kubectl.kubeconfig))
    capsys.readouterr()
    assert kyai_main(["leaderboard", "--sweep", "pick", "-n", namespace, "-o", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(row["workload"], row["rank"]) for row in printed["rows"]] == [
        (row.workload, row.rank) for row in status.table
    ]
    assert printed["phase"] == "Succeeded"
    assert kyai_main(["leaderboard", "--sweep", "nope", "-n", namespace]) == 2
    assert f"no EvaluationSweep nope in namespace {namespace}" in capsys.readouterr().err


def test_served_workload_times_two_engine_args_sets(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str,
    watches: list[Watch], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    kubectl.apply(snapshot("capitals", namespace, CAPITALS), *served_objects(namespace))
    workloads = watch(watches, kubectl, "workloads", namespace)
    runs = watch(watches, kubectl, "evaluationruns", namespace)
    kubectl.apply(
        sweep("flags", namespace, sweep_double, ["served"],
              engineArgsSets=[{"name": "set-a"}, {"name": "set-b"}])
    )  # fmt: skip
    done = finished_sweep(kubectl, "flags", namespace, timeout=240)
    status = EvaluationSweepStatus.model_validate(done["status"])
    assert status.phase == "Succeeded", (done["status"], operator.logs()[-3000:])
    derived = {name for name, count in workloads.added().items() if name != "served" and count}
    assert len(derived) == 2 and all(name.startswith("served-set-") for name in derived)
    # Each derived Workload was Ready, ran its cell, and is gone; never two at once.
    ready = {
        str(obj["metadata"]["name"])
        for _, obj in workloads.snapshot()
        if (obj.get("status") or {}).get("phase") == "Ready"
    }
    assert derived <= ready
    assert max(len(set(state) & derived) for state in workloads.states()) == 1
    kubectl.wait_items(
        "workloads",
        namespace,
        lambda found: not derived & {w["metadata"]["name"] for w in found},
        timeout=60,
        what="the derived Workloads were not deleted",
    )
    assert [kind for kind, obj in workloads.snapshot() if kind == "DELETED"] == ["DELETED"] * 2
    assert most_unfinished(runs) == 1
    assert status.table is not None
    rows = {(row.workload, row.engine_args_set): row for row in status.table}
    assert set(rows) == {("served", "set-a"), ("served", "set-b")}
    assert rows["served", "set-a"].avg_score == 0.5 and rows["served", "set-b"].avg_score == 1.0
    for row in status.table:
        run = kubectl.get("er", str(row.run), namespace)
        assert run["spec"]["workloadRef"]["name"] in derived
    # Issue 43: each run's status names the set that served it and the hash its engine was
    # rendered from, so its Workload gone, the sweep's rows and kyai leaderboard -n still say.
    hashes = {
        str(obj["metadata"]["name"]): engine_args_hash(
            EngineArgsSetSpec.model_validate(obj["spec"])
        )
        for obj in served_objects(namespace)
        if obj["kind"] == "EngineArgsSet"
    }
    for row in status.table:
        assert row.engine_args_set is not None
        recorded = EvaluationRunStatus.model_validate(
            kubectl.get("er", str(row.run), namespace)["status"]
        )
        expected = (row.engine_args_set, hashes[row.engine_args_set])
        assert (recorded.engine_args_set, recorded.engine_args_hash) == expected
        assert row.engine_args_hash == expected[1]
    monkeypatch.setenv("KUBECONFIG", str(kubectl.kubeconfig))
    assert kyai_main(["leaderboard", "-n", namespace, "-o", "json"]) == 0
    entries = [
        e for board in json.loads(capsys.readouterr().out)["boards"] for e in board["entries"]
    ]
    assert {(e["run"], e["engine_args_set"], e["engine_args_hash"]) for e in entries} == {
        (row.run, row.engine_args_set, row.engine_args_hash) for row in status.table
    }
    # The base Workload is the user's: still there, untouched.
    assert kubectl.get("workload", "served", namespace)["metadata"].get("ownerReferences") is None


def test_a_workload_added_to_a_finished_sweep_makes_exactly_one_run(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str,
    watches: list[Watch],
) -> None:  # fmt: skip
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        *(endpoint_workload(f"cand-{x}", namespace, sweep_double) for x in "ad"),
    )
    kubectl.apply(sweep("grow", namespace, sweep_double, ["cand-a"]))
    first = finished_sweep(kubectl, "grow", namespace)
    assert first["status"]["phase"] == "Succeeded", first["status"]
    before = {
        r["metadata"]["name"]: r["metadata"]["uid"] for r in own_runs(kubectl, "grow", namespace)
    }
    assert len(before) == 1
    runs = watch(watches, kubectl, "evaluationruns", namespace)
    kubectl.apply(sweep("grow", namespace, sweep_double, ["cand-a", "cand-d"]))
    done = kubectl.wait_for(
        "esw", "grow", namespace,
        lambda o: (o.get("status") or {}).get("observedGeneration") == 2
        and o["status"].get("phase") in FINISHED,
        timeout=200,
    )  # fmt: skip
    assert done["status"]["phase"] == "Succeeded", done["status"]
    after = {
        r["metadata"]["name"]: r["metadata"]["uid"] for r in own_runs(kubectl, "grow", namespace)
    }
    assert len(after) == 2
    assert {name: after[name] for name in before} == before  # the old run kept, never re-run
    (new,) = set(after) - set(before)
    # Exactly one run was made (the watch began with the old one listed).
    assert runs.added() == Counter({**dict.fromkeys(before, 1), new: 1})
    status = EvaluationSweepStatus.model_validate(done["status"])
    assert status.cells is not None and status.cells.total == 2 and status.cells.outdated == 0


def test_a_sigkilled_operator_makes_nothing_twice_and_the_sweep_finishes(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str,
    watches: list[Watch],
) -> None:  # fmt: skip
    kubectl.apply(
        snapshot("capitals", namespace, CAPITALS),
        *(endpoint_workload(f"cand-{x}", namespace, sweep_double) for x in "abc"),
        *served_objects(namespace),
    )
    workloads = watch(watches, kubectl, "workloads", namespace)
    runs = watch(watches, kubectl, "evaluationruns", namespace)
    # Endpoint Workloads keep one cell without a set; the served one gets set-a's.
    kubectl.apply(
        sweep("crash", namespace, sweep_double, ["cand-a", "cand-b", "served", "cand-c"],
              engineArgsSets=[{"name": "set-a"}], parallelism=2)
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not runs.snapshot():
        assert time.monotonic() < deadline, "the sweep made no run"
        time.sleep(0.05)
    operator.kill()  # SIGKILL: no clean-up
    time.sleep(2)
    operator.start()
    done = finished_sweep(kubectl, "crash", namespace, timeout=240)
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
    assert done["status"]["cells"]["total"] == 4
    made = runs.added()
    assert len(made) == 4 and set(made.values()) == {1}, made
    assert most_unfinished(runs) <= 2
    derived = {name: n for name, n in workloads.added().items() if name.startswith("served-")}
    assert len(derived) == 1 and set(derived.values()) == {1}, derived
    assert own_runs(kubectl, "crash", namespace) and len(own_runs(kubectl, "crash", namespace)) == 4


def test_deleting_a_sweep_deletes_its_runs_and_workloads(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str, tmp_path: Path
) -> None:
    kubectl.apply(snapshot("capitals", namespace, CAPITALS), *served_objects(namespace))
    kubectl.apply(
        sweep("gone", namespace, sweep_double, ["served"], engineArgsSets=[{"name": "set-a"}],
              keepWorkloads=True)
    )  # fmt: skip
    assert finished_sweep(kubectl, "gone", namespace, timeout=240)["status"]["phase"] == "Succeeded"
    kept = kubectl.items("workloads", namespace, "-l", "kyai.io/sweep=gone")
    assert len(kept) == 1  # keepWorkloads
    kubectl.run("delete", "esw", "gone", "-n", namespace, "--wait=true", "--timeout=60s")
    for kind in ("er", "workloads"):  # each gets the whole 60 s
        kubectl.wait_items(
            kind,
            namespace,
            lambda found: not found,
            "-l",
            "kyai.io/sweep=gone",
            timeout=60,
            what="the sweep's children outlived it",
        )
    assert kubectl.get("workload", "served", namespace)["metadata"]["name"] == "served"


def test_the_api_server_refuses_an_incoherent_sweep(
    kubectl: Kubectl, sweep_double: LLMDouble, namespace: str
) -> None:
    body = sweep("odd", namespace, sweep_double, ["cand-a"], nonInferiorityMargin=0.02)
    refused = kubectl.apply(body, check=False)
    assert refused.returncode != 0
    assert "spec.nonInferiorityMargin needs spec.baseline" in refused.stderr, refused.stderr
    listed = kubectl.run("get", "sweep", "-n", namespace).stderr  # the short name is known
    assert "No resources found" in listed, listed


def test_no_discordant_question_proves_only_what_the_question_count_allows(
    kubectl: Kubectl, operator: Operator, sweep_double: LLMDouble, namespace: str
) -> None:
    kubectl.apply(
        snapshot("three", namespace, questions(3)),
        snapshot("hundred", namespace, questions(100)),
        *(endpoint_workload(f"cand-{x}", namespace, sweep_double) for x in "ad"),
    )
    for x in "ad":
        kubectl.wait_for("workload", f"cand-{x}", namespace, phase_is("Ready"))
    alike = {"baseline": {"workload": "cand-a"}, "parallelism": 4}
    kubectl.apply(
        sweep("loose", namespace, sweep_double, ["cand-a", "cand-d"], nonInferiorityMargin=0.05,
              snapshots=[{"name": "three"}, {"name": "hundred"}], **alike),
        sweep("strict", namespace, sweep_double, ["cand-a", "cand-d"], nonInferiorityMargin=0.02,
              snapshots=[{"name": "hundred"}], **alike),
    )  # fmt: skip
    found = {}
    for name in ("loose", "strict"):
        done = finished_sweep(kubectl, name, namespace)
        status = EvaluationSweepStatus.model_validate(done["status"])
        assert status.phase == "Succeeded", (done["status"], operator.logs()[-3000:])
        assert status.table is not None
        found |= {(name, row.workload, row.snapshot): row for row in status.table}
    for sweep_name, snap, margin, expected in (
        ("loose", "three", 0.05, False),  # about ±55 points: three questions prove nothing
        ("loose", "hundred", 0.05, True),  # about ±2.7 points
        ("strict", "hundred", 0.02, False),
    ):
        base, row = found[sweep_name, "cand-a", snap], found[sweep_name, "cand-d", snap]
        assert base.baseline is True and row.baseline is None
        mine = EvaluationRunStatus.model_validate(
            kubectl.get("er", str(row.run), namespace)["status"]
        )
        theirs = EvaluationRunStatus.model_validate(
            kubectl.get("er", str(base.run), namespace)["status"]
        )
        assert mine.scores == theirs.scores and mine.scores  # every question alike
        truth = stats.compare(theirs.scores or [], mine.scores, non_inferiority=margin)
        assert truth.non_inferior is expected, (sweep_name, snap)
        assert row.non_inferior is expected and row.estimable is None, row
        assert (row.delta, row.p_value, row.test) == (0.0, 1.0, "mcnemar-exact")
        # Issue 43: the difference's interval and n, and a "no" says why.
        assert truth.interval is not None and row.delta_interval is not None
        assert row.delta_interval.low == pytest.approx(truth.interval.low)
        assert row.paired_questions == len(mine.scores)
        assert (row.non_inferior_reason is None) is expected, row
        assert row.rank == base.rank == 1  # nothing separates them
    loose = EvaluationSweepStatus.model_validate(kubectl.get("esw", "loose", namespace)["status"])
    assert sorted(choice.workload for choice in loose.best or ()) == ["cand-a", "cand-d"]
