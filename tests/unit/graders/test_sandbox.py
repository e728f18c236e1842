"""The sandbox: each confinement layer, each limit, the protocol, and the parent's survival."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pytest

from kyai.graders import _sandbox_child as child
from kyai.graders._sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    run_sandboxed,
    sandbox_layers,
)

DATA = Path(__file__).parent / "data" / "sandbox"
CALLS_HARNESS = DATA / "calls_harness.py"
FAST = SandboxLimits(timeout_seconds=10)


async def run_fn(body: str, payload: Any = None, limits: SandboxLimits = FAST) -> SandboxResult:
    """Run ``def f(payload):`` with the given (indented) body."""
    source = "def f(payload):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return await run_sandboxed("f", payload, source=source, limits=limits)


async def test_all_layers_apply_on_this_machine() -> None:
    result = await sandbox_layers()
    assert result.ok, result
    assert result.layers == {"rlimits": True, "landlock": True, "seccomp": True}, result.notes
    assert result.notes == ()


async def test_value_and_payload_round_trip_as_json() -> None:
    result = await run_fn(
        "return {'doubled': payload['n'] * 2, 'nan': float('nan'), 'items': payload['items']}",
        {"n": 21, "items": ["a", 1.5, None, True]},
    )
    assert result.ok, result
    assert result.value["doubled"] == 42
    assert math.isnan(result.value["nan"])
    assert result.value["items"] == ["a", 1.5, None, True]
    assert result.error_kind is None


async def test_source_without_function_runs_the_module() -> None:
    ok = await run_sandboxed(source="x = 1\nassert x == 1\n", limits=FAST)
    assert ok.ok and ok.value is None
    failed = await run_sandboxed(source="assert 1 == 2, 'nope'\n", limits=FAST)
    assert not failed.ok
    assert failed.error_kind == "exception"
    assert failed.exception_type == "AssertionError"
    assert "nope" in (failed.message or "")


async def test_environment_is_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KYAI_FAKE_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    result = await run_fn(
        "import os\n"
        "try:\n"
        "    parent = open(f'/proc/{os.getppid()}/environ', 'rb').read().decode()\n"
        "except OSError as exc:\n"
        "    parent = type(exc).__name__\n"
        "return {'env': dict(os.environ), 'parent': parent}"
    )
    assert result.ok, result
    env = result.value["env"]
    assert "KYAI_FAKE_API_KEY" not in env
    assert not any(key.startswith("KUBERNETES") for key in env)
    assert "sk-do-not-leak" not in str(env)
    assert result.value["parent"] == "PermissionError"


async def test_each_run_has_its_own_working_directory_removed_afterwards() -> None:
    body = "import os\nopen('note.txt', 'w').write('x')\nreturn [os.getcwd(), os.listdir('.')]"
    first, second = await asyncio.gather(run_fn(body), run_fn(body))
    assert first.ok and second.ok
    assert first.value[1] == ["note.txt"] == second.value[1]
    assert first.value[0] != second.value[0]
    assert not Path(first.value[0]).exists()
    assert not Path(second.value[0]).exists()


async def test_writing_outside_the_working_directory_is_refused(tmp_path: Path) -> None:
    # The test's own directory: the file mode lets this user write it, only Landlock refuses.
    target = tmp_path / "escaped.txt"
    result = await run_fn(f"open({str(target)!r}, 'w').write('x')")
    assert not result.ok
    assert result.exception_type == "PermissionError"
    assert not target.exists()


async def test_reading_outside_the_python_installation_is_refused(tmp_path: Path) -> None:
    # Stands for /var/run/secrets/kubernetes.io/serviceaccount/token in a pod.
    secrets = tmp_path / "var" / "run" / "secrets"
    secrets.mkdir(parents=True)
    token = secrets / "token"
    token.write_text("fake-service-account-token")
    result = await run_fn(f"return open({str(token)!r}).read()")
    assert not result.ok
    assert result.exception_type == "PermissionError"
    stdlib = await run_fn("import json, textwrap, decimal\nreturn json.dumps([1])")
    assert stdlib.ok and stdlib.value == "[1]"


async def test_network_is_refused() -> None:
    connections: list[object] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(object())
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        result = await run_fn(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"
        )
    finally:
        server.close()
        await server.wait_closed()
    assert not result.ok
    assert result.exception_type == "PermissionError"
    assert connections == []


@pytest.mark.parametrize(
    "body",
    [
        "import os\nos.fork()",
        "import subprocess\nsubprocess.run(['true'])",
        "import os\nos.execv('/bin/true', ['true'])",
        "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    ],
    ids=["fork", "subprocess", "exec", "multiprocessing"],
)
async def test_process_creation_is_refused(body: str) -> None:
    result = await run_fn(body)
    assert not result.ok
    assert result.error_kind == "exception"
    assert result.exception_type in ("PermissionError", "OSError"), result.message


async def test_threads_still_work() -> None:
    result = await run_fn(
        "import threading\nout = []\n"
        "t = threading.Thread(target=lambda: out.append(7))\nt.start()\nt.join()\nreturn out"
    )
    assert result.ok and result.value == [7]


async def test_fork_bomb_fails_fast() -> None:
    result = await run_fn("import os\nwhile True:\n    os.fork()")
    assert result.error_kind == "exception"
    assert result.exception_type == "PermissionError"
    assert result.duration_seconds < 5


async def test_signals_to_other_processes_are_refused() -> None:
    result = await run_fn("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert result.exception_type == "PermissionError"


async def test_limits_cannot_be_raised() -> None:
    result = await run_fn(
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (hard * 2, hard * 2))"
    )
    assert not result.ok
    assert result.exception_type == "ValueError"
    limits = await run_fn("import resource\nreturn resource.getrlimit(resource.RLIMIT_AS)")
    assert limits.value == [FAST.memory_bytes, FAST.memory_bytes]


async def test_allocating_8_gib_is_a_memory_error() -> None:
    result = await run_fn("return len(bytearray(8 * 1024 ** 3))")
    assert result.error_kind == "memory"
    assert result.exception_type == "MemoryError"


async def test_wall_clock_timeout_kills_the_process_group() -> None:
    limits = SandboxLimits(timeout_seconds=1)
    result = await run_fn("while True:\n    pass", limits=limits)
    assert result.error_kind == "timeout"
    assert result.returncode == -9
    assert result.duration_seconds < 4


async def test_blocking_timeout_without_cpu() -> None:
    result = await run_fn("import time\ntime.sleep(60)", limits=SandboxLimits(timeout_seconds=1))
    assert result.error_kind == "timeout"


async def test_cpu_time_limit() -> None:
    limits = SandboxLimits(timeout_seconds=20, cpu_seconds=1)
    result = await run_fn("while True:\n    pass", limits=limits)
    assert result.error_kind == "cpu_limit"
    assert result.duration_seconds < 10


async def test_file_size_limit_is_an_error_not_a_kill() -> None:
    limits = SandboxLimits(timeout_seconds=10, file_size_bytes=1024 * 1024)
    result = await run_fn(
        "with open('big.bin', 'wb') as f:\n    f.write(b'x' * (2 * 1024 * 1024))", limits=limits
    )
    assert result.error_kind == "exception"
    assert result.exception_type == "OSError"
    assert "File too large" in (result.message or "")


async def test_open_files_limit() -> None:
    limits = SandboxLimits(timeout_seconds=10, open_files=32)
    result = await run_fn("files = [open(f'f{i}', 'w') for i in range(100)]", limits=limits)
    assert result.exception_type == "OSError"
    assert "Too many open files" in (result.message or "")


async def test_printed_output_tail_is_kept() -> None:
    result = await run_fn("print('start')\nprint('x' * 20000)\nprint('the end')\nreturn 1")
    assert result.ok and result.value == 1
    assert result.output_tail.endswith("the end\n")
    assert "start" not in result.output_tail
    assert len(result.output_tail.encode()) <= FAST.output_tail_bytes
    assert result.output_bytes > 20000


async def test_printing_without_end_hits_the_output_cap() -> None:
    limits = SandboxLimits(timeout_seconds=20, max_output_bytes=1024 * 1024)
    result = await run_fn("while True:\n    print('x' * 10000)", limits=limits)
    assert result.error_kind == "output_limit"
    assert result.duration_seconds < 15


async def test_oversized_result_hits_the_message_cap() -> None:
    limits = SandboxLimits(timeout_seconds=10, max_message_bytes=64 * 1024)
    result = await run_fn("return 'x' * 200000", limits=limits)
    assert result.error_kind == "output_limit"


async def test_exit_without_result_is_a_crash() -> None:
    result = await run_fn("import os\nos._exit(3)")
    assert result.error_kind == "crash"
    assert result.returncode == 3
    exited = await run_fn("raise SystemExit(0)")
    assert exited.error_kind == "exception"
    assert exited.exception_type == "SystemExit"


async def test_syntax_error_in_source() -> None:
    result = await run_sandboxed("f", source="def f(:\n", limits=FAST)
    assert result.error_kind == "syntax"
    assert result.exception_type == "SyntaxError"
    nested = await run_fn("compile('def (', 'x', 'exec')")
    assert nested.error_kind == "exception"


async def test_unserializable_values() -> None:
    marked = await run_fn("return {1, 2}")
    assert marked.ok
    assert marked.value == {"$unserializable": "set", "repr": "{1, 2}"}
    circular = await run_fn("x = []\nx.append(x)\nreturn x")
    assert circular.error_kind == "unserializable"


async def test_protocol_forgery_of_unknown_messages_is_a_protocol_error() -> None:
    # The code finds the protocol descriptor and writes nonsense on it.
    result = await run_fn(
        "import os\n"
        "for fd in range(3, 10):\n"
        "    try:\n"
        "        os.write(fd, b'not json\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "return 1"
    )
    assert result.error_kind == "protocol"


async def test_bridge_calls_are_counted_and_refused_beyond_the_limit() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def bridge(method: str, params: dict[str, Any]) -> Any:
        seen.append((method, params))
        await asyncio.sleep(0)
        return {"echo": params["n"]}

    limits = SandboxLimits(timeout_seconds=10, max_calls=2)
    result = await run_sandboxed(
        "run",
        {"calls": 3, "method": "echo"},
        module_file=CALLS_HARNESS,
        limits=limits,
        bridge=bridge,
    )
    assert result.ok, result
    assert result.value[:2] == [{"ok": {"echo": 0}}, {"ok": {"echo": 1}}]
    assert "limit (2 per run)" in result.value[2]["error"]
    assert result.calls == 3
    assert seen == [("echo", {"n": 0}), ("echo", {"n": 1})]


async def test_bridge_errors_reach_the_child() -> None:
    async def bridge(method: str, params: dict[str, Any]) -> Any:
        raise LookupError(f"no such model for {method}")

    result = await run_sandboxed(
        "run",
        {"calls": 1, "method": "responses_create"},
        module_file=CALLS_HARNESS,
        limits=SandboxLimits(timeout_seconds=10, max_calls=5),
        bridge=bridge,
    )
    assert result.value == [{"error": "LookupError: no such model for responses_create"}]
    without = await run_sandboxed(
        "run", {"calls": 1, "method": "x"}, module_file=CALLS_HARNESS, limits=FAST
    )
    assert "No calls to the parent" in without.value[0]["error"]


async def test_slow_bridge_counts_against_the_timeout() -> None:
    async def bridge(method: str, params: dict[str, Any]) -> Any:
        await asyncio.sleep(30)

    result = await run_sandboxed(
        "run",
        {"calls": 1, "method": "x"},
        module_file=CALLS_HARNESS,
        limits=SandboxLimits(timeout_seconds=1, max_calls=1),
        bridge=bridge,
    )
    assert result.error_kind == "timeout"


async def test_many_hostile_runs_at_once_all_finish() -> None:
    limits = SandboxLimits(timeout_seconds=2)
    bodies = [
        "while True:\n    pass",
        "import os\nwhile True:\n    os.fork()",
        "return len(bytearray(8 * 1024 ** 3))",
        "import os, signal\nos.killpg(0, signal.SIGKILL)",
        "import os\nos.abort()",
        "return 5",
    ]
    results = await asyncio.gather(*(run_fn(body, limits=limits) for body in bodies))
    kinds = [result.error_kind for result in results]
    assert kinds[0] == "timeout"
    assert kinds[1] == "exception"
    assert kinds[2] == "memory"
    assert kinds[3] == "exception"
    assert kinds[4] == "crash"
    assert results[5].ok and results[5].value == 5


def test_bad_arguments_raise() -> None:
    with pytest.raises(SandboxError, match="exactly one"):
        asyncio.run(run_sandboxed("f", source="", module_file=CALLS_HARNESS))
    with pytest.raises(SandboxError, match="JSON"):
        asyncio.run(run_sandboxed("f", object(), source="def f(x): pass"))
    with pytest.raises(SandboxError, match="timeout_seconds"):
        SandboxLimits(timeout_seconds=0)
    with pytest.raises(SandboxError, match="memory_bytes"):
        SandboxLimits(memory_bytes=0)


def test_missing_layers_degrade_with_a_note() -> None:
    notes: list[str] = []
    assert child._import_optional("kyai_no_such_confinement_module", notes) is None
    assert child._apply_seccomp(None, notes) is False
    assert child._apply_landlock(None, "/tmp", [], notes) is False
    assert len(notes) == 3
    assert "seccomp is not applied" in notes[1]
    assert "landlock is not applied" in notes[2]


def test_read_paths_never_include_the_root() -> None:
    paths = child._read_paths(["/", os.sep])
    assert "/" not in paths
    assert all(os.path.isabs(path) for path in paths)


def sandbox_children() -> list[int]:
    """Sandbox processes whose parent is this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat_fields[1]) == os.getpid() and b"_sandbox_child.py" in cmdline:
            found.append(int(entry.name))
    return found


async def test_cancelling_a_run_kills_its_child() -> None:
    task = asyncio.create_task(
        run_fn("while True:\n    pass", limits=SandboxLimits(timeout_seconds=60))
    )
    for _ in range(100):
        await asyncio.sleep(0.05)
        if sandbox_children():
            break
    assert sandbox_children(), "the sandbox never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sandbox_children() == []


async def test_large_bridge_answers_arrive_whole() -> None:
    vector = [i / 7 for i in range(50_000)]

    async def bridge(method: str, params: dict[str, Any]) -> Any:
        return {"data": [{"embedding": vector}]}

    result = await run_sandboxed(
        "run",
        {"calls": 2, "method": "embeddings_create"},
        module_file=CALLS_HARNESS,
        limits=SandboxLimits(timeout_seconds=10, max_calls=2),
        bridge=bridge,
    )
    assert result.ok, result
    assert [outcome["ok"]["data"][0]["embedding"] for outcome in result.value] == [vector, vector]
