"""Least-privilege workers, shown with real 403s (issue 24, item 4).

An EvaluationRun runs in the devcluster with the operator; the test takes a worker pod's
real ServiceAccount token (the file the simulated kubelet mounted at
/var/run/secrets/kubernetes.io/serviceaccount/token) and, with it, asks the API server for
what a tenant's worker might try. The devcluster authorizes from the Role and RoleBinding the
operator created (``kyai.builders.evaluation.worker_rbac``): the worker may get its own run
and get and patch its own run's status, nothing else, and every refusal is the exact 403
body kube-apiserver gives. Tokens that are not valid credentials (its pod deleted, expired,
issued for another audience) get the API server's 401.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from kyai.constants import LABEL_RUN
from kyai.gateway import DEFAULT_AUDIENCE
from kyai_devcluster import DevClusterThread
from kyai_devcluster._tokens import issue
from kyai_testing import LLMDouble
from system.helpers import Kubectl, Operator
from system.test_operator import phase_is, run, snapshot, workload

API = "/apis/kyai.io/v1alpha1"
UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}


def forbidden(message: str, kind: str, group: str = "", name: str = "") -> dict[str, Any]:
    """The 403 Status kube-apiserver answers (``apierrors.NewForbidden``)."""
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


class Worker:
    """HTTP to the devcluster with a worker pod's own token."""

    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *_: object) -> None:
        self.client.close()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        response = self.client.request(method, path, json=body, headers=headers)
        return response.status_code, response.json()


@pytest.fixture
def worker_run(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    operator: Operator,
    double: LLMDouble,
    namespace: str,
) -> Iterator[dict[str, Any]]:
    """A run ``r`` that Succeeded, a second run ``other``, another namespace with a Secret,
    and the token of one of ``r``'s worker pods."""
    if cluster is None:
        pytest.skip("reads the worker's token file the devcluster's kubelet wrote")
    elsewhere = f"{namespace[:50]}-else"
    kubectl.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}},
        *(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "team-key", "namespace": ns},
                "stringData": {"api-key": "sk-tenant-secret"},
            }
            for ns in (namespace, elsewhere)
        ),
        snapshot("capitals", namespace),
        workload("cand", namespace, double),
        run("r", namespace, double),
        run("other", namespace, double),
    )
    for name in ("r", "other"):
        done = kubectl.wait_for("evaluationrun", name, namespace, phase_is("Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
    pods = kubectl.items("pods", namespace, "-l", f"{LABEL_RUN}=r")
    assert pods, "the run left no worker pods"
    pod = pods[0]
    token_file = (
        cluster.cluster.kubelet.pod_dir(namespace, pod["metadata"]["name"])
        / "serviceaccount"
        / "token"
    )
    yield {
        "namespace": namespace,
        "elsewhere": elsewhere,
        "pod": pod,
        "account": pod["spec"]["serviceAccountName"],
        "token": token_file.read_text(),
        "url": cluster.url,
    }
    kubectl.run("delete", "namespace", elsewhere, "--wait=false", check=False)


def test_a_worker_may_only_patch_its_own_runs_status(worker_run: dict[str, Any]) -> None:
    ns, elsewhere = worker_run["namespace"], worker_run["elsewhere"]
    user = f'User "system:serviceaccount:{ns}:{worker_run["account"]}"'
    with Worker(worker_run["url"], worker_run["token"]) as worker:
        check_privileges(worker, ns, elsewhere, user)


def check_privileges(worker: Worker, ns: str, elsewhere: str, user: str) -> None:
    runs = f"{API}/namespaces/{ns}/evaluationruns"

    # What its Role grants: its own run, and its own run's status (get and patch).
    status, body = worker.call("GET", f"{runs}/r")
    assert status == 200 and body["metadata"]["name"] == "r"
    status, body = worker.call("PATCH", f"{runs}/r/status", {"status": {"phase": "Succeeded"}})
    assert status == 200, body
    assert body["status"]["phase"] == "Succeeded"

    def in_ns(verb: str, resource: str, where: str = ns, group: str = "") -> str:
        return (
            f'{user} cannot {verb} resource "{resource}" in API group "{group}" '
            f'in the namespace "{where}"'
        )

    refusals: list[tuple[str, str, Any, dict[str, Any]]] = [
        (
            "GET",
            f"/api/v1/namespaces/{ns}/secrets/team-key",
            None,
            forbidden(
                'secrets "team-key" is forbidden: ' + in_ns("get", "secrets"),
                "secrets",
                name="team-key",
            ),
        ),
        (
            "GET",
            f"/api/v1/namespaces/{ns}/secrets",
            None,
            forbidden("secrets is forbidden: " + in_ns("list", "secrets"), "secrets"),
        ),
        (
            "GET",
            f"/api/v1/namespaces/{elsewhere}/secrets/team-key",
            None,
            forbidden(
                'secrets "team-key" is forbidden: ' + in_ns("get", "secrets", elsewhere),
                "secrets",
                name="team-key",
            ),
        ),
        (
            "GET",
            runs,
            None,
            forbidden(
                "evaluationruns.kyai.io is forbidden: "
                + in_ns("list", "evaluationruns", group="kyai.io"),
                "evaluationruns",
                "kyai.io",
            ),
        ),
        (
            "GET",
            f"{runs}/other/status",
            None,
            forbidden(
                'evaluationruns.kyai.io "other" is forbidden: '
                + in_ns("get", "evaluationruns/status", group="kyai.io"),
                "evaluationruns",
                "kyai.io",
                "other",
            ),
        ),
        (
            "PATCH",
            f"{runs}/other/status",
            {"status": {"phase": "Failed"}},
            forbidden(
                'evaluationruns.kyai.io "other" is forbidden: '
                + in_ns("patch", "evaluationruns/status", group="kyai.io"),
                "evaluationruns",
                "kyai.io",
                "other",
            ),
        ),
        (
            "PATCH",
            f"{runs}/r",
            {"spec": {"generation": {"concurrency": 64}}},
            forbidden(
                'evaluationruns.kyai.io "r" is forbidden: '
                + in_ns("patch", "evaluationruns", group="kyai.io"),
                "evaluationruns",
                "kyai.io",
                "r",
            ),
        ),
        (
            "PATCH",
            f"{API}/namespaces/{elsewhere}/evaluationruns/r/status",
            {"status": {"phase": "Failed"}},
            forbidden(
                'evaluationruns.kyai.io "r" is forbidden: '
                + in_ns("patch", "evaluationruns/status", elsewhere, group="kyai.io"),
                "evaluationruns",
                "kyai.io",
                "r",
            ),
        ),
        (
            "GET",
            f"/api/v1/namespaces/{elsewhere}/pods",
            None,
            forbidden("pods is forbidden: " + in_ns("list", "pods", elsewhere), "pods"),
        ),
        (
            "GET",
            f"/api/v1/namespaces/{ns}/pods",
            None,
            forbidden("pods is forbidden: " + in_ns("list", "pods"), "pods"),
        ),
    ]
    for method, path, body, expected in refusals:
        assert worker.call(method, path, body) == (403, expected), (method, path)


def test_tokens_that_are_no_credentials_get_401(
    worker_run: dict[str, Any], cluster: DevClusterThread, kubectl: Kubectl
) -> None:
    ns, account = worker_run["namespace"], worker_run["account"]
    own_run = f"{API}/namespaces/{ns}/evaluationruns/r"
    key = cluster.cluster.token_key
    expired = issue(key, ns, account, now=time.time() - 7200)
    other_audience = issue(key, ns, account, audiences=[DEFAULT_AUDIENCE], expiration_seconds=600)
    fresh = issue(key, ns, account)
    with Worker(worker_run["url"], fresh) as worker:
        assert worker.call("GET", own_run)[0] == 200
    for token in (expired, other_audience):
        with Worker(worker_run["url"], token) as worker:
            assert worker.call("GET", own_run) == (401, UNAUTHORIZED)

    with Worker(worker_run["url"], worker_run["token"]) as worker:
        assert worker.call("GET", own_run)[0] == 200
        pod = worker_run["pod"]["metadata"]["name"]
        kubectl.run("delete", "pod", pod, "-n", ns, "--wait=true")
        assert worker.call("GET", own_run) == (401, UNAUTHORIZED)
