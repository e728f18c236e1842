"""The EvaluationRun CRD refuses a re-judge of itself at admission, as the real server words it.

The rule sits at the root, where ``self.metadata.name`` can be read (a name from
``generateName`` included: the server names an object before it validates it). It holds only
while the run has no status: an object stored before the rule still takes its status and
finalizer writes (the operator Stalls it: ``CircularRejudge``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import Api

CRDS = Path(__file__).resolve().parents[2] / "crds"
RUNS = "/apis/kyai.io/v1alpha1/namespaces/default/evaluationruns"
REFUSED = (
    '<nil>: Invalid value: "object": spec.generationFrom.runRef.name names this EvaluationRun '
    "itself: a re-judge judges the stored answers of another run (name the run that generated "
    "them)"
)


@pytest.fixture
async def kyai(api: Api) -> Api:
    await api.create_crd(yaml.safe_load((CRDS / "evaluationruns.kyai.io.yaml").read_text()))
    return api


def rejudge(source: str, *, name: str | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "EvaluationRun",
        "metadata": {**({"name": name} if name else {}), **metadata},
        "spec": {"generationFrom": {"runRef": {"name": source}}},
    }


async def test_a_rejudge_of_itself_is_refused_naming_the_field(kyai: Api) -> None:
    status, body = await kyai.post(RUNS, rejudge("a", name="a"))
    assert status == 422, body
    assert body["message"] == f'EvaluationRun.kyai.io "a" is invalid: {REFUSED}'
    # Another source, or no generationFrom at all, is admitted.
    assert (await kyai.post(RUNS, rejudge("b", name="a")))[0] == 201
    plain = {"workloadRef": {"name": "w"}, "snapshotRef": {"name": "s"}}
    assert (await kyai.post(RUNS, {**rejudge("x", name="c"), "spec": plain}))[0] == 201


async def test_a_generated_name_is_read_and_an_update_before_any_status_is_checked(
    kyai: Api,
) -> None:
    # The rule reads the name the server generated (it cannot clash with a source named
    # before it existed).
    status, body = await kyai.post(RUNS, rejudge("src", generateName="rj-"))
    assert status == 201, body
    name = body["metadata"]["name"]
    assert name.startswith("rj-")
    # Pointed at itself before the operator wrote any status: refused.
    patch = {"spec": {"generationFrom": {"runRef": {"name": name}}}}
    status, body = await kyai.patch(f"{RUNS}/{name}", patch)
    assert status == 422, body
    assert REFUSED in body["message"]


async def test_a_run_with_a_status_still_takes_writes(kyai: Api) -> None:
    assert (await kyai.post(RUNS, rejudge("src", name="r")))[0] == 201
    assert (await kyai.patch(f"{RUNS}/r/status", {"status": {"phase": "Pending"}}))[0] == 200
    # Admission is the first line only: the operator Stalls what gets past it.
    patch = {"spec": {"generationFrom": {"runRef": {"name": "r"}}}}
    assert (await kyai.patch(f"{RUNS}/r", patch))[0] == 200
    stamped = {"metadata": {"finalizers": ["example.com/held"]}}
    assert (await kyai.patch(f"{RUNS}/r", stamped))[0] == 200
    assert (await kyai.patch(f"{RUNS}/r/status", {"status": {"message": "m"}}))[0] == 200
