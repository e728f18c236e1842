"""Options of the whole test suite: real-cluster (e2e) runs are opt-in.

``--with-e2e --kubeconfig PATH`` points the system tests (tests/system) at the cluster of
PATH, where the operator must already be installed with its Helm chart, and runs the tests
marked ``e2e`` (tests/e2e). Without them nothing changes: the system tests start their own
devcluster and operator, and ``e2e`` tests are skipped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

#: Modules that run on one xdist worker together (``make test``: ``--dist loadscope``): the
#: podman modules share the session's images and start containers on both cores each; the
#: chart's operator (in a container on the host's network) and the readme-test blocks (README.md
#: and the docs pages) bind the same fixed ports (8080, 8081), so their module goes with them.
ONE_WORKER: dict[str, str] = {
    "tests/devcluster/test_podman.py": "fixed-ports",
    "tests/devcluster/test_podman_chart.py": "fixed-ports",
    "tests/integration/test_readme.py": "fixed-ports",
}
#: The longest modules, run first (in this order, the rest as collected) so that no worker
#: starts one near the end; the podman modules after six of them, once the images built in
#: the background since the session started are ready (on a new machine, base image
#: included, about 200 s beside three workers: fourth in line, the podman worker waited 122 s
#: for them). Once the images exist the podman group takes about 80 s.
FIRST: tuple[str, ...] = (
    "tests/system/test_hardening.py",
    "tests/integration/test_lmeval.py",
    "tests/system/test_inuse.py",
    "tests/system/test_run_kinds.py",
    "tests/system/test_failure_messages.py",
    "tests/system/test_comparisons.py",
    "tests/devcluster/test_podman.py",
    "tests/devcluster/test_podman_chart.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("e2e", "real-cluster tests (see docs/development.md, make e2e)")
    group.addoption(
        "--with-e2e",
        action="store_true",
        default=False,
        help="run the tests marked e2e, against the cluster of --kubeconfig",
    )
    group.addoption(
        "--kubeconfig",
        metavar="PATH",
        default=None,
        help="a real cluster's kubeconfig (with --with-e2e): the system tests use it and the "
        "operator installed there instead of a devcluster and a local operator",
    )
    group.addoption(
        "--e2e-namespace",
        metavar="NS",
        default="kyai-system",
        help="namespace of the installed operator's Helm release (kyai-system)",
    )
    group.addoption(
        "--e2e-release",
        metavar="NAME",
        default="kyai",
        help="name of the operator's Helm release (kyai)",
    )
    group.addoption(
        "--e2e-double-host",
        metavar="ADDR",
        default=None,
        help="an address of this machine that the cluster's pods reach (for kind: the "
        "gateway of the 'kind' container network); the LLM double listens there",
    )
    group.addoption(
        "--e2e-double-port",
        metavar="PORT",
        type=int,
        default=18080,
        help="port of the LLM double (18080; the chart's defaultJudge.endpoint points there)",
    )


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    with_e2e = bool(config.getoption("--with-e2e"))
    kubeconfig = config.getoption("--kubeconfig")
    if kubeconfig is not None and not with_e2e:
        raise pytest.UsageError(
            "--kubeconfig points the tests at a real cluster, which is opt-in: add --with-e2e."
        )
    if with_e2e:
        if kubeconfig is None:
            raise pytest.UsageError(
                "--with-e2e needs --kubeconfig PATH: the cluster where the operator is installed."
            )
        if not Path(kubeconfig).is_file():
            raise pytest.UsageError(f"--kubeconfig {kubeconfig}: no such file.")
        if config.getoption("--e2e-double-host") is None:
            raise pytest.UsageError(
                "--with-e2e needs --e2e-double-host ADDR: an address of this machine the "
                "cluster's pods can reach (for kind, the 'kind' network's gateway)."
            )
    if not hasattr(config, "workerinput"):  # the xdist controller, or a single process
        images = _module(Path(__file__).parent / "devcluster" / "podman_image.py")
        if images.wanted(config):
            images.start_building(config)


def _module(path: Path) -> Any:
    """A module of the tests, by path (the controller has not collected the tests' packages)."""
    spec = importlib.util.spec_from_file_location(f"kyai_tests_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope``, with the modules of :data:`ONE_WORKER` in one scope each group,
    handed out in the order of the collection (see :func:`pytest_collection_modifyitems`)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # not by number of tests: FIRST, then as collected

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return ONE_WORKER.get(module, module)

    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = {module: index for index, module in enumerate(FIRST)}
    items.sort(key=lambda item: order.get(item.nodeid.split("::", 1)[0], len(FIRST)))
    if config.getoption("--with-e2e"):
        return
    skip = pytest.mark.skip(reason="needs a real Kubernetes cluster (opt-in with --with-e2e)")
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(skip)
