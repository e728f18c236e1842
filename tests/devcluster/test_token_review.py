"""Bound service-account tokens, TokenReview and projected token volumes, over real HTTP.

The API server authenticates a token only for its own audience, unexpired, and while the pod
it is bound to exists; TokenReview answers as kube-apiserver does (201, the spec echoed, the
user with the bound pod in ``extra``, the audiences, or the real error text); the simulated
kubelet writes projected ``serviceAccountToken`` volumes (``kyai.gateway.token_volume()``)
and rewrites them before 80 % of their lifetime.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import IMAGE, Api
from kyai.constants import LABEL_RUN
from kyai.gateway import (
    DEFAULT_AUDIENCE,
    JUDGE_COMPONENT,
    ApiServerConfig,
    KubernetesAPI,
    RefusedError,
    TokenVerifier,
    WorkerRule,
    token_mount,
    token_volume,
)
from kyai.gateway._worker import TOKEN_MOUNT_PATH
from kyai_devcluster import DevCluster, DevClusterThread
from kyai_devcluster._tokens import ADMIN_TOKEN, ISSUER, BoundObject, issue

NS = "/api/v1/namespaces/default"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
WHOAMI = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
REPO = Path(__file__).resolve().parents[2]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return decoded


def sleeper(name: str, **spec: Any) -> dict[str, Any]:
    """A long-running pod of the project's image (a Python process that sleeps)."""
    container = {
        "name": "main",
        "image": IMAGE,
        "command": [sys.executable, "-c", "import time; time.sleep(120)"],
    }
    container.update(spec.pop("container", {}))
    return {
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Always", "containers": [container], **spec},
    }


async def pod_token(cluster: DevCluster, api: Api, name: str, **spec: Any) -> tuple[str, str]:
    """Create a sleeping pod; its uid and the default token the kubelet wrote for it."""
    pod = await api.ok("POST", f"{NS}/pods", sleeper(name, **spec))
    await api.wait_for(f"{NS}/pods/{name}", lambda p: p["status"].get("phase") == "Running")
    token_file = cluster.kubelet.pod_dir("default", name) / "serviceaccount" / "token"
    return str(pod["metadata"]["uid"]), token_file.read_text()


def review(token: str, *audiences: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}


async def test_a_pods_token_is_bound_to_it_and_dies_with_it(cluster: DevCluster, api: Api) -> None:
    uid, token = await pod_token(cluster, api, "bound")
    found = claims(token)
    assert found["aud"] == [ISSUER] and found["iss"] == ISSUER
    assert found["nbf"] == found["iat"] and found["exp"] - found["iat"] == 365 * 24 * 3600
    assert found["kubernetes.io"]["pod"] == {"name": "bound", "uid": uid}
    assert found["kubernetes.io"]["serviceaccount"]["name"] == "default"
    assert found["sub"] == "system:serviceaccount:default:default"

    status, who = await api.post(WHOAMI, {}, headers=bearer(token))
    assert status == 201, who
    info = who["status"]["userInfo"]
    assert info["username"] == "system:serviceaccount:default:default"
    assert info["extra"]["authentication.kubernetes.io/pod-name"] == ["bound"]
    assert info["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]

    await api.ok("DELETE", f"{NS}/pods/bound")
    assert await api.post(WHOAMI, {}, headers=bearer(token)) == (401, UNAUTHORIZED)


async def test_the_api_server_refuses_expired_and_other_audiences_tokens(
    cluster: DevCluster, api: Api
) -> None:
    fresh = issue(cluster.token_key, "default", "default")
    assert (await api.post(WHOAMI, {}, headers=bearer(fresh)))[0] == 201
    # go-jose's one-minute leeway: a token a few seconds past exp still passes.
    just = issue(cluster.token_key, "default", "default", expiration_seconds=600,
                 now=time.time() - 630)  # fmt: skip
    assert (await api.post(WHOAMI, {}, headers=bearer(just)))[0] == 201
    expired = issue(cluster.token_key, "default", "default", now=time.time() - 7200)
    other = issue(cluster.token_key, "default", "default", audiences=[DEFAULT_AUDIENCE])
    for token in (expired, other):
        assert await api.post(WHOAMI, {}, headers=bearer(token)) == (401, UNAUTHORIZED)
        assert await api.get(f"{NS}/configmaps", headers=bearer(token)) == (401, UNAUTHORIZED)


async def test_a_deleted_service_account_invalidates_its_tokens(
    cluster: DevCluster, api: Api
) -> None:
    account = await api.ok("POST", f"{NS}/serviceaccounts", {"metadata": {"name": "robot"}})
    uid = account["metadata"]["uid"]
    token = issue(cluster.token_key, "default", "robot", service_account_uid=uid)
    assert (await api.post(WHOAMI, {}, headers=bearer(token)))[0] == 201
    await api.ok("DELETE", f"{NS}/serviceaccounts/robot")
    assert await api.post(WHOAMI, {}, headers=bearer(token)) == (401, UNAUTHORIZED)
    _, answer = await api.post(REVIEWS, review(token))
    assert answer["status"] == {
        "user": {},
        "error": "[invalid bearer token, service account token has been invalidated]",
    }
    recreated = await api.ok("POST", f"{NS}/serviceaccounts", {"metadata": {"name": "robot"}})
    _, answer = await api.post(REVIEWS, review(token))
    assert answer["status"]["error"] == (
        f"[invalid bearer token, service account UID ({recreated['metadata']['uid']}) does not "
        f"match claim ({uid})]"
    )


async def test_token_review_answers_as_kube_apiserver(cluster: DevCluster, api: Api) -> None:
    await api.wait_for(f"{NS}/serviceaccounts/default", lambda sa: True)
    uid, _ = await pod_token(cluster, api, "worker")
    sa = await api.ok("GET", f"{NS}/serviceaccounts/default")
    node = await api.ok("GET", "/api/v1/nodes/devcluster")
    token = issue(
        cluster.token_key,
        "default",
        "default",
        audiences=[DEFAULT_AUDIENCE],
        expiration_seconds=600,
        service_account_uid=sa["metadata"]["uid"],
        pod=BoundObject("worker", uid),
        node=BoundObject("devcluster", node["metadata"]["uid"]),
    )
    status, answer = await api.post(REVIEWS, review(token, DEFAULT_AUDIENCE, "someone-else"))
    assert status == 201
    assert answer["kind"] == "TokenReview" and answer["apiVersion"] == "authentication.k8s.io/v1"
    assert answer["spec"] == {"token": token, "audiences": [DEFAULT_AUDIENCE, "someone-else"]}
    assert answer["status"] == {
        "authenticated": True,
        "user": {
            "username": "system:serviceaccount:default:default",
            "uid": sa["metadata"]["uid"],
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:default",
                "system:authenticated",
            ],
            "extra": {
                "authentication.kubernetes.io/credential-id": [f"JTI={claims(token)['jti']}"],
                "authentication.kubernetes.io/node-name": ["devcluster"],
                "authentication.kubernetes.io/node-uid": [node["metadata"]["uid"]],
                "authentication.kubernetes.io/pod-name": ["worker"],
                "authentication.kubernetes.io/pod-uid": [uid],
            },
        },
        "audiences": [DEFAULT_AUDIENCE],
    }
    # No audiences asked: the API server's own, which this token is not for.
    _, answer = await api.post(REVIEWS, review(token))
    assert answer["spec"] == {"token": token}
    assert answer["status"] == {
        "user": {},
        "error": f'[invalid bearer token, token audiences ["{DEFAULT_AUDIENCE}"] is invalid for '
        f'the target audiences ["{ISSUER}"], token lookup failed]',
    }
    api_token = issue(cluster.token_key, "default", "default")
    _, answer = await api.post(REVIEWS, review(api_token))
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["audiences"] == [ISSUER]

    await api.ok("DELETE", f"{NS}/pods/worker")
    _, answer = await api.post(REVIEWS, review(token, DEFAULT_AUDIENCE))
    assert answer["status"] == {
        "user": {},
        "error": "[invalid bearer token, service account token has been invalidated]",
    }
    await api.ok("POST", f"{NS}/pods", sleeper("worker"))  # the same name, another uid
    _, answer = await api.post(REVIEWS, review(token, DEFAULT_AUDIENCE))
    assert answer["status"]["error"].startswith("[invalid bearer token, pod UID (")
    assert answer["status"]["error"].endswith(
        f"does not match service account pod ref claim ({uid})]"
    )


async def test_token_review_errors(cluster: DevCluster, api: Api) -> None:
    expired = issue(cluster.token_key, "default", "default", now=time.time() - 7200)
    forged = issue(b"another key", "default", "default")
    cases = {
        expired: "[invalid bearer token, service account token has expired]",
        forged: "[invalid bearer token, square/go-jose: error in cryptographic primitive]",
        "not-a-jwt": "[invalid bearer token, token lookup failed]",
    }
    for token, error in cases.items():
        status, answer = await api.post(REVIEWS, review(token))
        assert status == 201
        assert answer["status"] == {"user": {}, "error": error}
    status, answer = await api.post(REVIEWS, {"kind": "TokenReview", "spec": {}})
    assert status == 400
    assert answer["message"] == "token is required for TokenReview in authentication"
    status, answer = await api.get(REVIEWS)
    assert status == 405


async def test_creating_token_reviews_needs_rbac(cluster: DevCluster, api: Api) -> None:
    caller = bearer(issue(cluster.token_key, "default", "reviewer"))
    token = issue(cluster.token_key, "default", "default")
    status, answer = await api.post(REVIEWS, review(token), headers=caller)
    assert status == 403
    assert answer["message"] == (
        'tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:default:'
        'reviewer" cannot create resource "tokenreviews" in API group "authentication.k8s.io" '
        "at the cluster scope"
    )
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    rules = [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
              "verbs": ["create"]}]  # fmt: skip
    await api.ok("POST", f"{rbac}/clusterroles", {"metadata": {"name": "r"}, "rules": rules})
    binding = {
        "metadata": {"name": "r"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "reviewer", "namespace": "default"}],
    }
    await api.ok("POST", f"{rbac}/clusterrolebindings", binding)
    status, answer = await api.post(REVIEWS, review(token), headers=caller)
    assert status == 201 and answer["status"]["authenticated"] is True


async def test_discovery_lists_token_reviews(api: Api) -> None:
    resources = await api.ok("GET", "/apis/authentication.k8s.io/v1")
    entry = next(r for r in resources["resources"] if r["name"] == "tokenreviews")
    assert entry["kind"] == "TokenReview" and entry["verbs"] == ["create"]
    assert entry["namespaced"] is False
    groups = await api.ok("GET", "/apis")
    assert "authentication.k8s.io" in [group["name"] for group in groups["groups"]]


async def test_projection_shorter_than_ten_minutes_is_refused(api: Api) -> None:
    volume = token_volume()
    volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] = 599
    body = sleeper("short", volumes=[volume], container={"volumeMounts": [token_mount()]})
    status, answer = await api.post(f"{NS}/pods", body)
    assert status == 422
    assert answer["message"] == (
        'Pod "short" is invalid: spec.volumes[0].projected.sources[0].serviceAccountToken.'
        "expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    )
    job = {
        "metadata": {"name": "short"},
        "spec": {"template": {"spec": {**body["spec"], "restartPolicy": "Never"}}},
    }
    status, answer = await api.post("/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 422
    assert (
        "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken."
        in (answer["message"])
    )


async def test_projected_token_volume_of_the_gateway_helper(cluster: DevCluster, api: Api) -> None:
    cluster.kubelet.token_refresh_seconds = 0.3
    await api.ok("POST", f"{NS}/secrets", {"metadata": {"name": "s"}, "stringData": {"k": "sv"}})
    await api.ok("POST", f"{NS}/configmaps", {"metadata": {"name": "c"}, "data": {"k": "cv"}})
    volume = token_volume()
    volume["projected"]["sources"] += [
        {"secret": {"name": "s", "items": [{"key": "k", "path": "secret-k"}]}},
        {"configMap": {"name": "c"}},
        {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"clusterTrustBundle": {"signerName": "x", "path": "bundle.pem"}},
    ]
    reader = "import sys, time\nprint(open(sys.argv[1] + '/token').read())\ntime.sleep(120)\n"
    body = sleeper(
        "judge",
        volumes=[volume],
        container={
            "command": [sys.executable, "-c", reader, TOKEN_MOUNT_PATH],
            "volumeMounts": [token_mount()],
        },
    )
    pod = await api.ok("POST", f"{NS}/pods", body)
    uid = pod["metadata"]["uid"]
    directory = cluster.kubelet.pod_dir("default", "judge") / "volumes" / volume["name"]
    deadline = time.monotonic() + 15
    while not (directory / "token").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    first = (directory / "token").read_text()
    assert (directory / "secret-k").read_text() == "sv"
    assert (directory / "k").read_text() == "cv"
    assert (directory / "name").read_text() == "judge"
    found = claims(first)
    assert found["aud"] == [DEFAULT_AUDIENCE] and found["exp"] - found["iat"] == 600
    assert found["kubernetes.io"]["pod"] == {"name": "judge", "uid": uid}

    # The container reads it at its mount path.
    async def logged() -> str:
        _, text = await api.get(f"{NS}/pods/judge/log")
        return str(text)

    while first.strip() not in await logged() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert first.strip() in await logged()

    # Rewritten (token_refresh_seconds stands for 80 % of 600 s), and the new one is valid.
    while (directory / "token").read_text() == first and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    second = (directory / "token").read_text()
    assert second != first and claims(second)["jti"] != found["jti"]
    _, answer = await api.post(REVIEWS, review(second, DEFAULT_AUDIENCE))
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]
    # A token for the gateway's audience is no credential for the API server.
    assert await api.post(WHOAMI, {}, headers=bearer(second)) == (401, UNAUTHORIZED)


def test_kubectl_creates_a_token_review_as_the_charts_gateway(
    thread_cluster: DevClusterThread,
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    tmp_path: Path,
) -> None:
    helm = REPO / ".venv/bin/helm"
    if not helm.exists():
        pytest.skip("helm is not installed")
    rendered = subprocess.run(
        [str(helm), "template", "kyai", str(REPO / "charts/kyai-operator"), "-n", "kyai-system",
         "--set", "defaultJudge.endpoint=http://judge:8000/v1", "--set", "defaultJudge.model=judge",
         "-s", "templates/gateway-clusterrole.yaml"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    roles = [doc for doc in yaml.safe_load_all(rendered) if doc]
    assert {doc["kind"] for doc in roles} == {"ClusterRole", "ClusterRoleBinding"}
    subject = roles[1]["subjects"][0]
    gateway = f"system:serviceaccount:kyai-system:{subject['name']}"
    kubectl("apply", "-f", "-", stdin=rendered)
    token = issue(thread_cluster.cluster.token_key, "team-a", "worker",
                  audiences=[DEFAULT_AUDIENCE], expiration_seconds=600)  # fmt: skip
    path = tmp_path / "review.yaml"
    path.write_text(yaml.safe_dump(review(token, DEFAULT_AUDIENCE)))
    done = kubectl("create", "-f", str(path), "-o", "yaml", f"--as={gateway}")
    answer = yaml.safe_load(done.stdout)
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["user"]["username"] == "system:serviceaccount:team-a:worker"
    assert answer["status"]["audiences"] == [DEFAULT_AUDIENCE]
    refused = kubectl("create", "-f", str(path), "-o", "yaml",
                      "--as=system:serviceaccount:team-a:worker", check=False)  # fmt: skip
    assert refused.returncode != 0
    assert (
        'tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:team-a:'
        'worker" cannot create resource "tokenreviews" in API group "authentication.k8s.io" at '
        "the cluster scope"
    ) in refused.stderr


async def test_the_gateways_verifier_accepts_a_judge_pods_projected_token(
    cluster: DevCluster, api: Api
) -> None:
    """kyai.gateway's TokenVerifier and KubernetesAPI against the devcluster's TokenReview."""
    component = "app.kubernetes.io/component"
    body = sleeper("judge", volumes=[token_volume()], container={"volumeMounts": [token_mount()]})
    body["metadata"]["labels"] = {LABEL_RUN: "r", component: JUDGE_COMPONENT}
    await api.ok("POST", f"{NS}/pods", body)
    token_file = cluster.kubelet.pod_dir("default", "judge") / "volumes" / token_volume()["name"]
    deadline = time.monotonic() + 15
    while not (token_file / "token").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    token = (token_file / "token").read_text()
    kube = KubernetesAPI(ApiServerConfig(server=cluster.url, token=ADMIN_TOKEN))
    rule = WorkerRule(LABEL_RUN, component, (JUDGE_COMPONENT,))
    try:
        caller = await TokenVerifier(kube, audience=DEFAULT_AUDIENCE, rule=rule).verify(token)
        assert (caller.namespace, caller.service_account, caller.pod, caller.run) == (
            "default",
            "default",
            "judge",
            "r",
        )
        await api.ok("DELETE", f"{NS}/pods/judge")
        with pytest.raises(RefusedError) as refused:
            await TokenVerifier(kube, audience=DEFAULT_AUDIENCE, rule=rule).verify(token)
        assert refused.value.refusal.status == 401
        assert refused.value.refusal.message == (
            "the API server refused the token: "
            "[invalid bearer token, service account token has been invalidated]"
        )
    finally:
        await kube.close()
