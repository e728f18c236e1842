"""The default judge through the judge gateway, end to end (issue 24).

The devcluster, the operator with ``KYAI_DEFAULT_JUDGE_GATEWAY`` and a namespace selector,
``kyai judge-gateway`` as its own process holding the platform's key, and a judge double that
answers only with that key. A run of a tenant namespace that names no judge Succeeds: its
judge pod shows the gateway its projected ServiceAccount token (verified with the devcluster's
TokenReview), and the gateway puts the key on the request. No Secret outside the operator's
namespace holds the key's bytes, and the gateway counts the namespace's requests and tokens.
A namespace the selector does not select is Stalled, naming the setting, until it is labelled.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kyai.constants import JUDGE_GATEWAY_AUDIENCE, LABEL_RUN
from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import Kubectl, Operator, free_port
from system.test_operator import condition, phase_is, run, snapshot, workload

pytestmark = pytest.mark.timeout(600)

KEY = f"sk-platform-{secrets.token_hex(16)}"
OPT_IN = "kyai.io/default-judge"


@pytest.fixture(scope="module")
def platform_judge() -> Iterator[LLMDouble]:
    """The platform's judge: it answers only requests carrying the platform's key."""
    server = LLMDouble(
        models=[ModelSpec("judge", max_model_len=8192)],
        rules=[Rule(model="judge", content=substring_judge)],
        api_key=KEY,
    )
    with server.start_in_thread() as running:
        yield running


class Gateway:
    """``kyai judge-gateway`` as a subprocess, its key in a file of its own."""

    def __init__(self, upstream: str, kubeconfig: Path, workdir: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        key_file = workdir / "api-key"
        key_file.write_text(KEY)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KYAI_GATEWAY_")}
        self.log = workdir / "gateway.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kyai.gateway", "--upstream-url", upstream,
                 "--model", "judge", "--api-key-file", str(key_file),
                 "--kubeconfig", str(kubeconfig), "--bind-address", "127.0.0.1",
                 "--port", str(self.port), "--metrics-port", str(self.metrics_port)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.metrics_url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the gateway did not get ready"
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"{self.metrics_url}/metrics", timeout=5).text
        shown = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
        prefix = f"{name}{{{shown}}} "
        return sum(
            float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="module")
def gateway(
    cluster: DevClusterThread | None,
    kubectl: Kubectl,
    platform_judge: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    if cluster is None:
        pytest.skip("the gateway runs beside the devcluster here; the chart runs it on clusters")
    running = Gateway(platform_judge.url, kubectl.kubeconfig, tmp_path_factory.mktemp("gateway"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def operator(
    kubectl: Kubectl, gateway: Gateway, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_GATEWAY": gateway.url,
            "KYAI_DEFAULT_JUDGE_GATEWAY_CHECK": f"{gateway.metrics_url}/upstream/v1",
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            "KYAI_DEFAULT_JUDGE_NAMESPACE_SELECTOR": json.dumps({"matchLabels": {OPT_IN: "yes"}}),
            "HF_HUB_OFFLINE": "1",
            "KYAI_RUN_RESYNC_SECONDS": "2",
            "KYAI_JOB_START_GRACE_SECONDS": "2",
        },
    )
    running.start()
    yield running
    running.stop()


def tenant(kubectl: Kubectl, name: str, double: LLMDouble, *, opted_in: bool) -> None:
    labels = {OPT_IN: "yes"} if opted_in else {}
    kubectl.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        snapshot("capitals", name),
        workload("cand", name, double),
        run("r", name, double, judge=None),  # names no judge: the platform's default one
    )


def key_holders(kubectl: Kubectl) -> list[str]:
    """Every Secret, ConfigMap and pod spec of the cluster whose bytes hold the key."""
    found = []
    for kind in ("secrets", "configmaps", "pods"):
        listed = json.loads(kubectl.run("get", kind, "-A", "-o", "json").stdout)["items"]
        for item in listed:
            text = json.dumps(item)
            decoded = [
                base64.b64decode(value).decode("utf-8", "replace")
                for value in (item.get("data") or {}).values()
                if kind == "secrets"
            ]
            if KEY in text or any(KEY in value for value in decoded):
                found.append(f"{kind}/{item['metadata']['namespace']}/{item['metadata']['name']}")
    return found


def test_a_tenant_run_that_names_no_judge_succeeds_through_the_gateway(
    kubectl: Kubectl, operator: Operator, gateway: Gateway, double: LLMDouble,
    platform_judge: LLMDouble,
) -> None:  # fmt: skip
    tenant(kubectl, "team-a", double, opted_in=True)
    done = kubectl.wait_for("evaluationrun", "r", "team-a", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
    # The operator checked the default judge through the gateway's check route before the
    # generation Job (it cannot show a judge pod's token; the route needs none).
    assert gateway.metric("kyai_judge_gateway_upstream_checks_total", code="200") >= 1
    assert done["status"]["errorCount"] == 0 and done["status"]["questions"] > 0
    # The judge pod held no key: a projected token for the gateway's audience instead.
    pods = kubectl.items("pods", "team-a", "-l", f"{LABEL_RUN}=r")
    judge = next(p for p in pods if p["metadata"]["name"].startswith("r-judge"))
    volumes = {v["name"]: v for v in judge["spec"].get("volumes") or []}
    token = volumes["judge-gateway-token"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == JUDGE_GATEWAY_AUDIENCE and token["expirationSeconds"] >= 600
    command = judge["spec"]["containers"][0]
    assert "--judge-api-key-file" in command.get("args", []) + command.get("command", [])
    # Every judge request reached the judge with the platform's key, through the gateway.
    judged = list(platform_judge.requests)
    assert judged and all(r.headers["Authorization"] == f"Bearer {KEY}" for r in judged)
    # Counted for chargeback: the chat requests above, and the worker's model probe.
    served = gateway.metric("kyai_judge_gateway_requests_total", namespace="team-a", code="200")
    assert served >= len(judged)
    assert gateway.metric("kyai_judge_gateway_tokens_total", namespace="team-a", kind="prompt") > 0
    # No object of the cluster holds the key (the operator's namespace is not even in it here).
    assert key_holders(kubectl) == []
    assert kubectl.items("secrets", "team-a", "-l", f"{LABEL_RUN}=r") == []


def test_a_request_without_a_workers_token_never_reaches_the_judge(
    gateway: Gateway, platform_judge: LLMDouble, kubectl: Kubectl, operator: Operator,
) -> None:  # fmt: skip
    before = len(platform_judge.requests)
    body = {"model": "judge", "messages": [{"role": "user", "content": "hi"}]}
    refused = [
        httpx.post(f"{gateway.url}/chat/completions", json=body, headers=headers, timeout=10)
        for headers in ({}, {"Authorization": "Bearer not-a-token"})
    ]
    assert [r.status_code for r in refused] == [401, 401]
    assert KEY not in "".join(r.text for r in refused)
    assert len(platform_judge.requests) == before
    assert gateway.metric("kyai_judge_gateway_requests_total", namespace="unknown", code="401") >= 2


def test_a_namespace_not_selected_is_stalled_until_it_opts_in(
    kubectl: Kubectl, operator: Operator, gateway: Gateway, double: LLMDouble,
) -> None:  # fmt: skip
    tenant(kubectl, "team-b", double, opted_in=False)

    def stalled(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Stalled" and c["status"] == "True" for c in conditions)

    held = kubectl.wait_for("evaluationrun", "r", "team-b", stalled, timeout=60)
    said = condition(held, "Stalled")
    assert said["reason"] == "DefaultJudgeNotAllowed", said
    assert "defaultJudge.namespaceSelector" in said["message"] and "team-b" in said["message"]
    assert held["status"]["phase"] == "Pending"
    kubectl.run("label", "namespace", "team-b", f"{OPT_IN}=yes")
    done = kubectl.wait_for("evaluationrun", "r", "team-b", phase_is("Succeeded", "Failed"))
    assert done["status"]["phase"] == "Succeeded", (done["status"], operator.logs()[-3000:])
    assert condition(done, "Stalled")["status"] == "False"
    assert gateway.metric("kyai_judge_gateway_requests_total", namespace="team-b", code="200") > 0


def test_a_judge_that_refuses_the_platforms_key_fails_the_run_saying_whose_it_is(
    kubectl: Kubectl, operator: Operator, gateway: Gateway, double: LLMDouble,
    platform_judge: LLMDouble,
) -> None:  # fmt: skip
    """The platform's key revoked (the judge answers 403): the run fails at once, and says it
    is the platform's to fix, not the tenant's; the gateway logs and counts it so."""
    platform_judge.api_key, platform_judge.unauthorized_status = "sk-revoked", 403
    try:
        tenant(kubectl, "team-c", double, opted_in=True)
        done = kubectl.wait_for(
            "evaluationrun", "r", "team-c", phase_is("Succeeded", "Failed"), timeout=120
        )
    finally:
        platform_judge.api_key, platform_judge.unauthorized_status = KEY, 401
    assert done["status"]["phase"] == "Failed", done["status"]
    failed = condition(done, "Ready")
    assert "refused the platform's API key (HTTP 403)" in failed["message"], failed
    assert "defaultJudge.apiKeySecret" in failed["message"]
    assert "not this run's" in failed["message"]
    assert "API key?" not in failed["message"]  # never blames the tenant's configuration
    assert gateway.metric("kyai_judge_gateway_upstream_refusals_total", code="403") >= 1
    assert gateway.metric("kyai_judge_gateway_requests_total", namespace="team-c", code="502") >= 1
    assert gateway.metric("kyai_judge_gateway_requests_total", namespace="team-c", code="403") == 0
    logged = gateway.log.read_text(encoding="utf-8")
    assert "refused the platform's API key (HTTP 403)" in logged and "namespace team-c" in logged
    assert KEY not in logged
