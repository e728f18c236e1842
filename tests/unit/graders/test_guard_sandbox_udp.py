"""Guard for the sandbox's network rule (issue 14): no socket at all, so a UDP datagram to a
local listener cannot leave a grader (TCP connects are refused by more than one rule, UDP
``sendto`` only by the ``socket`` rule)."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest

from kyai.datasets import Row
from kyai.graders import (
    GradeInput,
    GradingContext,
    PythonGrader,
    SandboxLimits,
    run_sandboxed,
)

EXFILTRATE = """
import socket

def grade(sample, item):
    if item['what'] == 'udp':
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.sendto(b'secret answer key', ('127.0.0.1', int(item['port'])))
    return 1.0
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    with sock:
        yield sock


def received(sock: socket.socket, wait: float = 0.3) -> list[bytes]:
    """Every datagram that reached ``sock`` (waiting briefly for late ones)."""
    got: list[bytes] = []
    while select.select([sock], [], [], wait)[0]:
        got.append(sock.recv(65536))
    return got


def test_the_listener_works(listener: socket.socket) -> None:
    # The check below is only meaningful if a datagram sent from here does arrive.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"ping", listener.getsockname())
    assert received(listener) == [b"ping"]


async def test_udp_sendto_from_a_python_grader_fails_and_scores_zero(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    grader = PythonGrader.from_declaration(
        {"grader": {"type": "python", "source": EXFILTRATE, "timeout_seconds": 10}}
    )
    items = [
        GradeInput(
            row=Row(
                index=index,
                row_id=what,
                instruction="q",
                ground_truth_response="a",
                metadata={"what": what, "port": port},
            ),
            response="a",
        )
        for index, what in enumerate(("udp", "fine"))
    ]
    outcome = await grader.grade(
        items,
        GradingContext(dataset="d", candidate_model="m", run_id="r", concurrency=1, bridge=None),
    )
    udp, fine = outcome.grades
    assert fine.ok and fine.score == 1.0, fine  # the grader itself runs
    assert not udp.ok, udp
    assert udp.score == 0.0
    assert udp.error_kind == "grader_exception"
    assert "PermissionError" in (udp.message or ""), udp.message
    assert received(listener) == []


async def test_udp_sendto_in_the_sandbox_is_refused(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    source = (
        "import socket\n"
        "def f(payload):\n"
        "    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "    return sock.sendto(b'leak', ('127.0.0.1', payload))\n"
    )
    result = await run_sandboxed("f", port, source=source, limits=SandboxLimits(timeout_seconds=10))
    assert not result.ok, result
    assert result.exception_type == "PermissionError", result
    assert received(listener) == []
