"""The process runtime's fork server: a forked ``kyai`` worker behaves as the executed one.

Each case starts the same container twice, forked (the default) and executed
(``fork_server=False``), and compares what a kubelet sees: the exit code, the log, the
effect of the environment and of the working directory, SIGTERM's grace.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai_devcluster import _forkserver
from kyai_devcluster._runtime import Exit, Handle, Launch, ProcessRuntime

KYAI = str(Path(sys.executable).parent / "kyai")


def launch(tmp_path: Path, tag: str, argv: list[str], **env: str) -> Launch:
    home = tmp_path / tag
    home.mkdir(parents=True)
    (home / "rows.jsonl").write_text(
        json.dumps({"instruction": "Q?", "ground_truth_response": "A"}) + "\n"
    )
    return Launch(
        pod_uid="0123456789abcdef",
        pod_name=f"worker-{tag}",
        namespace="team",
        name="main",
        image="localhost/kyai-operator:dev",
        argv=["kyai", *argv],
        entrypoint=True,
        env={"PATH": f"{Path(KYAI).parent}:{os.defpath}", "HOME": str(home), **env},
        mounts=[],
        working_dir=str(home),
        log_path=tmp_path / f"{tag}.log",
        termination_path=tmp_path / f"{tag}.termination",
        termination_message_path="/dev/termination-log",
    )


async def both(tmp_path: Path, argv: list[str], **env: str) -> dict[str, tuple[Exit, str]]:
    """Run the container forked and executed; each one's exit and log (paths made equal)."""
    seen: dict[str, tuple[Exit, str]] = {}
    for tag, forked in (("forked", True), ("executed", False)):
        runtime = ProcessRuntime(fork_server=forked)
        spec = launch(tmp_path, tag, argv, **env)
        handle = await runtime.start(spec)
        assert (type(handle).__name__ == "_ForkedHandle") is forked
        done = await asyncio.wait_for(handle.wait(), 60)
        seen[tag] = (done, spec.log_path.read_text().replace(str(tmp_path / tag), "HOME"))
    return seen


def generate(endpoint: str = "http://127.0.0.1:9/v1") -> list[str]:
    """``kyai generate`` of the container's rows.jsonl against ``endpoint``, no retries."""
    return [
        "generate", "--endpoint", endpoint, "--model", "m", "--dataset", "rows.jsonl",
        "--generation-prompt", "Answer.", "--output", "out", "--max-retries", "0",
    ]  # fmt: skip


async def test_the_environment_reaches_the_forked_worker_as_the_executed_one(
    tmp_path: Path,
) -> None:
    without = await both(tmp_path / "a", [*generate(), "--api-key-env", "TEAM_KEY"])
    assert without["forked"] == without["executed"]
    assert without["forked"][0].code == 2
    assert "TEAM_KEY is not set" in without["forked"][1]
    # With the variable set, the key is accepted and the (unreachable) endpoint is next;
    # the dataset was found relative to the container's working directory.
    given = await both(tmp_path / "b", [*generate(), "--api-key-env", "TEAM_KEY"], TEAM_KEY="k")
    assert given["forked"] == given["executed"]
    assert given["forked"][0].code == 3
    assert "Cannot reach http://127.0.0.1:9/v1/models" in given["forked"][1]
    assert "does not exist" not in given["forked"][1]


async def test_usage_errors_and_help_exit_as_a_process_would(tmp_path: Path) -> None:
    helped = await both(tmp_path / "a", ["judge", "--help"])
    assert helped["forked"] == helped["executed"]
    assert helped["forked"][0].code == 0 and "usage: kyai judge" in helped["forked"][1]
    refused = await both(tmp_path / "b", ["generate", "--no-such-flag"])
    assert refused["forked"] == refused["executed"]
    assert refused["forked"][0].code == 2
    assert "the following arguments are required" in refused["forked"][1]


class SilentServer:
    """A server that accepts connections and never answers them."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.connections: list[socket.socket] = []

    async def accepted(self) -> None:
        """Wait for a worker's connection (its probe of the server), kept open."""
        connection, _ = await asyncio.to_thread(self.socket.accept)
        self.connections.append(connection)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    for connection in [*server.connections, server.socket]:
        connection.close()


async def test_sigterm_stops_a_forked_worker_within_its_grace(
    tmp_path: Path, silent_server: SilentServer
) -> None:
    port = silent_server.port
    argv = [*generate(f"http://127.0.0.1:{port}/v1"), "--request-timeout", "600"]
    codes = {}
    for tag, forked in (("forked", True), ("executed", False)):
        handle: Handle = await ProcessRuntime(fork_server=forked).start(launch(tmp_path, tag, argv))
        await silent_server.accepted()  # the worker is waiting on its probe
        assert handle.running()
        started = time.monotonic()
        await handle.stop(grace=10)
        assert time.monotonic() - started < 5
        assert not handle.running()
        codes[tag] = (await handle.wait()).code
    assert codes["forked"] == codes["executed"] == 128 + signal.SIGTERM


async def test_a_child_whose_kubelet_connection_closes_is_killed(
    tmp_path: Path, silent_server: SilentServer
) -> None:
    port = silent_server.port
    spec = launch(tmp_path, "orphan", generate(f"http://127.0.0.1:{port}/v1"))
    server = await asyncio.to_thread(_forkserver.ForkServer.shared)
    with spec.log_path.open("ab") as log:
        pid, _reader, writer = await server.start(
            KYAI, spec.argv, spec.env, str(spec.working_dir), log.fileno()
        )
    await silent_server.accepted()
    os.kill(pid, 0)  # alive
    writer.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"pid {pid} outlived its connection")


async def test_a_dead_server_is_replaced_and_off_means_executed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await asyncio.to_thread(_forkserver.ForkServer.shared)
    first.process.kill()
    first.process.wait()
    second = await asyncio.to_thread(_forkserver.ForkServer.shared)
    assert second is not first and second.process.poll() is None
    forked = await ProcessRuntime().start(launch(tmp_path, "again", ["judge", "--help"]))
    assert (await forked.wait()).code == 0
    monkeypatch.setenv(_forkserver.ENABLE_VARIABLE, "0")
    runtime = ProcessRuntime()
    assert runtime.fork_server is False
    executed = await runtime.start(launch(tmp_path, "off", ["judge", "--help"]))
    assert type(executed).__name__ == "_ProcessHandle"
    assert (await executed.wait()).code == 0
    # Other commands than a worker's are always executed.
    assert not ProcessRuntime(fork_server=True)._forkable(KYAI, ["kyai", "operator"])
    assert not ProcessRuntime(fork_server=True)._forkable("/bin/sh", ["sh", "generate"])


async def test_an_edited_module_retires_the_server_and_the_next_one_has_the_edit(
    tmp_path: Path,
) -> None:
    import kyai.cli

    server = await asyncio.to_thread(_forkserver.ForkServer.shared)
    runtime = ProcessRuntime()
    assert (await (await runtime.start(launch(tmp_path, "a", ["judge", "--help"]))).wait()) == Exit(
        0
    )
    source = Path(kyai.cli.__file__)
    before = source.stat()
    try:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
        # Refused by the old server: executed instead, with the same result.
        handle = await runtime.start(launch(tmp_path, "b", ["judge", "--help"]))
        assert type(handle).__name__ == "_ProcessHandle"
        assert (await handle.wait()).code == 0
        assert server.retired
        server.process.wait(timeout=10)  # no child left: it exits
        handle = await runtime.start(launch(tmp_path, "c", ["judge", "--help"]))
        assert type(handle).__name__ == "_ForkedHandle"
        assert (await handle.wait()).code == 0
        assert _forkserver.ForkServer.shared() is not server
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
