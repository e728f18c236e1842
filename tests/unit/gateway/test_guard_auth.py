"""Who the gateway takes for a judge worker, at the edges of the pod's fields, and whose a
namespace refusal is (issue 36's mutation pass)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kyai.gateway import RefusedError, TokenVerifier, WorkerRule
from kyai.label_selector import LabelSelector

RULE = WorkerRule("kyai.io/evaluation-run", "app.kubernetes.io/component", ("judge", "grader"))


def _test_auth() -> ModuleType:
    name = "test_auth"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_auth.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def pod(component: str = "judge", **spec: Any) -> dict[str, Any]:
    labels = {"kyai.io/evaluation-run": "r", "app.kubernetes.io/component": component}
    return {"metadata": {"uid": "u1", "labels": labels}, "spec": spec}


def problem(found: dict[str, Any], account: str = "w") -> str | None:
    return RULE.problem(found, namespace="team-a", name="p", uid="u1", service_account=account)


def test_a_pod_of_another_component_is_told_every_allowed_one() -> None:
    assert problem(pod("generate"), "default") == (
        "pod team-a/p is not a judge worker: its app.kubernetes.io/component label is "
        "'generate', not judge or grader"
    )


def test_the_pods_account_from_either_field_or_the_default() -> None:
    assert problem(pod(serviceAccountName="w")) is None
    assert problem(pod(serviceAccount="w")) is None  # the deprecated field, alone
    assert problem(pod(), "default") is None
    assert problem(pod(serviceAccount="x")) == (
        "pod team-a/p runs as ServiceAccount x, the token is w's"
    )


async def test_a_namespace_refusal_is_of_the_callers_namespace() -> None:
    fakes = _test_auth()  # the stand-in API server and clocks of test_auth.py
    cluster, clocks = fakes.Cluster(), fakes.Clocks()
    selector = LabelSelector.model_validate({"matchLabels": {"kyai.io/judge": "on"}})
    verify: TokenVerifier = fakes.verifier(cluster, clocks, namespace_selector=selector)
    text = fakes.token()
    cluster.worker(text, "team-b")
    cluster.namespaces = {"team-b": {}}
    with pytest.raises(RefusedError) as refused:
        await verify.verify(text)
    assert refused.value.refusal.namespace == "team-b"


async def test_a_review_is_kept_60_s_when_accepted_and_10_s_when_refused() -> None:
    fakes = _test_auth()
    cluster, clocks = fakes.Cluster(), fakes.Clocks()
    verify = TokenVerifier(
        cluster,
        audience=fakes.DEFAULT_AUDIENCE,
        rule=fakes.RULE,
        clock=lambda: clocks.mono,
        wall_clock=lambda: clocks.wall,
    )  # its defaults: 60 s and 10 s
    good, bad = fakes.token(sub="good"), fakes.token(sub="bad")
    cluster.worker(good)
    await verify.verify(good)
    with pytest.raises(RefusedError):
        await verify.verify(bad)
    reviews = [call for call in cluster.calls if call[0] == "review"]
    assert len(reviews) == 2
    clocks.advance(5)
    await verify.verify(good)
    with pytest.raises(RefusedError):
        await verify.verify(bad)
    assert [call for call in cluster.calls if call[0] == "review"] == reviews  # both kept
    clocks.advance(5)  # exactly 10 s: the refusal is reviewed again, the caller still kept
    with pytest.raises(RefusedError):
        await verify.verify(bad)
    await verify.verify(good)
    assert len([call for call in cluster.calls if call[0] == "review"]) == 3
    clocks.advance(50)  # exactly 60 s: the caller is reviewed again
    await verify.verify(good)
    assert len([call for call in cluster.calls if call[0] == "review"]) == 4


async def test_what_the_review_refuses_is_said_word_for_word() -> None:
    fakes = _test_auth()
    cluster, clocks = fakes.Cluster(), fakes.Clocks()
    verify = fakes.verifier(cluster, clocks)
    review = fakes.TokenReviewStatus
    audience = fakes.DEFAULT_AUDIENCE
    pod_name, pod_uid = fakes.EXTRA_POD_NAME, fakes.EXTRA_POD_UID
    account = "system:serviceaccount:team-a:w"
    cases = {
        "1": (review(False), "the API server refused the token: no reason given"),
        "2": (
            review(True, username=account, audiences=("other",)),
            f"the TokenReview did not confirm audience {audience!r} (status.audiences: "
            '["other"])',
        ),
        "3": (
            review(True, audiences=(audience,)),
            "the caller is not a ServiceAccount: only EvaluationRun judge workers may use the "
            "default judge",
        ),
        "4": (
            review(True, username=account, audiences=(audience,), extra={pod_name: ("p",)}),
            f"the token of {account} is not bound to a pod (a judge pod's projected token is; "
            "a token from `kubectl create token` without a pod is not)",
        ),
        "5": (
            review(
                True, username=account, audiences=(audience,),
                extra={pod_name: ("p",), pod_uid: ("u",)},
            ),
            "pod team-a/p does not exist",
        ),
    }  # fmt: skip
    for sub, (status, message) in cases.items():
        text = fakes.token(sub=sub)
        cluster.statuses[text] = status
        found = await fakes.refusal(verify, text)
        assert found[2] == message
