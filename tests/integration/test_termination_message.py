"""A worker's final error lands in its termination message, where the operator reads it.

Real HTTP on loopback: a server refusing the key (HTTP 401), and ``kyai generate`` run as the
worker Jobs run it (``KYAI_TERMINATION_MESSAGE_PATH`` set by the Job's manifest).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from kyai.cli import main
from kyai.constants import TERMINATION_MESSAGE_ENV

KEY = "sk-term-Q9v+/secret"


@pytest.fixture
async def refusing_server(unused_tcp_port: int) -> AsyncIterator[str]:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "invalid api key"}}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    yield f"http://127.0.0.1:{unused_tcp_port}/v1"
    await runner.cleanup()


def generate_args(endpoint: str, tmp_path: Path) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    dataset = tmp_path / "q.jsonl"
    row = {"instruction": "What is 2+2?", "ground_truth_response": "4"}
    dataset.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return [
        "generate", "--endpoint", endpoint, "--model", "cand", "--dataset", str(dataset),
        "--generation-prompt", "Answer.", "--judge-prompt", "Score.",
        "--output", str(tmp_path / "out"), "--quiet", "--max-retries", "0",
        "--api-key-env", "KYAI_TEST_KEY",
    ]  # fmt: skip


async def _run(args: list[str]) -> int:
    import asyncio

    return await asyncio.to_thread(main, args)


async def test_final_error_is_written_to_the_termination_message(
    refusing_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "termination-log"
    log.write_bytes(b"")  # as the kubelet does before the container starts
    monkeypatch.setenv(TERMINATION_MESSAGE_ENV, str(log))
    monkeypatch.setenv("KYAI_TEST_KEY", KEY)
    status = await _run(generate_args(refusing_server, tmp_path))
    assert status == 3
    err = capsys.readouterr().err
    written = log.read_text(encoding="utf-8")
    assert written.startswith("kyai generate: error: ")
    assert "401" in written and written.strip() in err
    assert KEY not in written


async def test_no_path_or_no_file_writes_nothing_and_does_not_crash(
    refusing_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KYAI_TEST_KEY", KEY)
    monkeypatch.delenv(TERMINATION_MESSAGE_ENV, raising=False)
    assert await _run(generate_args(refusing_server, tmp_path)) == 3
    assert not list(tmp_path.glob("*termination*"))
    monkeypatch.setenv(TERMINATION_MESSAGE_ENV, str(tmp_path / "missing-dir" / "log"))
    assert await _run(generate_args(refusing_server, tmp_path / "second")) == 3
    # No file there (not run by a kubelet): none is created.
    monkeypatch.setenv(TERMINATION_MESSAGE_ENV, str(tmp_path / "absent-log"))
    assert await _run(generate_args(refusing_server, tmp_path / "third")) == 3
    assert not (tmp_path / "absent-log").exists()
