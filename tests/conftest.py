"""Options of the whole test suite: real-cluster (e2e) runs are opt-in.

``--with-e2e --kubeconfig PATH`` points the system tests (tests/system) at the cluster of
PATH, where the operator must already be installed with its Helm chart, and runs the tests
marked ``e2e`` (tests/e2e). Without them nothing changes: the system tests start their own
devcluster and operator, and ``e2e`` tests are skipped.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("e2e", "real-cluster tests (see README, make e2e)")
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--with-e2e"):
        return
    skip = pytest.mark.skip(reason="needs a real Kubernetes cluster (opt-in with --with-e2e)")
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(skip)
