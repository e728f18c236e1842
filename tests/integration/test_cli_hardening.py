"""Issue 8: what a user's infrastructure does to ``kyai``, and the clean answer to each.

Malformed URLs and unusable paths exit 2 at once naming the flag; Ctrl-C exits 130 keeping
what was stored; a server that cannot answer a single request stops early with exit 3; keys
echoed back by a gateway are stored and printed nowhere; a damaged generations.jsonl is
never modified by ``kyai judge``; ``--retry-errors`` on a finished run re-judges what changed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kyai.cli import main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
KEY = "sk-echo-Zx81+/secret"
QUESTIONS = [
    ("What is the capital of France?", "Paris"),
    ("What is 2+2?", "4"),
    ("Who wrote Hamlet?", "Shakespeare"),
    ("What is the capital of Peru?", "Lima"),
]


def standard_rules() -> list[Rule]:
    return [
        Rule(match="capital of France", model="cand", content="Paris"),
        Rule(match="2+2", model="cand", content="4"),
        Rule(model="cand", content="I do not know"),
        Rule(model="judge", content=substring_judge),
    ]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "questions.jsonl", QUESTIONS)


def write_dataset(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"instruction": q, "ground_truth_response": a}, ensure_ascii=False) + "\n"
            for q, a in rows
        ),
        encoding="utf-8",
    )
    return path


def generate_args(endpoint: str, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "generate",
        "--endpoint",
        endpoint,
        "--model",
        "cand",
        "--dataset",
        str(dataset),
        "--generation-prompt",
        GEN_PROMPT,
        "--judge-prompt",
        JUDGE_PROMPT,
        "--output",
        str(out),
        "--quiet",
        "--max-retries",
        "1",
        *extra,
    ]


def judge_args(endpoint: str, generations: Path, out: Path, *extra: str) -> list[str]:
    return [
        "judge",
        "--generations",
        str(generations),
        "--judge-endpoint",
        endpoint,
        "--judge-model",
        "judge",
        "--output",
        str(out),
        "--quiet",
        "--max-retries",
        "1",
        *extra,
    ]


def run_args(endpoint: str, dataset: Path, out: Path, *extra: str) -> list[str]:
    args = generate_args(endpoint, dataset, out, *extra)
    args[0] = "run"
    return [*args, "--judge-endpoint", endpoint, "--judge-model", "judge"]


def kyai(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "kyai.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- malformed URLs and unusable paths: exit 2 at once, naming the flag ------------------------


class Listener(socketserver.ThreadingTCPServer):
    """A loopback server that counts the connections made to it and closes each at once."""

    daemon_threads = True
    connections = 0

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"


class _CountAndClose(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, Listener)
        self.server.connections += 1


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener(("127.0.0.1", 0), _CountAndClose) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server
        server.shutdown()


@pytest.mark.parametrize("url", ["foo", "http://", "ftp://x", "http://:8000", "localhost:8000"])
@pytest.mark.parametrize("flag", ["--endpoint", "--judge-endpoint"])
def test_malformed_endpoint_exit_2_at_once(
    url: str,
    flag: str,
    dataset: Path,
    tmp_path: Path,
    listener: Listener,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = run_args(listener.url, dataset, tmp_path / "out")
    args[args.index(flag) + 1] = url
    started = time.monotonic()
    assert main(args) == 2
    # At once: the well-formed endpoint was never contacted (no request, no retry) ...
    assert listener.connections == 0
    # ... and a safety net far above the expected milliseconds, far below 25 s of retries.
    assert time.monotonic() - started < 10.0
    err = capsys.readouterr().err
    assert f"{flag}: " in err and repr(url) in err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["existing file", "under a file"])
def test_unusable_output_exit_2(
    case: str, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    out = blocker if case == "existing file" else blocker / "run"
    assert main(generate_args("http://127.0.0.1:9", dataset, out)) == 2
    err = capsys.readouterr().err
    assert "--output" in err and str(out) in err
    assert "Traceback" not in err


def test_generations_naming_a_file_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "generations.jsonl"
    a_file.write_text("{}\n")
    assert main(judge_args("http://127.0.0.1:9", a_file, tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "--generations" in err and "is not a directory" in err


def test_unexpected_errors_are_a_message_and_debug_shows_the_traceback(
    dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import kyai.evaluation

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(kyai.evaluation, "generate", broken)
    # A candidate that answers its check: the bug is what fails.
    with LLMDouble(models=[ModelSpec("cand")]).start_in_thread() as double:
        args = generate_args(double.url, dataset, tmp_path / "out")
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "unexpected RuntimeError: a bug in the engine" in err and "--debug" in err
        assert "Traceback" not in err
        assert main([*args, "--debug"]) == 1
        assert "Traceback (most recent call last)" in capsys.readouterr().err


# -- Ctrl-C: exit 130 after flushing, no traceback, resumable ----------------------------------


def test_sigint_mid_run_exits_130_and_keeps_what_was_stored(tmp_path: Path) -> None:
    rows = [(f"Question {n}?", f"A{n}") for n in range(40)]
    dataset = write_dataset(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    # Until the interrupt, questions 8 and later take 3 s more: however late the signal
    # (a loaded machine), it finds the run unfinished; the resumed run answers at once.
    holding = threading.Event()
    holding.set()
    late = Rule(
        match=lambda chat: holding.is_set() and int(chat.last_user_message.split()[1][:-1]) >= 8,
        delay_s=3.0,
    )
    double = LLMDouble(models=[ModelSpec("cand")], latency_s=0.2, rules=[late])
    with double.start_in_thread() as running:
        args = generate_args(running.url, dataset, out, "--concurrency", "2")
        # As from a terminal: SIGINT's disposition is the default in the child whatever this
        # worker's is (an ignored SIGINT is inherited through exec, and Python then keeps
        # ignoring it: it happened in full xdist runs, not in this module alone).
        inherited = signal.getsignal(signal.SIGINT)
        process = subprocess.Popen(
            [sys.executable, "-m", "kyai.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        generations = out / "generations.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if generations.exists() and generations.read_text().count("\n") >= 4:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        try:
            _stdout, stderr = process.communicate(timeout=30)
        finally:
            holding.clear()
            process.kill()
            process.communicate()
        assert process.returncode == 130, (stderr, f"SIGINT here: {inherited!r}")
        assert "interrupted" in stderr
        assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
        stored = [json.loads(line) for line in generations.read_text().splitlines()]
        assert 4 <= len(stored) < 40
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["history"][-1]["completed"] is False
        resumed = kyai(*args)
        assert resumed.returncode == 0, resumed.stderr
    final = [json.loads(line) for line in generations.read_text().splitlines()]
    assert [record["row_index"] for record in final] == list(range(40))


# -- early stop: a server that cannot answer one request is a configuration error -------------


@pytest.mark.parametrize(
    ("rule", "cause"),
    [
        (Rule(model="cand", status=404, error_message="Not Found"), "HTTP 404"),
        (Rule(model="cand", status=401, error_message="Unauthorized"), "HTTP 401"),
        (Rule(model="cand", status=403, error_message="Forbidden"), "HTTP 403"),
    ],
)
def test_every_request_refused_stops_early_with_exit_3(
    rule: Rule, cause: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [(f"Question {n}?", f"A{n}") for n in range(60)]
    dataset = write_dataset(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "out"
    with LLMDouble(models=[ModelSpec("cand")], rules=[rule]).start_in_thread() as double:
        status = main(generate_args(double.url, dataset, out, "--concurrency", "2"))
        sent = len(double.requests)
    err = capsys.readouterr().err
    assert status == 3
    assert cause in err and "configuration error" in err and "Traceback" not in err
    assert sent < 20  # stopped after the first rows, not 60 of them
    stored = (out / "generations.jsonl").read_text().splitlines()
    assert 8 <= len(stored) < 20  # what was stored is kept


def test_html_answers_stop_early_with_exit_3(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(
            text="<html><body>Welcome to nginx!</body></html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    with _serve(app) as url:
        status = main(generate_args(url, dataset, tmp_path / "out"))
    err = capsys.readouterr().err
    assert status == 3
    assert "invalid_response" in err and "nginx" in err


def test_judge_refusing_every_request_stops_early_with_exit_3(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = [Rule(model="cand", content="Paris"), Rule(model="judge", status=404)]
    with LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")], rules=rules
    ).start_in_thread() as double:
        status = main(run_args(double.url, dataset, tmp_path / "out"))
    err = capsys.readouterr().err
    assert status == 3
    assert "judge requests" in err and "HTTP 404" in err


def test_model_missing_from_v1_models_exit_3_lists_the_served(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LLMDouble(models=[ModelSpec("llama-3-8b"), ModelSpec("qwen")]).start_in_thread() as double:
        status = main(generate_args(double.url, dataset, tmp_path / "out"))
        assert double.requests == []  # no row was sent
    err = capsys.readouterr().err
    assert status == 3
    assert "'cand'" in err and "'llama-3-8b'" in err and "'qwen'" in err


# -- secrets: an echoing gateway's body never reaches a file or the terminal -----------------


def test_echoed_key_is_stored_and_printed_nowhere(dataset: Path, tmp_path: Path) -> None:
    rules = [
        Rule(match="Hamlet", model="cand", status=500, error_message="upstream failed"),
        Rule(match="Peru", model="cand", status=400, error_message="bad request"),
        Rule(match="capital of France", model="judge", status=500),
        *standard_rules(),
    ]
    double = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=rules,
        api_key=KEY,
        echo_headers=True,
    )
    out = tmp_path / "out"
    with double.start_in_thread() as running:
        completed = kyai(
            *run_args(running.url, dataset, out, "--api-key-env", "K"),
            "--judge-api-key-env",
            "K",
            env={"K": KEY},
        )
        echoed = [r.response for r in running.requests if r.status and r.status >= 400]
    assert completed.returncode == 0, completed.stderr
    assert echoed and all(KEY in json.dumps(body) for body in echoed)  # the server echoed it
    forms = [
        KEY,
        base64.b64encode(f"Bearer {KEY}".encode()).decode(),
        base64.urlsafe_b64encode(f"Bearer {KEY}".encode()).decode(),
        base64.b64encode(KEY.encode()).decode().rstrip("="),
    ]
    texts = {
        str(path): path.read_text(encoding="utf-8") for path in out.rglob("*") if path.is_file()
    }
    texts["stderr"], texts["stdout"] = completed.stderr, completed.stdout
    for where, text in texts.items():
        for form in forms:
            assert form not in text, (where, form)
    generations = (out / "generations.jsonl").read_text()
    assert "[REDACTED]" in generations  # the echo was stored, redacted


# -- damaged generations.jsonl: judge leaves it alone, generate redoes the row ---------------


def test_damaged_tail_is_ignored_judge_never_modifies_its_input(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = tmp_path / "gen"
    rules = [
        Rule(model="cand", content="Antwort: Zürich, 東京"),
        Rule(model="judge", content=substring_judge),
    ]
    with LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")], rules=rules
    ).start_in_thread() as double:
        assert main(generate_args(double.url, dataset, gen)) == 0
        path = gen / "generations.jsonl"
        data = path.read_bytes()
        last_start = data.rstrip(b"\n").rfind(b"\n") + 1
        cut = data[: data.index("東".encode(), last_start) + 2]  # inside a 3-byte character
        path.write_bytes(cut)
        before = sha256(path)
        # judge: the last row has no complete answer -> exit 2 naming it, file untouched
        assert main(judge_args(double.url, gen, tmp_path / "j1")) == 2
        err = capsys.readouterr().err
        assert "incomplete" in err and "Traceback" not in err
        assert sha256(path) == before
        # generate redoes the cut row; judge then succeeds, still without touching its input
        assert main(generate_args(double.url, dataset, gen)) == 0
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["row_index"] for line in lines] == [0, 1, 2, 3]
        after = sha256(path)
        assert main(judge_args(double.url, gen, tmp_path / "j2")) == 0
        assert sha256(path) == after
        # a complete record without its final newline is also ignored by judge, file untouched
        path.write_bytes(path.read_bytes()[:-1])
        before = sha256(path)
        assert main(judge_args(double.url, gen, tmp_path / "j3")) == 2
        assert sha256(path) == before


# -- --retry-errors on a finished run: re-generate, re-judge what changed, keep history -------


def test_retry_errors_on_a_finished_run_rejudges_what_changed(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = [
        Rule(match="Hamlet", model="cand", status=503, times=2, content="Shakespeare"),
        *standard_rules(),
    ]
    out = tmp_path / "out"
    with LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")], rules=rules
    ).start_in_thread() as double:
        assert main(run_args(double.url, dataset, out)) == 0  # 1 retry: the Hamlet row fails
        first = json.loads((out / "summary.json").read_text())
        assert first["errors"] == {"candidate_http_error": 1}
        before = len(double.requests)
        assert main([*run_args(double.url, dataset, out), "--retry-errors"]) == 0
        judge_calls = [r for r in double.requests[before:] if r.model == "judge"]
        cand_calls = [r for r in double.requests[before:] if r.model == "cand"]
    second = json.loads((out / "summary.json").read_text())
    assert second["error_count"] == 0
    assert second["scores"] == [1.0, 1.0, 1.0, 0.0]
    assert len(cand_calls) == 1 and len(judge_calls) == 1  # only the changed row
    assert "Hamlet" in judge_calls[0].messages[-1]["content"]
    history = json.loads((out / "run.json").read_text())["history"]
    assert [entry["rows_sent"] for entry in history] == [4, 1]
    assert [entry["retry_errors"] for entry in history] == [False, True]
    judgements = (out / "judgements.jsonl").read_text().splitlines()
    assert [json.loads(line)["row_index"] for line in judgements] == [0, 1, 2, 3]


class _serve:
    """Serve an aiohttp app from a background thread; yields its base URL."""

    def __init__(self, app: web.Application) -> None:
        self.app = app

    def __enter__(self) -> str:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> str:
            self.runner = web.AppRunner(self.app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            return f"http://127.0.0.1:{self.runner.addresses[0][1]}"

        return asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--snapshot", "questions.jsonl", "is not a directory"),
        ("--model-config", "missing/config.json", "does not exist"),
    ],
)
def test_unusable_input_paths_exit_2(
    flag: str,
    value: str,
    message: str,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = generate_args("http://127.0.0.1:9", dataset, tmp_path / "out")
    if flag == "--snapshot":
        at = args.index("--dataset")
        args[at : at + 2] = [flag, str(tmp_path / value)]
    else:
        args += [flag, str(tmp_path / value)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert flag in err and message in err and "Traceback" not in err


def test_a_custom_dataset_without_prompts_names_the_flag(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = generate_args("http://127.0.0.1:9", dataset, tmp_path / "out")
    at = args.index("--generation-prompt")
    del args[at : at + 2]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--generation-prompt" in err and "generation_prompt=." not in err


@pytest.mark.parametrize("failure", ["bad dataset", "server unreachable"])
def test_a_failed_generate_leaves_no_empty_output_directory(
    failure: str, dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "new" / "run"
    if failure == "bad dataset":
        broken = tmp_path / "broken.jsonl"
        broken.write_text('{"instruction": "q"}\n')  # no ground_truth_response
        status = main(generate_args("http://127.0.0.1:9", broken, out))
        assert status == 2
    else:
        status = main(generate_args("http://127.0.0.1:9", dataset, out))
        assert status == 3
    assert not (tmp_path / "new").exists()
    # A directory that existed before is never removed, even when empty.
    out.mkdir(parents=True)
    assert main(generate_args("http://127.0.0.1:9", dataset, out)) == 3
    assert out.is_dir()
