"""The operator against a cluster; the LLM double is candidate and judge.

By default: one ``kyai devcluster``, one double on loopback and one operator process per
module. With ``--with-e2e --kubeconfig PATH`` (see tests/conftest.py and ``make e2e``) the
same tests run against that cluster and the operator installed there by Helm: the double
listens on ``--e2e-double-host`` so the cluster's pods reach it, each test's namespace gets a
unique suffix and is deleted afterwards, and :class:`InstalledOperator` stands in for the
local process (its logs and metrics come through the API server; killing it deletes its pod).
Each test works in its own namespace.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import REPO, WORKER_IMAGE, Kubectl, Operator

#: Seconds the installed operator may take to be available again (a pod restart on a busy
#: cluster includes scheduling and the image's start-up).
ROLLOUT_TIMEOUT_S = 180.0


def e2e_kubeconfig(config: pytest.Config) -> Path | None:
    """The real cluster's kubeconfig when the run targets one, else None."""
    if not config.getoption("--with-e2e"):
        return None
    path: str | None = config.getoption("--kubeconfig")
    return None if path is None else Path(path).resolve()


class InstalledOperator:
    """The operator a Helm release runs in the cluster, with :class:`Operator`'s interface.

    ``start`` waits until its Deployment is available and ``/metrics`` answers (through the
    API server's service proxy); ``kill`` force-deletes its pod (the Deployment starts a new
    one, as after a crash); ``stop`` leaves it running: it belongs to the cluster.
    """

    def __init__(self, kubectl: Kubectl, namespace: str, release: str) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
        self.starts = 0

    def _one(self, kind: str) -> dict[str, Any]:
        items = self.kubectl.items(kind, self.namespace, "-l", self.selector)
        if len(items) != 1:
            raise AssertionError(
                f"expected one {kind} labelled {self.selector} in {self.namespace}, found "
                f"{len(items)}: is the chart installed (helm install ... -n {self.namespace})?"
            )
        return items[0]

    def start(self) -> None:
        self.starts += 1
        deployment = self._one("deployments")
        name = str(deployment["metadata"]["name"])
        timeout = f"--timeout={int(ROLLOUT_TIMEOUT_S)}s"
        self.kubectl.run("rollout", "status", f"deployment/{name}", "-n", self.namespace, timeout)
        deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            try:
                if "kyai_" in self.metrics():
                    return
            except AssertionError as exc:
                last = str(exc)
            time.sleep(1)
        raise AssertionError(f"the installed operator's /metrics never answered: {last}")

    def stop(self) -> None:
        """Nothing: the installed operator keeps running."""

    def kill(self) -> None:
        pods = self.kubectl.items("pods", self.namespace, "-l", self.selector)
        force = ("--grace-period=0", "--force", "--wait=true")
        self.kubectl.run("delete", "pod", "-n", self.namespace, "-l", self.selector, *force)
        old = {str(pod["metadata"]["name"]) for pod in pods}
        deadline = time.monotonic() + ROLLOUT_TIMEOUT_S
        while time.monotonic() < deadline:
            current = self.kubectl.items("pods", self.namespace, "-l", self.selector)
            if current and not {str(pod["metadata"]["name"]) for pod in current} & old:
                return
            time.sleep(0.5)
        raise AssertionError("the operator's Deployment did not replace its killed pod")

    def metrics(self) -> str:
        service = self._one("services")
        name = str(service["metadata"]["name"])
        path = f"/api/v1/namespaces/{self.namespace}/services/http:{name}:metrics/proxy/metrics"
        return self.kubectl.run("get", "--raw", path).stdout

    def logs(self) -> str:
        completed = self.kubectl.run(
            "logs", "-n", self.namespace, "-l", self.selector, "--tail=200", check=False
        )
        return completed.stdout + completed.stderr


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "devcluster(**options): the module's devcluster is made with these keyword arguments "
        "of DevCluster (kueue=True, lws=True); not for --with-e2e (tests/system/conftest.py)",
    )


def devcluster_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options of the module's ``pytest.mark.devcluster`` (``pytestmark``), else {}."""
    marker = request.node.get_closest_marker("devcluster")
    return {} if marker is None else dict(marker.kwargs)


@pytest.fixture(scope="module")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevClusterThread | None]:
    """The devcluster, or None when the tests target a real cluster.

    A module that needs the devcluster made with options says so once, beside its other
    marks: ``pytestmark = pytest.mark.devcluster(kueue=True)`` (the keyword arguments of
    :class:`~kyai_devcluster.DevCluster`: its Kueue or LeaderWorkerSet emulation). Such a
    module is skipped with ``--with-e2e``: what it tests is the emulation's, which a real
    cluster may not have.
    """
    options = devcluster_options(request)
    if e2e_kubeconfig(request.config) is not None:
        if options:
            pytest.skip(f"needs the devcluster made with {options} (devcluster only)")
        yield None
        return
    workdir = tmp_path_factory.mktemp("devcluster")
    with DevClusterThread(workdir=workdir, local_images=(WORKER_IMAGE,), **options) as running:
        yield running


@pytest.fixture(scope="module")
def kubectl(request: pytest.FixtureRequest, cluster: DevClusterThread | None) -> Kubectl:
    if cluster is None:
        kubeconfig = e2e_kubeconfig(request.config)
        assert kubeconfig is not None
        # The chart installed the CRDs; they must be there and established.
        client = Kubectl(kubeconfig)
        client.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(REPO / "crds"))
        return client
    client = Kubectl(cluster.kubeconfig_path)
    client.run("apply", "-f", str(REPO / "crds"))
    return client


@pytest.fixture(scope="module")
def double(request: pytest.FixtureRequest) -> Iterator[LLMDouble]:
    e2e = e2e_kubeconfig(request.config) is not None
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
        # In a real cluster the pods must reach the double: it listens where they can, on the
        # port the chart's defaultJudge.endpoint names.
        host=request.config.getoption("--e2e-double-host") if e2e else "127.0.0.1",
        port=request.config.getoption("--e2e-double-port") if e2e else 0,
    )
    with server.start_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    request: pytest.FixtureRequest,
    kubectl: Kubectl,
    double: LLMDouble,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator | InstalledOperator]:
    if e2e_kubeconfig(request.config) is not None:
        installed = InstalledOperator(
            kubectl,
            request.config.getoption("--e2e-namespace"),
            request.config.getoption("--e2e-release"),
        )
        installed.start()
        yield installed
        return
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
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.node.name.replace("_", "-").lower()[:50].strip("-")
    e2e = e2e_kubeconfig(request.config) is not None
    if e2e:
        # A shared cluster outlives the run: a fresh namespace per test, deleted afterwards.
        name = f"{name[:44].strip('-')}-{secrets.token_hex(2)}"
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    if e2e:
        kubectl.run("delete", "namespace", name, "--wait=false", check=False)
