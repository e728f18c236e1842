"""The operator as a process against ``kyai devcluster``; the LLM double is candidate and judge.

One cluster, one double and one operator per module; each test works in its own namespace.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kyai.devcluster import DevClusterThread
from kyai.testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import REPO, WORKER_IMAGE, Kubectl, Operator


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevClusterThread]:
    workdir = tmp_path_factory.mktemp("devcluster")
    with DevClusterThread(workdir=workdir, local_images=(WORKER_IMAGE,)) as running:
        yield running


@pytest.fixture(scope="module")
def kubectl(cluster: DevClusterThread) -> Kubectl:
    client = Kubectl(cluster.kubeconfig_path)
    client.run("apply", "-f", str(REPO / "crds"))
    return client


@pytest.fixture(scope="module")
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="France", model="cand", content="Paris"),
            Rule(match="Italy", model="cand", content="<think>Milan?</think>Rome"),
            Rule(match="Spain", model="cand", content="Barcelona"),
            Rule(match="slow", model="cand", content="done", delay_s=0.4),
            Rule(match="$", model="cand", content="Final answer: 2"),
            Rule(model="cand", content="I do not know"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    kubectl: Kubectl, double: LLMDouble, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    running = Operator(
        kubectl.kubeconfig,
        tmp_path_factory.mktemp("operator"),
        env={
            "KYAI_DEFAULT_JUDGE_ENDPOINT": double.base_url,
            "KYAI_DEFAULT_JUDGE_MODEL": "judge",
            # No HuggingFace from here: built-ins without a source fail at once, not after
            # network time-outs.
            "HF_HUB_OFFLINE": "1",
            "KYAI_SNAPSHOT_CONFIGMAP_LIMIT_BYTES": "100000",
        },
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    name = request.node.name.replace("_", "-").lower()[:50].strip("-")
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name
