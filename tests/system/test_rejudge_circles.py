"""Re-judges that can never start say so at once (issue 29), against the API server.

- A re-judge of itself (``spec.generationFrom.runRef.name`` its own name) is refused at
  admission by the CRD's rule, naming the field (the devcluster evaluates it with cel-python,
  as the real API server does with cel-go).
- Re-judges of each other (a re-judges b, b re-judges a) are both Stalled with the reason
  ``CircularRejudge`` within seconds, the one created first too (it waited for a source that
  did not exist yet: the circle found by the other wakes it, not the 20 s resync).
- A chain that ends at a run that generates is no circle: a re-judge of a re-judge waits,
  then judges the answers the first generated (a re-judge's own folder holds only its
  judgements).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator, reason_is
from system.test_operator import condition, phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(120)

#: Well under the operator's 20 s resync: the circle is told at once, not at a resync.
AT_ONCE_S = 8.0


def rejudge(name: str, source: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"generationFrom": {"runRef": {"name": source}}},
    }


def test_a_rejudge_of_itself_is_refused_at_admission(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    refused = kubectl.apply(rejudge("itself", "itself", namespace), check=False)
    assert refused.returncode != 0
    assert (
        "spec.generationFrom.runRef.name names this EvaluationRun itself: a re-judge judges "
        "the stored answers of another run (name the run that generated them)"
    ) in refused.stderr, refused.stderr
    missing = kubectl.run("get", "er", "itself", "-n", namespace, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_rejudges_of_each_other_are_both_stalled_within_seconds(
    kubectl: Kubectl, operator: Operator, namespace: str
) -> None:
    kubectl.apply(rejudge("a", "b", namespace))
    kubectl.wait_for("er", "a", namespace, reason_is("SourceRunNotFound"), timeout=30)
    created = time.monotonic()
    kubectl.apply(rejudge("b", "a", namespace))
    for name, other in (("b", "a"), ("a", "b")):
        run = kubectl.wait_for(
            "er", name, namespace, reason_is("CircularRejudge"), timeout=AT_ONCE_S
        )
        assert run["status"]["phase"] == "Pending"
        stalled = condition(run, "Stalled")
        assert (stalled["status"], stalled["reason"]) == ("True", "CircularRejudge")
        assert stalled["message"].startswith(
            f"{name} re-judges {other}, {other} re-judges {name}: re-judges in a circle wait "
            "for each other's answers forever; spec.generationFrom.runRef.name of one of them "
            "must name another run"
        ), stalled["message"]
        assert condition(run, "Reconciling")["status"] == "False"
    assert time.monotonic() - created < AT_ONCE_S
    # The circle broken (b now re-judges a run still to come): b waits again, not stalled.
    kubectl.run(
        "patch", "er", "b", "-n", namespace, "--type=merge",
        "-p", '{"spec":{"generationFrom":{"runRef":{"name":"later"}}}}',
    )  # fmt: skip
    waiting = kubectl.wait_for(
        "er", "b", namespace, reason_is("SourceRunNotFound"), timeout=AT_ONCE_S
    )
    assert condition(waiting, "Stalled")["status"] == "False"


def test_a_rejudge_of_a_rejudge_judges_the_generated_answers(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    again = {"workloadRef": None, "snapshotRef": None}
    kubectl.apply(
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        run("gen", namespace, double),
        run("once", namespace, double, generationFrom={"runRef": {"name": "gen"}}, **again),
        run("twice", namespace, double, generationFrom={"runRef": {"name": "once"}}, **again),
    )
    # The chain twice → once → gen is followed to a run that generates: a wait, no stall (on
    # a loaded machine the operator may first look at twice once the chain is done: then it
    # starts at once, never Stalled either).
    waiting = kubectl.wait_for(
        "er", "twice", namespace,
        lambda obj: reason_is("SourceRunNotReady")(obj) or phase_is("Judging", "Succeeded")(obj),
        timeout=30,
    )  # fmt: skip
    assert condition(waiting, "Stalled")["status"] == "False"
    first = kubectl.wait_for("er", "gen", namespace, phase_is("Succeeded", "Failed"), timeout=90)
    assert first["status"]["phase"] == "Succeeded", first["status"]
    asked = len(double.requests_for("cand"))
    done = kubectl.wait_for("er", "twice", namespace, phase_is("Succeeded", "Failed"), timeout=90)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["avgScore"] == first["status"]["avgScore"]
    assert done["status"]["plan"]["generationsPath"].endswith("/gen")
    assert (done["status"]["workload"], done["status"]["snapshot"]) == ("cand", "capitals")
    assert len(double.requests_for("cand")) == asked  # the candidate is not asked again
