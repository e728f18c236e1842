"""Token verification: the claims pre-check, the review's reading, the worker rule, the cache.

The cluster here is an in-memory :class:`ClusterAPI` that records what it was asked;
tests/integration/test_gateway.py runs the same verifier against a loopback API server.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kyai.gateway import (
    DEFAULT_AUDIENCE,
    EXTRA_POD_NAME,
    EXTRA_POD_UID,
    Caller,
    ClusterAPIError,
    RefusedError,
    TokenReviewStatus,
    TokenVerifier,
    WorkerRule,
    bearer_token,
    unverified_claims,
)
from kyai.gateway._auth import precheck, service_account_of
from kyai.label_selector import LabelSelector

RULE = WorkerRule("kyai.io/evaluation-run", "app.kubernetes.io/component", ("judge",))
NOW = 1_800_000_000.0


def jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def token(exp: float = NOW + 600, aud: Any = (DEFAULT_AUDIENCE,), **extra: Any) -> str:
    return jwt({"aud": list(aud) if isinstance(aud, tuple) else aud, "exp": exp, **extra})


def pod(
    name: str = "judge-pod",
    uid: str = "uid-1",
    account: str = "run-1-worker",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "labels": {"kyai.io/evaluation-run": "run-1", "app.kubernetes.io/component": "judge"}
            if labels is None
            else labels,
        },
        "spec": {"serviceAccountName": account},
    }


class Cluster:
    """An in-memory ClusterAPI: answers from its tables, records every call."""

    def __init__(self) -> None:
        self.statuses: dict[str, TokenReviewStatus] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, ...]] = []
        self.failing = False
        self.gate: asyncio.Event | None = None

    async def review_token(self, token: str, audiences: Sequence[str]) -> TokenReviewStatus:
        self.calls.append(("review", *audiences))
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise ClusterAPIError("cannot reach the API server at https://10.0.0.1: refused")
        return self.statuses.get(token, TokenReviewStatus(False, error="invalid bearer token"))

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append(("pod", namespace, name))
        return self.pods.get((namespace, name))

    async def get_namespace(self, name: str) -> Mapping[str, Any] | None:
        self.calls.append(("namespace", name))
        if name not in self.namespaces:
            return None
        return {"metadata": {"name": name, "labels": self.namespaces[name]}}

    async def close(self) -> None:
        pass

    def worker(self, token: str, namespace: str = "team-a", **pod_fields: Any) -> None:
        found = pod(**pod_fields)
        self.pods[namespace, found["metadata"]["name"]] = found
        self.statuses[token] = TokenReviewStatus(
            True,
            username=f"system:serviceaccount:{namespace}:run-1-worker",
            extra={EXTRA_POD_NAME: ("judge-pod",), EXTRA_POD_UID: ("uid-1",)},
            audiences=(DEFAULT_AUDIENCE,),
        )


class Clocks:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = NOW

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def verifier(cluster: Cluster, clocks: Clocks, **options: Any) -> TokenVerifier:
    return TokenVerifier(
        cluster,
        audience=DEFAULT_AUDIENCE,
        rule=RULE,
        clock=lambda: clocks.mono,
        wall_clock=lambda: clocks.wall,
        **options,
    )


async def refusal(verify: TokenVerifier, token: str) -> tuple[int, str, str]:
    with pytest.raises(RefusedError) as refused:
        await verify.verify(token)
    found = refused.value.refusal
    return found.status, found.reason, found.message


# -- reading a request and a token ----------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("bearer   abc ", "abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, expected: str | None) -> None:
    assert bearer_token(header) == expected


def test_unverified_claims_read_a_jwt_payload_only() -> None:
    assert unverified_claims(token(aud="x")) == {"aud": "x", "exp": NOW + 600}
    for text in ("not-a-jwt", "a.b", "a..c", "a.!!!.c", jwt({"x": 1}).replace(".", "", 1)):
        assert unverified_claims(text) is None, text
    listed = base64.urlsafe_b64encode(b"[1, 2]").decode().rstrip("=")
    assert unverified_claims(f"h.{listed}.s") is None


def test_precheck_refuses_what_cannot_be_a_gateway_token() -> None:
    assert precheck(token(), DEFAULT_AUDIENCE, NOW) == NOW + 600
    assert precheck(token(aud=DEFAULT_AUDIENCE), DEFAULT_AUDIENCE, NOW) == NOW + 600
    assert precheck(jwt({"aud": [DEFAULT_AUDIENCE]}), DEFAULT_AUDIENCE, NOW) is None
    cases = [
        ("x" * 20_000, "Malformed", "too long"),
        ("opaque-static-token", "Malformed", "not a JWT"),
        (token(aud=("https://kubernetes.default.svc",)), "WrongAudience",
         '["https://kubernetes.default.svc"], not \'kyai-judge-gateway\''),
        (jwt({"exp": NOW + 60}), "WrongAudience", "[]"),
        (token(exp=NOW - 1), "Expired", "expired at 2027-01-15T07:59:59+00:00"),
        (token(exp=NOW), "Expired", "expired at"),
    ]  # fmt: skip
    for text, reason, words in cases:
        with pytest.raises(RefusedError) as refused:
            precheck(text, DEFAULT_AUDIENCE, NOW)
        assert refused.value.refusal.status == 401
        assert refused.value.refusal.reason == reason
        assert words in refused.value.refusal.message


def test_service_account_usernames() -> None:
    assert service_account_of("system:serviceaccount:team-a:run-1-worker") == (
        "team-a",
        "run-1-worker",
    )
    for name in ("alice", "system:serviceaccount:team-a", "system:node:n1:x",
                 "system:serviceaccount::x", "system:serviceaccount:a:b:c"):  # fmt: skip
        assert service_account_of(name) is None, name


def test_token_review_status_reads_the_api_servers_answer() -> None:
    answer = {
        "kind": "TokenReview",
        "spec": {"token": "secret", "audiences": [DEFAULT_AUDIENCE]},
        "status": {
            "authenticated": True,
            "user": {
                "username": "system:serviceaccount:team-a:w",
                "uid": "sa-uid",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {EXTRA_POD_NAME: ["p"], EXTRA_POD_UID: ["u"], "odd": "not-a-list"},
            },
            "audiences": [DEFAULT_AUDIENCE],
        },
    }
    status = TokenReviewStatus.from_review(answer)
    assert status.authenticated and status.uid == "sa-uid"
    assert status.extra_value(EXTRA_POD_NAME) == "p" and status.extra_value("odd") is None
    assert status.audiences == (DEFAULT_AUDIENCE,)
    expired = "[invalid bearer token, service account token has expired]"
    refused = TokenReviewStatus.from_review({"status": {"user": {}, "error": expired}})
    assert not refused.authenticated and refused.username == "" and "expired" in refused.error
    for bad in ({}, {"status": "x"}, [], None):
        with pytest.raises(ClusterAPIError):
            TokenReviewStatus.from_review(bad)


# -- the worker rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "words"),
    [
        (None, "pod team-a/judge-pod does not exist"),
        (pod(uid="other"), "not the pod the token was issued to"),
        (pod(labels={"app.kubernetes.io/component": "judge"}), "no kyai.io/evaluation-run label"),
        (pod(labels={"kyai.io/evaluation-run": "r"}), "label is None, not judge"),
        (pod(labels={"kyai.io/evaluation-run": "r", "app.kubernetes.io/component": "generate"}),
         "label is 'generate', not judge"),
        (pod(account="default"), "runs as ServiceAccount default, the token is run-1-worker's"),
    ],
)  # fmt: skip
def test_the_worker_rule_names_what_is_wrong(found: dict[str, Any] | None, words: str) -> None:
    problem = RULE.problem(
        found, namespace="team-a", name="judge-pod", uid="uid-1", service_account="run-1-worker"
    )
    assert problem is not None and words in problem
    assert (
        RULE.problem(
            pod(), namespace="team-a", name="judge-pod", uid="uid-1", service_account="run-1-worker"
        )
        is None
    )


# -- the verifier ---------------------------------------------------------------------------


async def test_a_worker_is_verified_once_then_served_from_the_cache() -> None:
    cluster, clocks = Cluster(), Clocks()
    verify = verifier(cluster, clocks, success_ttl_s=60)
    good = token()
    cluster.worker(good)
    caller = await verify.verify(good)
    assert caller == Caller("team-a", "run-1-worker", "judge-pod", "run-1")
    for _ in range(5):
        assert await verify.verify(good) == caller
    assert cluster.calls == [("review", DEFAULT_AUDIENCE), ("pod", "team-a", "judge-pod")]
    clocks.advance(61)
    await verify.verify(good)
    assert len(cluster.calls) == 4


async def test_the_cache_never_outlives_the_token() -> None:
    cluster, clocks = Cluster(), Clocks()
    verify = verifier(cluster, clocks, success_ttl_s=3600)
    short = token(exp=NOW + 5)
    cluster.worker(short)
    await verify.verify(short)
    clocks.advance(4)
    await verify.verify(short)
    assert len(cluster.calls) == 2
    clocks.advance(2)
    assert (await refusal(verify, short))[:2] == (401, "Expired")
    assert len(cluster.calls) == 2


async def test_refusals_are_cached_briefly_and_errors_not_at_all() -> None:
    cluster, clocks = Cluster(), Clocks()
    seen: list[str] = []
    verify = verifier(cluster, clocks, failure_ttl_s=10, on_review=seen.append)
    stranger = token()
    for _ in range(5):
        assert (await refusal(verify, stranger))[:2] == (401, "Unauthenticated")
    assert len(cluster.calls) == 1
    clocks.advance(11)
    await refusal(verify, stranger)
    assert len(cluster.calls) == 2

    cluster.failing = True
    flaky = token(sub="x")
    cluster.worker(flaky)
    status, reason, message = await refusal(verify, flaky)
    assert (status, reason) == (503, "ReviewUnavailable") and "10.0.0.1" in message
    cluster.failing = False
    assert (await verify.verify(flaky)).namespace == "team-a"
    assert seen == ["refused", "refused", "error", "accepted"]


async def test_concurrent_first_requests_share_one_review() -> None:
    cluster, clocks = Cluster(), Clocks()
    cluster.gate = asyncio.Event()
    verify = verifier(cluster, clocks)
    good = token()
    cluster.worker(good)
    waiting = [asyncio.create_task(verify.verify(good)) for _ in range(50)]
    await asyncio.sleep(0)
    cluster.gate.set()
    callers = await asyncio.gather(*waiting)
    assert len(set(callers)) == 1
    assert cluster.calls.count(("review", DEFAULT_AUDIENCE)) == 1


async def test_a_caller_that_goes_away_does_not_cancel_the_shared_review() -> None:
    cluster, clocks = Cluster(), Clocks()
    cluster.gate = asyncio.Event()
    verify = verifier(cluster, clocks)
    good = token()
    cluster.worker(good)
    leaving = asyncio.create_task(verify.verify(good))
    staying = asyncio.create_task(verify.verify(good))
    await asyncio.sleep(0)
    leaving.cancel()
    cluster.gate.set()
    assert (await staying).pod == "judge-pod"
    assert len(cluster.calls) == 2


async def test_at_most_so_many_reviews_run_at_once() -> None:
    cluster, clocks = Cluster(), Clocks()
    cluster.gate = asyncio.Event()
    verify = verifier(cluster, clocks, max_concurrent_reviews=3)
    tasks = [asyncio.create_task(verify.verify(token(sub=str(n)))) for n in range(10)]
    await asyncio.sleep(0.01)
    assert len(cluster.calls) == 3
    cluster.gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(result, RefusedError) for result in results)
    assert len(cluster.calls) == 10


async def test_what_the_review_says_is_checked_before_the_pod() -> None:
    cluster, clocks = Cluster(), Clocks()
    verify = verifier(cluster, clocks)
    cases = {
        "unaware": (
            TokenReviewStatus(True, username="system:serviceaccount:a:b"),
            (401, "WrongAudience", "did not confirm audience 'kyai-judge-gateway'"),
        ),
        "person": (
            TokenReviewStatus(True, username="alice", audiences=(DEFAULT_AUDIENCE,)),
            (403, "NotAServiceAccount", "alice is not a ServiceAccount"),
        ),
        "unbound": (
            TokenReviewStatus(
                True, username="system:serviceaccount:a:b", audiences=(DEFAULT_AUDIENCE,)
            ),
            (403, "NotBoundToPod", "system:serviceaccount:a:b is not bound to a pod"),
        ),
    }
    for name, (status, expected) in cases.items():
        text = token(sub=name)
        cluster.statuses[text] = status
        found = await refusal(verify, text)
        assert found[:2] == expected[:2] and expected[2] in found[2], name
    assert all(call[0] == "review" for call in cluster.calls)


async def test_an_authenticated_refusal_names_the_namespace() -> None:
    cluster, clocks = Cluster(), Clocks()
    verify = verifier(cluster, clocks)
    text = token()
    cluster.worker(text, account="someone-else")
    with pytest.raises(RefusedError) as refused:
        await verify.verify(text)
    assert refused.value.refusal.namespace == "team-a"
    assert refused.value.refusal.reason == "NotAWorker"
    assert text not in refused.value.refusal.message


async def test_the_namespace_selector_is_checked_when_set() -> None:
    cluster, clocks = Cluster(), Clocks()
    selector = LabelSelector.model_validate({"matchLabels": {"kyai.io/judge": "on"}})
    verify = verifier(cluster, clocks, namespace_selector=selector)
    chosen, other, gone = token(sub="1"), token(sub="2"), token(sub="3")
    cluster.worker(chosen, "team-a")
    cluster.worker(other, "team-b")
    cluster.worker(gone, "team-z")
    cluster.namespaces = {"team-a": {"kyai.io/judge": "on"}, "team-b": {}}
    assert (await verify.verify(chosen)).namespace == "team-a"
    for text in (other, gone):
        status, reason, message = await refusal(verify, text)
        assert (status, reason) == (403, "NamespaceNotSelected")
        assert "(defaultJudge.namespaceSelector: kyai.io/judge=on)" in message
    # Without a selector, namespaces are never read.
    plain = verifier(Cluster(), clocks)
    plain_cluster = plain.api
    assert isinstance(plain_cluster, Cluster)
    plain_cluster.worker(chosen, "team-b")
    await plain.verify(chosen)
    assert not any(call[0] == "namespace" for call in plain_cluster.calls)


async def test_the_cache_keeps_hashes_and_stays_bounded() -> None:
    cluster, clocks = Cluster(), Clocks()
    verify = verifier(cluster, clocks, max_entries=5)
    texts = [token(sub=str(n)) for n in range(12)]
    for text in texts:
        await refusal(verify, text)
    assert len(verify) == 5
    assert all(len(key) == 32 for key in verify._cache)  # SHA-256 digests, never the tokens
    assert not any(text.encode() in key for key in verify._cache for text in texts)
