"""Guards of the sandbox's bridge to the parent and of its verdicts (issue 14, survivors of
``make mutation`` in graders/_sandbox: ``_Run._answer``, ``_no_result``): what the sandboxed
code is told when a call is refused, fails or cannot be answered, that a refused call never
breaks the calls after it, and how an exit without a result is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kyai.graders import SandboxError, SandboxLimits, run_sandboxed

# A trusted harness (loaded before the confinement, as the Python grader's own harness is):
# makes the calls listed in the payload, in order, and reports each outcome.
CALLER = """
def run(payload, host):
    outcomes = []
    for method, params in payload:
        try:
            outcomes.append({"ok": host.call(method, params)})
        except RuntimeError as exc:
            outcomes.append({"error": str(exc)})
    return outcomes
"""
LIMITS = SandboxLimits(timeout_seconds=20, max_calls=5)


@pytest.fixture
def caller(tmp_path: Path) -> Path:
    path = tmp_path / "caller.py"
    path.write_text(CALLER, encoding="utf-8")
    return path


async def test_calls_without_a_bridge_are_refused_with_a_clear_message(caller: Path) -> None:
    result = await run_sandboxed(
        "run", [["responses_create", {}]], module_file=caller, limits=LIMITS
    )
    assert result.ok, result
    assert result.value == [{"error": "No calls to the parent are allowed in this sandbox."}]


async def test_calls_beyond_the_limit_are_refused_with_the_limit_named(caller: Path) -> None:
    async def bridge(method: str, params: dict[str, Any]) -> Any:
        return method

    result = await run_sandboxed(
        "run",
        [["a", {}], ["b", {}]],
        module_file=caller,
        limits=SandboxLimits(timeout_seconds=20, max_calls=1),
        bridge=bridge,
    )
    assert result.value == [
        {"ok": "a"},
        {"error": "The call limit (1 per run) is exhausted; the call was refused."},
    ]


async def test_an_answer_that_is_not_json_fails_that_call_only(caller: Path) -> None:
    async def bridge(method: str, params: dict[str, Any]) -> Any:
        return {1, 2} if method == "set" else {"method": method, "params": params}

    result = await run_sandboxed(
        "run",
        [["set", {}], ["echo", {"n": 1}]],
        module_file=caller,
        limits=LIMITS,
        bridge=bridge,
    )
    assert result.ok, result
    assert result.value == [
        {"error": "The answer could not be encoded as JSON: Object of type set is not JSON "
         "serializable"},
        {"ok": {"method": "echo", "params": {"n": 1}}},
    ]  # fmt: skip
    assert result.calls == 2


async def test_params_that_are_not_an_object_reach_the_bridge_as_an_empty_one(caller: Path) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def bridge(method: str, params: dict[str, Any]) -> Any:
        seen.append((method, params))
        return "done"

    result = await run_sandboxed(
        "run",
        [["list", [["k", "v"]]], ["text", "kv"]],
        module_file=caller,
        limits=LIMITS,
        bridge=bridge,
    )
    assert result.value == [{"ok": "done"}, {"ok": "done"}]
    assert seen == [("list", {}), ("text", {})]


async def test_an_exit_without_a_result_names_its_exit_status() -> None:
    result = await run_sandboxed(
        "f", None, source="import os\ndef f(payload):\n    os._exit(3)\n", limits=LIMITS
    )
    assert (result.ok, result.error_kind, result.returncode) == (False, "crash", 3)
    assert result.message == "The code ended (exit status 3) without returning a result."


async def test_an_exit_with_status_zero_without_a_result_is_still_a_crash() -> None:
    result = await run_sandboxed(
        "f", None, source="import os\ndef f(payload):\n    os._exit(0)\n", limits=LIMITS
    )
    assert (result.ok, result.error_kind, result.returncode) == (False, "crash", 0)
    assert result.message == "The code ended (exit status 0) without returning a result."


async def test_a_kill_by_a_signal_is_named_with_the_likely_cause() -> None:
    # SIGXCPU ignored: the CPU-time hard limit (one second later) kills with SIGKILL.
    source = (
        "import signal\n"
        "def f(payload):\n"
        "    signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
        "    while True:\n"
        "        pass\n"
    )
    limits = SandboxLimits(timeout_seconds=30, cpu_seconds=1)
    result = await run_sandboxed("f", None, source=source, limits=limits)
    assert (result.ok, result.error_kind, result.returncode) == (False, "crash", -9)
    assert result.message == (
        "The code was killed by SIGKILL (the CPU-time hard limit or the out-of-memory killer)."
    )


async def test_a_kill_by_another_signal_is_named_without_a_cause() -> None:
    source = "import ctypes\ndef f(payload):\n    ctypes.string_at(0)\n"  # reads address 0
    result = await run_sandboxed("f", None, source=source, limits=LIMITS)
    assert (result.ok, result.error_kind, result.returncode) == (False, "crash", -11)
    assert result.message == "The code was killed by SIGSEGV."


async def test_output_that_is_not_utf8_is_kept_with_replacement_characters() -> None:
    source = "import sys\ndef f(payload):\n    sys.stdout.buffer.write(b'ok \\xff\\xfe end')\n"
    result = await run_sandboxed("f", None, source=source, limits=LIMITS)
    assert result.ok, result
    assert result.output_tail == "ok \ufffd\ufffd end"


async def test_a_timeout_is_a_failed_run_that_names_the_limit() -> None:
    source = "import time\ndef f(payload):\n    time.sleep(30)\n"
    result = await run_sandboxed("f", None, source=source, limits=SandboxLimits(timeout_seconds=1))
    assert (result.ok, result.error_kind) == (False, "timeout")
    assert result.message == "The code did not finish within 1 s."


def test_limits_of_one_are_allowed_and_bad_limits_are_named() -> None:
    one = SandboxLimits(memory_bytes=1, file_size_bytes=1, open_files=1, max_processes=1)
    assert (one.memory_bytes, one.open_files) == (1, 1)
    with pytest.raises(SandboxError) as info:
        SandboxLimits(open_files=0)
    assert str(info.value) == "open_files must be at least 1, got 0."
    with pytest.raises(SandboxError) as info:
        SandboxLimits(max_calls=-1)
    assert str(info.value) == "max_calls must not be negative, got -1."


async def test_printing_past_the_output_limit_is_a_failed_run_that_names_the_limit() -> None:
    source = "def f(payload):\n    while True:\n        print('x' * 1000)\n"
    limits = SandboxLimits(timeout_seconds=30, max_output_bytes=100_000)
    result = await run_sandboxed("f", None, source=source, limits=limits)
    assert (result.ok, result.error_kind) == (False, "output_limit")
    assert result.message == "The code printed more than 100000 bytes."
    assert result.output_bytes > 100_000 and result.output_tail.endswith("x\n")
