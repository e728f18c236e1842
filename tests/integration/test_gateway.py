"""The judge gateway over real loopback HTTP: a stand-in API server, the gateway, the LLM double.

The stand-in answers exactly the two calls the gateway makes, as kube-apiserver does:
``POST /apis/authentication.k8s.io/v1/tokenreviews`` (201 with the request's spec echoed and a
status of ``authenticated``, ``user`` {username ``system:serviceaccount:NS:SA``, uid, groups,
extra with the bound pod's name and uid}, ``audiences`` and ``error``, in the apiserver's
wording) and ``GET /api/v1/namespaces/NS/pods/NAME`` (404 as a ``Status``). Its tokens are
JWTs shaped like projected ServiceAccount tokens, signed with a key of its own.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kyai.gateway import (
    DEFAULT_AUDIENCE,
    ApiServerConfig,
    Gateway,
    GatewaySettings,
    KubernetesAPI,
)
from kyai_testing import LLMDouble, ModelSpec

KEY = "sk-platform-0123456789abcdef"
MODEL = "judge-model"
REVIEWER = "gateway-own-token"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
RUN_LABEL = "kyai.io/evaluation-run"
COMPONENT_LABEL = "app.kubernetes.io/component"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def go_quote(values: Sequence[str]) -> str:
    """Go's ``%q`` of a []string, as the apiserver's messages print audiences."""
    return "[" + " ".join(json.dumps(value) for value in values) + "]"


def status_object(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class StandinAPI:
    """TokenReview and pod reads of a Kubernetes API server, on loopback."""

    def __init__(self) -> None:
        self.signing_key = secrets.token_bytes(32)
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.accounts: dict[tuple[str, str], str] = {}
        self.reviews: list[dict[str, Any]] = []
        self.pod_reads = 0
        self.namespace_reads = 0
        #: Whether the gateway's own account may create TokenReviews (else 403, as RBAC).
        self.reviewer_allowed = True
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- objects -------------------------------------------------------------------------

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.namespaces[name] = dict(labels or {})

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        account: str,
        run: str | None = "run-1",
        component: str | None = "judge",
    ) -> dict[str, Any]:
        self.namespaces.setdefault(namespace, {})
        labels = {"app.kubernetes.io/name": "kyai"}
        if run is not None:
            labels[RUN_LABEL] = run
        if component is not None:
            labels[COMPONENT_LABEL] = component
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "labels": labels,
            },
            "spec": {"serviceAccountName": account, "containers": [{"name": "judge"}]},
            "status": {"phase": "Running"},
        }
        self.pods[namespace, name] = pod
        self.accounts.setdefault((namespace, account), str(uuid.uuid4()))
        return pod

    def issue(
        self,
        namespace: str,
        account: str,
        pod: str | None = None,
        *,
        audiences: Sequence[str] = (DEFAULT_AUDIENCE,),
        expires_in: float = 600,
        forged: bool = False,
    ) -> str:
        """A projected ServiceAccount token (bound to ``pod`` when named), as a kubelet gets."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "aud": list(audiences),
            "exp": now + int(expires_in),
            "iat": now,
            "nbf": now,
            "iss": API_AUDIENCE,
            "jti": str(uuid.uuid4()),
            "sub": f"system:serviceaccount:{namespace}:{account}",
            "kubernetes.io": {
                "namespace": namespace,
                "serviceaccount": {
                    "name": account,
                    "uid": self.accounts.setdefault((namespace, account), str(uuid.uuid4())),
                },
            },
        }
        if pod is not None:
            bound = self.pods[namespace, pod]["metadata"]
            claims["kubernetes.io"]["pod"] = {"name": pod, "uid": bound["uid"]}
            claims["kubernetes.io"]["node"] = {"name": "node-1", "uid": "node-uid-1"}
        return self._sign(claims, forged=forged)

    def issue_user(self, username: str, audiences: Sequence[str] = (DEFAULT_AUDIENCE,)) -> str:
        """An OIDC-like token of a person (the API server would authenticate it too)."""
        now = int(time.time())
        return self._sign({"aud": list(audiences), "exp": now + 600, "iat": now, "sub": username})

    def _sign(self, claims: dict[str, Any], *, forged: bool = False) -> str:
        header = _b64(json.dumps({"alg": "HS256", "kid": "standin"}).encode())
        payload = _b64(json.dumps(claims).encode())
        key = secrets.token_bytes(32) if forged else self.signing_key
        signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64(signature)}"

    # -- authentication, as the apiserver's service-account authenticator -----------------

    def _claims(self, token: str) -> dict[str, Any] | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        expected = hmac.new(
            self.signing_key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256
        ).digest()
        if not hmac.compare_digest(_b64(expected), parts[2]):
            return None
        claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(parts[1] + "=="))
        return claims

    def authenticate(self, token: str, wanted: Sequence[str]) -> dict[str, Any]:
        claims = self._claims(token)
        if claims is None:
            return {
                "user": {},
                "error": "[invalid bearer token, square/go-jose: error in cryptographic primitive]",
            }
        audiences = list(claims.get("aud") or [])
        matched = [audience for audience in audiences if audience in wanted]
        if not matched:
            return {
                "user": {},
                "error": f"[invalid bearer token, token audiences {go_quote(audiences)} is "
                f"invalid for the target audiences {go_quote(wanted)}, token lookup failed]",
            }
        if time.time() > claims["exp"]:
            return {
                "user": {},
                "error": "[invalid bearer token, service account token has expired]",
            }
        k8s = claims.get("kubernetes.io")
        if k8s is None:  # a person's token
            return {
                "authenticated": True,
                "user": {"username": claims["sub"], "groups": ["system:authenticated"]},
                "audiences": matched,
            }
        extra: dict[str, list[str]] = {
            "authentication.kubernetes.io/credential-id": [f"JTI={claims['jti']}"]
        }
        bound = k8s.get("pod")
        if bound is not None:
            pod = self.pods.get((k8s["namespace"], bound["name"]))
            if pod is None:
                return {
                    "user": {},
                    "error": "[invalid bearer token, service account token has been invalidated]",
                }
            if pod["metadata"]["uid"] != bound["uid"]:
                return {
                    "user": {},
                    "error": f"[invalid bearer token, pod UID ({pod['metadata']['uid']}) does "
                    f"not match service account pod ref claim ({bound['uid']})]",
                }
            extra.update(
                {
                    "authentication.kubernetes.io/node-name": [k8s["node"]["name"]],
                    "authentication.kubernetes.io/node-uid": [k8s["node"]["uid"]],
                    "authentication.kubernetes.io/pod-name": [bound["name"]],
                    "authentication.kubernetes.io/pod-uid": [bound["uid"]],
                }
            )
        namespace = k8s["namespace"]
        return {
            "authenticated": True,
            "user": {
                "username": claims["sub"],
                "uid": k8s["serviceaccount"]["uid"],
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{namespace}",
                    "system:authenticated",
                ],
                "extra": extra,
            },
            "audiences": matched,
        }

    # -- HTTP ----------------------------------------------------------------------------

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {REVIEWER}":
            return web.json_response(status_object(401, "Unauthorized", "Unauthorized"), status=401)
        return None

    async def _token_review(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        if not self.reviewer_allowed:
            message = (
                'tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:'
                'kyai-system:kyai-judge-gateway" cannot create resource "tokenreviews" in API '
                'group "authentication.k8s.io" at the cluster scope'
            )
            body = status_object(
                403, "Forbidden", message, group="authentication.k8s.io", kind="tokenreviews"
            )
            return web.json_response(body, status=403)
        review = await request.json()
        spec = review.get("spec") or {}
        self.reviews.append({"audiences": spec.get("audiences")})
        if not spec.get("token"):
            message = "token is required for TokenReview in authentication"
            return web.json_response(status_object(400, "BadRequest", message), status=400)
        wanted = spec.get("audiences") or [API_AUDIENCE]
        answer = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": self.authenticate(spec["token"], wanted),
        }
        return web.json_response(answer, status=201)

    async def _pod(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        self.pod_reads += 1
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.pods.get((namespace, name))
        if pod is None:
            body = status_object(
                404, "NotFound", f'pods "{name}" not found', name=name, kind="pods"
            )
            return web.json_response(body, status=404)
        return web.json_response(pod)

    async def _namespace(self, request: web.Request) -> web.Response:
        refused = self._unauthorized(request)
        if refused is not None:
            return refused
        self.namespace_reads += 1
        name = request.match_info["namespace"]
        if name not in self.namespaces:
            body = status_object(
                404, "NotFound", f'namespaces "{name}" not found', name=name, kind="namespaces"
            )
            return web.json_response(body, status=404)
        metadata = {
            "name": name,
            "labels": {"kubernetes.io/metadata.name": name, **self.namespaces[name]},
        }
        return web.json_response({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})

    async def start(self) -> StandinAPI:
        app = web.Application()
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods/{name}", self._pod)
        app.router.add_get("/api/v1/namespaces/{namespace}", self._namespace)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
async def cluster() -> AsyncIterator[StandinAPI]:
    api = await StandinAPI().start()
    yield api
    await api.stop()


@pytest.fixture
async def judge() -> AsyncIterator[LLMDouble]:
    double = LLMDouble(
        models=[ModelSpec(MODEL), ModelSpec("other-model")], api_key=KEY, latency_s=0.0
    )
    async with double:
        yield double


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "judge-key" / "api-key"
    path.parent.mkdir()
    path.write_text(KEY + "\n")
    return path


StartGateway = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start_gateway(
    cluster: StandinAPI, judge: LLMDouble, key_file: Path
) -> AsyncIterator[StartGateway]:
    started: list[Gateway] = []

    async def start(**overrides: Any) -> Gateway:
        values: dict[str, Any] = {
            "upstream_url": judge.url,
            "model": MODEL,
            "api_key_file": str(key_file),
            "bind_address": "127.0.0.1",
            "port": 0,
            "metrics_port": 0,
            **overrides,
        }
        settings = GatewaySettings.model_validate(values)
        api = KubernetesAPI(ApiServerConfig(server=cluster.url, token=REVIEWER))
        gateway = Gateway(settings, api)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        await gateway.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


def chat_body(text: str = "Grade this answer.", model: str = MODEL, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


async def post(
    http: aiohttp.ClientSession,
    gateway: Gateway,
    token: str | None,
    body: dict[str, Any] | None = None,
    path: str = "/v1/chat/completions",
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    url = f"http://127.0.0.1:{gateway.port}{path}"
    async with http.post(url, json=body or chat_body(), headers=headers) as reply:
        return reply.status, await reply.json(content_type=None), dict(reply.headers)


async def metrics_text(http: aiohttp.ClientSession, gateway: Gateway) -> str:
    async with http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics") as reply:
        assert reply.status == 200
        return await reply.text()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one series of the exposition (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.index("}") + 1]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# -- a judge worker gets the judge ---------------------------------------------------------


async def test_a_judge_worker_gets_the_judge_with_the_platform_key(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "run-1-judge-x7k2p", account="run-1-worker")
    token = cluster.issue("team-a", "run-1-worker", "run-1-judge-x7k2p")

    status, body, _ = await post(http, gateway, token)

    assert status == 200, body
    assert body["model"] == MODEL and body["choices"][0]["message"]["content"]
    (record,) = judge.requests
    assert record.headers["Authorization"] == f"Bearer {KEY}"
    assert token not in json.dumps(record.headers)
    assert cluster.reviews == [{"audiences": [DEFAULT_AUDIENCE]}]
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_requests_total", code="200", namespace="team-a") == 1
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    for kind in ("prompt", "completion"):
        counted = sample(text, "kyai_judge_gateway_tokens_total", kind=kind, namespace="team-a")
        assert counted == usage[f"{kind}_tokens"]
    assert sample(text, "kyai_judge_gateway_token_reviews_total", result="accepted") == 1


async def test_models_are_filtered_to_the_default_judge_and_other_routes_refused(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="run-1-worker")
    token = cluster.issue("team-a", "run-1-worker", "judge-pod")
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{gateway.port}"

    async with http.get(f"{base}/v1/models", headers=headers) as reply:
        assert reply.status == 200
        assert [card["id"] for card in (await reply.json())["data"]] == [MODEL]
    status, body, _ = await post(http, gateway, token, chat_body(model="other-model"))
    assert status == 403 and body["error"]["code"] == "ModelNotAllowed"
    assert "'other-model'" in body["error"]["message"] and MODEL in body["error"]["message"]
    status, body, _ = await post(http, gateway, token, {"messages": []})
    assert status == 400 and body["error"]["code"] == "MissingModel"
    for path in ("/v1/completions", "/v1/embeddings", "/v1/files", "/admin"):
        status, body, _ = await post(http, gateway, token, path=path)
        assert status == 404, path
        assert "only POST /v1/chat/completions and GET /v1/models" in body["error"]["message"]
    async with http.get(f"{base}/v1/chat/completions", headers=headers) as reply:
        assert reply.status == 405
    assert judge.requests == []
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_requests_total", code="404", namespace="unknown") == 4
    assert sample(text, "kyai_judge_gateway_requests_total", code="403", namespace="team-a") == 1


# -- refusals ------------------------------------------------------------------------------


async def test_refused_callers_are_counted_and_never_reach_the_judge(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="run-1-worker")
    cluster.add_pod("team-a", "generate-pod", account="run-1-worker", component="generate")
    cluster.add_pod("team-a", "plain-pod", account="default", run=None, component=None)
    cluster.add_pod("team-a", "gone-pod", account="run-1-worker")
    gone = cluster.issue("team-a", "run-1-worker", "gone-pod")
    del cluster.pods["team-a", "gone-pod"]
    cases: list[tuple[str, str | None, int, str, str]] = [
        ("no token", None, 401, "NoToken", "no bearer token"),
        ("not a JWT", "hunter2", 401, "Malformed", "not a JWT"),
        (
            "expired",
            cluster.issue("team-a", "run-1-worker", "judge-pod", expires_in=-30),
            401,
            "Expired",
            "expired at",
        ),
        (
            "the API server's audience",
            cluster.issue("team-a", "run-1-worker", "judge-pod", audiences=[API_AUDIENCE]),
            401,
            "WrongAudience",
            f"not '{DEFAULT_AUDIENCE}'",
        ),
        (
            "a forged signature",
            cluster.issue("team-a", "run-1-worker", "judge-pod", forged=True),
            401,
            "Unauthenticated",
            "error in cryptographic primitive",
        ),
        ("a deleted pod", gone, 401, "Unauthenticated", "has been invalidated"),
        (
            "a person",
            cluster.issue_user("alice@example.com"),
            403,
            "NotAServiceAccount",
            "alice@example.com is not a ServiceAccount",
        ),
        (
            "a token bound to no pod",
            cluster.issue("team-a", "run-1-worker"),
            403,
            "NotBoundToPod",
            "not bound to a pod",
        ),
        (
            "a generation worker",
            cluster.issue("team-a", "run-1-worker", "generate-pod"),
            403,
            "NotAWorker",
            "label is 'generate', not judge",
        ),
        (
            "a pod of no run",
            cluster.issue("team-a", "default", "plain-pod"),
            403,
            "NotAWorker",
            f"has no {RUN_LABEL} label",
        ),
    ]
    for what, token, code, reason, words in cases:
        status, body, headers = await post(http, gateway, token)
        assert (status, body["error"]["code"]) == (code, reason), what
        assert words in body["error"]["message"], (what, body)
        if code == 401:
            assert headers["WWW-Authenticate"] == "Bearer", what
        if token is not None:
            assert token not in json.dumps(body), what
    assert judge.requests == []
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_requests_total", code="401", namespace="unknown") == 6
    assert sample(text, "kyai_judge_gateway_requests_total", code="403", namespace="team-a") == 3
    # A person has no namespace: counted as unknown.
    assert sample(text, "kyai_judge_gateway_requests_total", code="403", namespace="unknown") == 1
    # Only what could be a valid token reached the API server.
    assert len(cluster.reviews) == 6


async def test_reviews_are_cached_by_token_both_ways_and_shared_by_concurrent_requests(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway(concurrency=64)
    cluster.add_pod("team-a", "judge-pod", account="run-1-worker")
    token = cluster.issue("team-a", "run-1-worker", "judge-pod")

    results = await asyncio.gather(*(post(http, gateway, token) for _ in range(64)))
    assert [status for status, _, _ in results] == [200] * 64
    assert (len(cluster.reviews), cluster.pod_reads) == (1, 1)
    for _ in range(20):
        assert (await post(http, gateway, token))[0] == 200
    assert (len(cluster.reviews), cluster.pod_reads) == (1, 1)

    forged = cluster.issue("team-a", "run-1-worker", "judge-pod", forged=True)
    for _ in range(20):
        assert (await post(http, gateway, forged))[0] == 401
    assert len(cluster.reviews) == 2
    assert len(judge.requests) == 84


async def test_a_cached_token_is_reviewed_again_after_its_time(
    start_gateway: StartGateway, cluster: StandinAPI, http: aiohttp.ClientSession
) -> None:
    gateway = await start_gateway(token_cache_seconds=0.3, failure_cache_seconds=0.3)
    cluster.add_pod("team-a", "judge-pod", account="run-1-worker")
    token = cluster.issue("team-a", "run-1-worker", "judge-pod")
    assert (await post(http, gateway, token))[0] == 200
    # The run ends, its pod goes: once the entry is stale the next review refuses the token.
    del cluster.pods["team-a", "judge-pod"]
    assert (await post(http, gateway, token))[0] == 200
    await asyncio.sleep(0.4)
    status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (401, "Unauthenticated")
    assert len(cluster.reviews) == 2


async def test_an_api_server_that_cannot_answer_gives_503_and_nothing_is_cached(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="run-1-worker")
    token = cluster.issue("team-a", "run-1-worker", "judge-pod")
    cluster.reviewer_allowed = False
    status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (503, "ReviewUnavailable")
    assert "cannot create resource" in body["error"]["message"]
    assert "ClusterRole" in body["error"]["message"]
    cluster.reviewer_allowed = True
    assert (await post(http, gateway, token))[0] == 200
    assert len(judge.requests) == 1
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_token_reviews_total", result="error") == 1
    assert sample(text, "kyai_judge_gateway_requests_total", code="503", namespace="unknown") == 1


async def test_the_namespace_selector_admits_only_selected_namespaces(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    selector = {"matchLabels": {"kyai.io/default-judge": "enabled"}}
    gateway = await start_gateway(namespace_selector=selector)
    cluster.add_namespace("team-a", {"kyai.io/default-judge": "enabled"})
    cluster.add_namespace("team-c")
    cluster.add_pod("team-a", "judge-pod", account="w")
    cluster.add_pod("team-c", "judge-pod", account="w")
    assert (await post(http, gateway, cluster.issue("team-a", "w", "judge-pod")))[0] == 200
    status, body, _ = await post(http, gateway, cluster.issue("team-c", "w", "judge-pod"))
    assert (status, body["error"]["code"]) == (403, "NamespaceNotSelected")
    assert "kyai.io/default-judge=enabled" in body["error"]["message"]
    assert len(judge.requests) == 1 and cluster.namespace_reads == 2


# -- streaming, the key and the upstream ---------------------------------------------------


async def test_a_streamed_answer_passes_through_and_is_charged(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
    async with http.post(
        url, json=chat_body(stream=True), headers={"Authorization": f"Bearer {token}"}
    ) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        raw = await reply.read()
    events = [
        json.loads(line[6:])
        for line in raw.decode().splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    text = "".join(
        (event["choices"][0]["delta"].get("content") or "") for event in events if event["choices"]
    )
    assert text and raw.rstrip().endswith(b"data: [DONE]")
    (record,) = judge.requests
    assert record.streamed and record.body["stream_options"] == {"include_usage": True}
    (usage,) = [event["usage"] for event in events if event.get("usage")]
    metrics = await metrics_text(http, gateway)
    for kind in ("prompt", "completion"):
        counted = sample(metrics, "kyai_judge_gateway_tokens_total", kind=kind, namespace="team-a")
        assert counted == usage[f"{kind}_tokens"] > 0


async def test_a_rotated_key_is_used_without_a_restart(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    key_file: Path,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    # As the kubelet mounts a Secret: the key's path is a symlink into a dated directory.
    mount = tmp_path / "mount"
    first = mount / "..2024_01_01"
    first.mkdir(parents=True)
    (first / "api-key").write_text(KEY)
    (mount / "..data").symlink_to(first.name)
    (mount / "api-key").symlink_to("..data/api-key")
    gateway = await start_gateway(api_key_file=str(mount / "api-key"), file_check_seconds=0)
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    assert (await post(http, gateway, token))[0] == 200

    rotated = "sk-rotated-fedcba9876543210"
    second = mount / "..2024_02_02"
    second.mkdir()
    (second / "api-key").write_text(rotated)
    (mount / "..data_tmp").symlink_to(second.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    judge.api_key = rotated

    assert (await post(http, gateway, token))[0] == 200
    assert judge.requests[-1].headers["Authorization"] == f"Bearer {rotated}"


async def test_the_key_never_reaches_a_caller(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    judge.echo_headers = True
    judge.models[MODEL] = ModelSpec(MODEL, max_model_len=64)
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    # A prompt over the context: the judge's 400 echoes the Authorization header it got.
    status, body, _ = await post(http, gateway, token, chat_body("word " * 400))
    assert status == 400
    assert judge.requests[-1].response is not None
    echoed = json.dumps(judge.requests[-1].response)
    assert KEY in echoed or base64.b64encode(f"Bearer {KEY}".encode()).decode() in echoed
    answer = json.dumps(body)
    assert KEY not in answer and "[REDACTED]" in answer
    assert base64.b64encode(f"Bearer {KEY}".encode()).decode()[8:30] not in answer

    # The judge refusing the key is the platform's problem, not the caller's: a 502.
    judge.api_key = "sk-something-else-entirely"
    status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (502, "UpstreamRefusedKey")
    assert KEY not in json.dumps(body)


async def test_a_body_over_the_limit_is_refused_before_the_judge(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway(max_body_bytes=4096)
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    status, body, _ = await post(http, gateway, token, chat_body("x" * 5000))
    assert (status, body["error"]["code"]) == (413, "BodyTooLarge")
    assert "larger than 4096 bytes" in body["error"]["message"]
    status, body, _ = await post(http, gateway, token, {"model": MODEL, "messages": "x"})
    assert status == 400  # the judge's own validation passes through
    assert len(judge.requests) == 1
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_requests_total", code="413", namespace="team-a") == 1


async def test_an_unreachable_judge_is_a_502_and_a_missing_key_a_503(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    key_file: Path,
    http: aiohttp.ClientSession,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    gateway = await start_gateway(upstream_url=f"http://127.0.0.1:{closed}/v1")
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (502, "UpstreamUnreachable")

    admin = f"http://127.0.0.1:{gateway.metrics_port}"
    async with http.get(f"{admin}/readyz") as reply:
        assert reply.status == 200
    key_file.unlink()
    await asyncio.sleep(1.05)  # the file is looked at once a second
    async with http.get(f"{admin}/readyz") as reply:
        assert reply.status == 503 and str(key_file) in await reply.text()
    async with http.get(f"{admin}/healthz") as reply:
        assert reply.status == 200
    status, body, _ = await post(http, gateway, token)
    assert (status, body["error"]["code"]) == (503, "KeyUnavailable")


class BrokenAPI:
    """A ClusterAPI with a bug: the gateway answers 500, counts it and keeps serving."""

    async def review_token(self, token: str, audiences: Sequence[str]) -> Any:
        raise RuntimeError("a bug")

    async def get_pod(self, namespace: str, name: str) -> Any:
        raise RuntimeError("a bug")

    async def get_namespace(self, name: str) -> Any:
        raise RuntimeError("a bug")

    async def close(self) -> None:
        pass


async def test_a_failure_inside_the_gateway_is_a_counted_500(
    cluster: StandinAPI, judge: LLMDouble, http: aiohttp.ClientSession
) -> None:
    settings = GatewaySettings(
        upstream_url=judge.url, model=MODEL, bind_address="127.0.0.1", port=0, metrics_port=0
    )
    gateway = Gateway(settings, BrokenAPI())
    await gateway.start()
    try:
        cluster.add_pod("team-a", "judge-pod", account="w")
        token = cluster.issue("team-a", "w", "judge-pod")
        for _ in range(2):
            status, body, _ = await post(http, gateway, token)
            assert (status, body["error"]["code"]) == (500, "InternalError")
        text = await metrics_text(http, gateway)
        assert (
            sample(text, "kyai_judge_gateway_requests_total", code="500", namespace="unknown") == 2
        )
        assert judge.requests == []
    finally:
        await gateway.stop()


# -- limits --------------------------------------------------------------------------------


async def test_one_namespace_over_its_limit_gets_429s_while_another_completes(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
) -> None:
    judge.latency_s = 1.0
    gateway = await start_gateway(
        concurrency=4, queue=4, queue_timeout_seconds=5, requests_per_second=1000, burst=1000
    )
    cluster.add_pod("team-a", "judge-pod", account="w")
    cluster.add_pod("team-b", "judge-pod", account="w")
    token_a = cluster.issue("team-a", "w", "judge-pod")
    token_b = cluster.issue("team-b", "w", "judge-pod")
    # Warm the token cache so that the burst meets the limits, not the first review.
    assert (await post(http, gateway, token_a))[0] == 200
    assert (await post(http, gateway, token_b))[0] == 200
    judge.reset()

    flood = [post(http, gateway, token_a, chat_body("from team-a")) for _ in range(200)]
    other = [post(http, gateway, token_b, chat_body("from team-b")) for _ in range(4)]
    results = await asyncio.gather(*flood, *other)

    team_a, team_b = results[:200], results[200:]
    assert [status for status, _, _ in team_b] == [200] * 4
    codes = [status for status, _, _ in team_a]
    refused = codes.count(429)
    # 4 in flight and 4 waiting; the rest are refused at once, but for requests that arrive
    # after a slot freed (a second later: the flood arrives in a fraction of that).
    assert refused >= 150 and codes.count(200) == 200 - refused
    for status, body, headers in team_a:
        if status == 429:
            assert int(headers["Retry-After"]) >= 1
            assert body["error"]["code"] == "LimitExceeded"
            assert "namespace team-a has 4 judge requests in flight" in body["error"]["message"]
    spans = [
        (record.started, record.finished or 0.0)
        for record in judge.requests
        if record.messages[0]["content"] == "from team-a"
    ]
    assert len(spans) == 200 - refused
    assert max(sum(1 for s, f in spans if s <= t < f) for t, _ in spans) == 4
    text = await metrics_text(http, gateway)
    assert (
        sample(text, "kyai_judge_gateway_requests_total", code="429", namespace="team-a") == refused
    )
    assert sample(text, "kyai_judge_gateway_requests_total", code="200", namespace="team-b") == 5
    assert sample(text, "kyai_judge_gateway_requests_total", code="429", namespace="team-b") == 0


async def test_a_namespace_over_its_rate_gets_429s_with_the_time_to_wait(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    http: aiohttp.ClientSession,
) -> None:
    gateway = await start_gateway(
        requests_per_second=2,
        burst=5,
        queue=0,
        namespace_limits={"team-b": {"requestsPerSecond": 1000, "burst": 1000}},
    )
    cluster.add_pod("team-a", "judge-pod", account="w")
    cluster.add_pod("team-b", "judge-pod", account="w")
    token_a = cluster.issue("team-a", "w", "judge-pod")
    token_b = cluster.issue("team-b", "w", "judge-pod")
    results = await asyncio.gather(*(post(http, gateway, token_a) for _ in range(20)))
    codes = [status for status, _, _ in results]
    assert codes.count(200) == 5 and codes.count(429) == 15
    assert {headers["Retry-After"] for status, _, headers in results if status == 429} == {"1"}
    assert all("2 requests per second" in b["error"]["message"] for s, b, _ in results if s == 429)
    results = await asyncio.gather(*(post(http, gateway, token_b) for _ in range(20)))
    assert [status for status, _, _ in results] == [200] * 20


# -- the command ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_the_command_serves_until_sigterm_and_refuses_bad_settings(
    cluster: StandinAPI,
    judge: LLMDouble,
    key_file: Path,
    tmp_path: Path,
    http: aiohttp.ClientSession,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": cluster.url}}],
                "users": [{"name": "u", "user": {"token": REVIEWER}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("KYAI_GATEWAY_", "KUBERNETES_SERVICE"))
    }
    env["KYAI_GATEWAY_CONCURRENCY"] = "0"
    bad = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kyai.gateway", "--model", MODEL, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await bad.communicate()
    assert bad.returncode == 2
    assert b"upstream_url (KYAI_GATEWAY_UPSTREAM_URL): required" in stderr
    assert b"concurrency (KYAI_GATEWAY_CONCURRENCY)" in stderr

    env["KYAI_GATEWAY_CONCURRENCY"] = "8"
    port, metrics_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kyai.gateway", "--upstream-url", judge.url, "--model", MODEL,
        "--api-key-file", str(key_file), "--kubeconfig", str(kubeconfig),
        "--bind-address", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                async with http.get(f"http://127.0.0.1:{metrics_port}/readyz") as reply:
                    if reply.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                pass
            assert time.monotonic() < deadline, "the gateway did not get ready"
            await asyncio.sleep(0.1)
        cluster.add_pod("team-a", "judge-pod", account="w")
        token = cluster.issue("team-a", "w", "judge-pod")
        async with http.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json=chat_body(),
            headers={"Authorization": f"Bearer {token}"},
        ) as reply:
            assert reply.status == 200
        assert judge.requests[-1].headers["Authorization"] == f"Bearer {KEY}"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    logged = stderr.decode()
    assert "serving" in logged and KEY not in logged and token not in logged


@pytest.mark.parametrize("refusal", [401, 403])
async def test_the_judge_refusing_the_platforms_key_is_the_platforms_problem(
    start_gateway: StartGateway,
    cluster: StandinAPI,
    judge: LLMDouble,
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    refusal: int,
) -> None:
    """A revoked or wrong platform key (the judge answers 401 or 403) is never the caller's.

    The caller gets a 502 UpstreamRefusedKey saying whose it is (never the judge's 401/403,
    which would read as the tenant being refused); the gateway logs it as the platform's,
    naming the namespace that met it, and counts it apart from the callers' refusals.
    """
    judge.api_key = "sk-the-judge-now-wants-another-key"
    judge.unauthorized_status = refusal
    gateway = await start_gateway()
    cluster.add_pod("team-a", "judge-pod", account="w")
    token = cluster.issue("team-a", "w", "judge-pod")
    with caplog.at_level(logging.ERROR, logger="kyai.gateway"):
        for _ in range(2):
            status, body, _ = await post(http, gateway, token)
            assert status == 502
            assert body["error"]["code"] == "UpstreamRefusedKey"
            assert f"refused the platform's API key (HTTP {refusal})" in body["error"]["message"]
            assert "defaultJudge.apiKeySecret" in body["error"]["message"]
    assert [r.status for r in judge.requests] == [refusal, refusal]  # it did ask the judge
    logged = [r.getMessage() for r in caplog.records if "refused the platform" in r.getMessage()]
    assert len(logged) == 2 and all("namespace team-a" in line for line in logged)
    assert all(KEY not in line for line in logged)
    text = await metrics_text(http, gateway)
    assert sample(text, "kyai_judge_gateway_upstream_refusals_total", code=str(refusal)) == 2
    assert sample(text, "kyai_judge_gateway_requests_total", code="502", namespace="team-a") == 2
    assert (
        sample(text, "kyai_judge_gateway_requests_total", code=str(refusal), namespace="team-a")
        == 0
    )
