"""Two ``kyai operator --leader-elect`` processes: one holds the Lease and reconciles; when it is
killed or frozen the other takes over, and no run is done twice.

controller-runtime's timings (lease 15 s, renew deadline 10 s, retry 2 s), as the chart runs
them. Runs in flight are slow (the double waits 0.4 s per answer) so that they straddle the
hand-over.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator
from system.test_operator import phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(600)

#: The issue's bound on a hand-over after the holder is killed.
#: The test's safety net for the takeover after a SIGKILL. With controller-runtime's timings
#: (lease 15 s, retry 2 s with jitter) the standby takes over 15-18 s after the holder's last
#: renew (17.0 s measured on a quiet machine: the figure is printed); the net leaves room for
#: a loaded CI machine, where a missed bound would fail a run for the machine's sake.
FAILOVER_S = 30.0
RUNS = 15
#: Three slow questions answered right, one wrong: every run scores 0.75.
ROWS = [
    *({"instruction": f"slow question {i}", "groundTruthResponse": "done"} for i in range(3)),
    {"instruction": "Capital of Spain?", "groundTruthResponse": "Madrid"},
]
EXPECTED_SCORE = 0.75


@pytest.fixture
def replicas(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    double: LLMDouble,
    namespace: str,
    tmp_path: Path,
) -> Iterator[dict[str, Operator]]:
    """Two operators electing a leader on a Lease in the test's namespace."""
    if cluster is None:
        pytest.skip("starts operator processes; the installed chart's pair is tested by podman")
    started: dict[str, Operator] = {}
    for identity in ("a", "b"):
        (tmp_path / identity).mkdir()
        started[identity] = Operator(
            kubectl.kubeconfig,
            tmp_path / identity,
            env={
                "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
                "KYAI_DEFAULT_JUDGE_MODEL": "judge",
                "KYAI_LEADER_ELECT": "true",
                "KYAI_LEADER_ELECTION_NAMESPACE": namespace,
                "KYAI_LEADER_ELECTION_IDENTITY": identity,
            },
        )
        started[identity].start()
    yield started
    for operator in started.values():
        if operator.process is not None and operator.process.poll() is None:
            operator.process.send_signal(signal.SIGCONT)
        operator.stop()


def holder(kubectl: Kubectl, namespace: str) -> str | None:
    done = kubectl.run("get", "lease", "kyai-operator", "-n", namespace, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    spec: dict[str, Any] = json.loads(done.stdout).get("spec") or {}
    return spec.get("holderIdentity") or None


def wait_holder(kubectl: Kubectl, namespace: str, among: set[str], timeout: float) -> str:
    def held(lease: dict[str, Any]) -> str | None:
        if lease["metadata"]["name"] != "kyai-operator":
            return None
        found: str | None = (lease.get("spec") or {}).get("holderIdentity") or None
        return found

    leases = kubectl.wait_items(
        "lease",
        namespace,
        lambda found: any(held(lease) in among for lease in found),
        timeout=timeout,
        what=f"no replica of {sorted(among)} held the Lease",
    )
    return next(str(held(lease)) for lease in leases if held(lease) in among)


def leader_gauge(operator: Operator) -> float:
    for line in operator.metrics().splitlines():
        if line.startswith("kyai_operator_leader "):
            return float(line.split()[1])
    raise AssertionError("kyai_operator_leader is not on /metrics")


def create_runs(kubectl: Kubectl, double: LLMDouble, namespace: str) -> list[str]:
    names = [f"r{i}" for i in range(RUNS)]
    kubectl.apply(
        snapshot("capitals", namespace, ROWS),
        workload("cand", namespace, double),
        *(run(name, namespace, double, generation={"concurrency": 1}) for name in names),
    )
    return names


def assert_all_succeeded_once(
    kubectl: Kubectl, namespace: str, names: list[str], leader: Operator
) -> None:
    def finished_or_no_leader(obj: dict[str, Any]) -> bool:
        # The new leader gone (it missed its renew deadline): nothing will finish; say so
        # now rather than after the timeout.
        assert leader.process is None or leader.process.poll() is None, leader.logs()[-2000:]
        return bool(phase_is("Succeeded", "Failed")(obj))

    for name in names:
        done = kubectl.wait_for(
            "evaluationrun", name, namespace, finished_or_no_leader, timeout=300
        )
        assert done["status"]["phase"] == "Succeeded", (name, done["status"])
        assert done["status"]["avgScore"] == EXPECTED_SCORE, (name, done["status"])
    jobs: dict[str, list[str]] = {}
    for job in kubectl.items("jobs", namespace):
        run_name = job["metadata"]["labels"]["kyai.io/evaluation-run"]
        jobs.setdefault(run_name, []).append(job["metadata"]["name"])
    assert {name: sorted(found) for name, found in jobs.items()} == {
        name: [f"{name}-generate", f"{name}-judge"] for name in names
    }


def test_the_standby_takes_over_a_killed_leader(
    kubectl: Kubectl, double: LLMDouble, namespace: str, replicas: dict[str, Operator]
) -> None:
    leader = wait_holder(kubectl, namespace, set(replicas), timeout=30)
    (standby,) = set(replicas) - {leader}
    assert leader_gauge(replicas[leader]) == 1.0
    assert leader_gauge(replicas[standby]) == 0.0
    names = create_runs(kubectl, double, namespace)
    # Killed once the runs are under way (r0 past Pending: a poll may miss a short phase).
    kubectl.wait_for("evaluationrun", names[0], namespace, lambda o: not phase_is("Pending")(o),
                     timeout=120)  # fmt: skip
    killed = time.monotonic()
    replicas[leader].kill()
    assert wait_holder(kubectl, namespace, {standby}, timeout=60) == standby
    failover = time.monotonic() - killed
    print(f"failover after SIGKILL: {failover:.1f} s")
    assert failover <= FAILOVER_S, failover
    assert leader_gauge(replicas[standby]) == 1.0
    assert_all_succeeded_once(kubectl, namespace, names, replicas[standby])


def test_a_frozen_leader_that_resumes_stops_without_creating_anything(
    kubectl: Kubectl, double: LLMDouble, namespace: str, replicas: dict[str, Operator]
) -> None:
    leader = wait_holder(kubectl, namespace, set(replicas), timeout=30)
    (standby,) = set(replicas) - {leader}
    frozen = replicas[leader].process
    assert frozen is not None
    frozen.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    names = create_runs(kubectl, double, namespace)
    assert wait_holder(kubectl, namespace, {standby}, timeout=30) == standby
    kubectl.wait_for("evaluationrun", names[0], namespace, phase_is("Generating"), timeout=120)
    time.sleep(max(0.0, 30 - (time.monotonic() - stopped)))
    frozen.send_signal(signal.SIGCONT)
    assert frozen.wait(timeout=30) == 1
    log = replicas[leader].logs()
    assert "beyond the renew deadline" in log, log
    assert holder(kubectl, namespace) == standby
    assert_all_succeeded_once(kubectl, namespace, names, replicas[standby])
