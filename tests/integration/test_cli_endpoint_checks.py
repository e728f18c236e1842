"""Every endpoint a run needs is checked before the first generation request (issue 47).

``kyai run`` asks the candidate's and the judge's ``/v1/models`` before it sends anything: a
server that cannot be reached, a model it does not list, a key it refuses end the run at
once with a reason of its own (``CandidateUnreachable``, ``JudgeKeyRefused``, ...) and exit
status 3, without one generation request. A blip is tolerated: a few quick attempts, each
printed with the attempt and the next wait. ``--quiet`` prints the result line and errors only.

Real HTTP on loopback: the LLM double, closed ports, an unresolvable host, and a stand-in
answering as the judge gateway does.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kyai.cli import main
from kyai.constants import GATEWAY_REFUSED_KEY, TERMINATION_MESSAGE_ENV
from kyai_testing import Faults, LLMDouble, ModelSpec, Rule, substring_judge

ROWS = [
    {"instruction": "What is the capital of France?", "ground_truth_response": "Paris"},
    {"instruction": "What is the capital of Peru?", "ground_truth_response": "Lima"},
]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    return path


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[Rule(model="judge", content=substring_judge), Rule(model="cand", content="Paris")],
    )
    with server.start_in_thread() as running:
        yield running


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_args(candidate: str, judge: str, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "run", "--endpoint", candidate, "--model", "cand", "--dataset", str(dataset),
        "--generation-prompt", "Answer.", "--judge-prompt", "Score it.",
        "--judge-endpoint", judge, "--judge-model", "judge", "--output", str(out), *extra,
    ]  # fmt: skip


def timed(args: list[str]) -> tuple[int, float]:
    started = time.monotonic()
    status = main(args)
    return status, time.monotonic() - started


def error_line(err: str, command: str = "run") -> str:
    lines = [line for line in err.splitlines() if line.startswith(f"kyai {command}: error: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_an_unreachable_judge_ends_the_run_before_one_candidate_request(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    out = tmp_path / "out"
    status, seconds = timed(run_args(double.url, f"http://127.0.0.1:{port}", dataset, out))
    err = capsys.readouterr().err
    assert status == 3, err
    assert seconds < 20, seconds  # 4 attempts, 1 + 2 + 4 s apart: well under a minute
    assert double.requests == []  # not one generation request
    assert not out.exists()
    # Each attempt is said, with what failed, the attempt and the next wait.
    assert [line for line in err.splitlines() if "; attempt " in line] == [
        f"kyai run: judge unreachable: connection refused; attempt {n} of 4, next in {wait} s"
        for n, wait in ((1, 1), (2, 2), (3, 4))
    ], err
    line = error_line(err)
    assert re.match(
        rf"kyai run: error: JudgeUnreachable: --judge-endpoint: Cannot reach "
        rf"http://127\.0\.0\.1:{port}/v1/models \(4 attempts in [0-9.]+ s\): connection "
        r"refused \(ClientConnectorError: ",
        line,
    ), line


def test_an_unreachable_candidate_says_so_quietly_and_asks_no_judge(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    args = run_args(f"http://127.0.0.1:{port}", double.url, dataset, tmp_path / "out",
                    "--quiet", "--max-retries", "1")  # fmt: skip
    status, seconds = timed(args)
    printed = capsys.readouterr()
    assert status == 3, printed.err
    assert seconds < 10, seconds
    # --quiet: the error, and nothing else.
    assert printed.out == ""
    assert re.match(
        rf"kyai run: error: CandidateUnreachable: --endpoint: Cannot reach "
        rf"http://127\.0\.0\.1:{port}/v1/models \(2 attempts in [0-9.]+ s\): connection "
        r"refused \(",
        printed.err,
    ), printed.err
    assert len(printed.err.splitlines()) == 1, printed.err
    assert double.requests == []


def test_an_unknown_host_is_named(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = "kyai-no-such-host.invalid"
    args = run_args(f"http://{host}:8000", double.url, dataset, tmp_path / "out",
                    "--max-retries", "0")  # fmt: skip
    status = main(args)
    err = capsys.readouterr().err
    assert status == 3, err
    line = error_line(err)
    assert line.startswith(
        f"kyai run: error: CandidateUnreachable: --endpoint: Cannot reach http://{host}:8000/v1"
        f"/models (1 attempt in "
    ), line
    assert f"s): cannot resolve the host {host} (" in line, line
    assert double.requests == []


@pytest.mark.parametrize("side", ["candidate", "judge"])
def test_a_refused_key_is_its_own_reason(
    side: str,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    candidate = LLMDouble(models=[ModelSpec("cand")], rules=[Rule(content="Paris")],
                          api_key="sk-cand-key")  # fmt: skip
    judge = LLMDouble(models=[ModelSpec("judge")], rules=[Rule(content=substring_judge)],
                      api_key="sk-judge-key", unauthorized_status=403)  # fmt: skip
    monkeypatch.setenv("CAND_KEY", "sk-cand-key" if side == "judge" else "sk-wrong")
    monkeypatch.setenv("JUDGE_KEY", "sk-judge-key" if side == "candidate" else "sk-wrong")
    with candidate.start_in_thread(), judge.start_in_thread():
        keys = ("--api-key-env", "CAND_KEY", "--judge-api-key-env", "JUDGE_KEY")
        args = run_args(candidate.url, judge.url, dataset, tmp_path / "out", *keys)
        status, seconds = timed(args)
        bases = {"candidate": candidate.base_url, "judge": judge.base_url}
    err = capsys.readouterr().err
    assert status == 3, err
    assert seconds < 5, seconds  # a refused key is not retried
    assert "attempt" not in err
    line = error_line(err)
    if side == "candidate":
        assert line == (
            f"kyai run: error: CandidateKeyRefused: --endpoint {bases['candidate']}/models "
            "refused the credentials (HTTP 401): Unauthorized (the candidate's key: "
            "--api-key-env CAND_KEY)"
        ), line
    else:
        assert line == (
            f"kyai run: error: JudgeKeyRefused: --judge-endpoint {bases['judge']}/models "
            "refused the credentials (HTTP 403): The API key is not allowed to use this model. "
            "(the judge's key: --judge-api-key-env JUDGE_KEY)"
        ), line
    assert "sk-wrong" not in err
    assert candidate.requests == [] and judge.requests == []


def test_a_candidate_model_not_served_is_its_own_reason(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = run_args(double.url, double.url, dataset, tmp_path / "out")
    args[args.index("--model") + 1] = "cand-large"
    assert main(args) == 3
    line = error_line(capsys.readouterr().err)
    assert line.startswith(
        "kyai run: error: CandidateModelNotServed: --model cand-large: the candidate model "
        f"'cand-large' is not served by {double.base_url} (its /v1/models lists 'cand', 'judge')"
    ), line
    assert double.requests == []


def test_two_failing_endpoints_lead_with_the_first_reason_and_list_both(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge_port, candidate_port = closed_port(), closed_port()
    args = run_args(f"http://127.0.0.1:{candidate_port}", f"http://127.0.0.1:{judge_port}",
                    dataset, tmp_path / "out", "--quiet", "--max-retries", "0")  # fmt: skip
    assert main(args) == 3
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0] == "kyai run: error: CandidateUnreachable: 2 problems, nothing was sent:", err
    assert lines[1].startswith(
        f"  - CandidateUnreachable: --endpoint: Cannot reach http://127.0.0.1:{candidate_port}/"
    )
    assert lines[2].startswith(
        f"  - JudgeUnreachable: --judge-endpoint: Cannot reach http://127.0.0.1:{judge_port}/"
    )


#: The statuses a gateway stand-in answered, in order.
SERVED = web.AppKey("served", list[int])


def gateway_stub(answers: list[tuple[int, str, str]]) -> web.Application:
    """Answers ``GET /v1/models`` as the judge gateway does: each of ``answers`` once, then
    the last one again (status, the gateway's reason code, its message)."""
    served: list[int] = []

    async def models(request: web.Request) -> web.Response:
        status, code, message = answers[min(len(served), len(answers) - 1)]
        served.append(status)
        if status == 200:
            return web.json_response({"object": "list", "data": [{"id": "judge"}]})
        body = {"error": {"message": message, "type": "api_error", "code": code}}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app[SERVED] = served
    return app


@pytest.fixture
def serve_app() -> Iterator[Any]:
    """Serve an aiohttp application on loopback from a thread; returns its base URL."""
    import asyncio

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    def serve(app: web.Application) -> str:
        async def start() -> str:
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            return f"http://127.0.0.1:{runner.addresses[0][1]}"

        return asyncio.run_coroutine_threadsafe(start(), loop).result(10)

    yield serve
    for runner in runners:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_the_default_judge_refusing_the_platforms_key_through_the_gateway(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    serve_app: Any,
) -> None:
    message = ("the default judge refused the platform's API key (HTTP 401); the platform team "
               "must fix defaultJudge.apiKeySecret")  # fmt: skip
    app = gateway_stub([(502, GATEWAY_REFUSED_KEY, message)])
    gateway = serve_app(app)
    status = main(run_args(double.url, gateway, dataset, tmp_path / "out"))
    err = capsys.readouterr().err
    assert status == 3, err
    assert app[SERVED] == [502]  # asked once: no retry cures the platform's key
    line = error_line(err)
    assert line == (
        f"kyai run: error: JudgeKeyRefused: --judge-endpoint {gateway}/v1/models: HTTP 502: "
        f"{message}. This is the platform's configuration, not this run's: nothing in the run "
        "can fix it."
    ), line
    assert double.requests == []


def test_a_judge_the_gateway_cannot_reach_is_unreachable_after_its_attempts(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    serve_app: Any,
) -> None:
    message = "the gateway cannot reach the default judge (ClientConnectorError)"
    app = gateway_stub([(502, "UpstreamUnreachable", message)])
    gateway = serve_app(app)
    args = run_args(double.url, gateway, dataset, tmp_path / "out", "--max-retries", "1")
    assert main(args) == 3
    err = capsys.readouterr().err
    assert app[SERVED] == [502, 502]
    assert f"kyai run: judge answered HTTP 502: {message}; attempt 1 of 2, next in 1 s" in err
    line = error_line(err)
    assert re.match(
        rf"kyai run: error: JudgeUnreachable: --judge-endpoint: Cannot reach {gateway}/v1/models "
        r"\(2 attempts in [0-9.]+ s\): HTTP 502: ",
        line,
    ), line
    assert line.endswith(f"HTTP 502: {message}"), line
    assert double.requests == []


def test_a_blip_is_tolerated(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    late = LLMDouble(models=[ModelSpec("judge")], rules=[Rule(content=substring_judge)], port=port)
    with ExitStack() as stack:
        # The judge starts listening a moment after the first attempt was refused.
        timer = threading.Timer(0.3, lambda: stack.enter_context(late.start_in_thread()))
        timer.start()
        try:
            status = main(
                run_args(double.url, f"http://127.0.0.1:{port}", dataset, tmp_path / "out")
            )
        finally:
            timer.join()
        judged = late.requests_for("judge")
    err = capsys.readouterr().err
    assert status == 0, err
    assert "kyai run: judge unreachable: connection refused; attempt 1 of 4, next in 1 s" in err
    assert "attempt 2 of 4" not in err
    assert double.requests_for("cand") and judged


def test_a_rejudge_checks_its_judge_before_reading_the_source(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "source"
    source.mkdir()  # not a generation directory: reading it would fail with exit 2
    port = closed_port()
    status = main([
        "judge", "--generations", str(source), "--judge-endpoint", f"http://127.0.0.1:{port}",
        "--judge-model", "judge", "--judge-prompt", "Score it.", "--output", str(tmp_path / "j"),
        "--max-retries", "0", "--quiet",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 3, err
    assert err.startswith("kyai judge: error: JudgeUnreachable: --judge-endpoint: Cannot reach "), (
        err
    )
    assert "run.json" not in err


def test_generate_checks_its_candidate_and_the_termination_message_leads_with_the_reason(
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "termination-log"
    log.write_bytes(b"")  # as the kubelet does before the container starts
    monkeypatch.setenv(TERMINATION_MESSAGE_ENV, str(log))
    port = closed_port()
    status = main([
        "generate", "--endpoint", f"http://127.0.0.1:{port}", "--model", "cand",
        "--dataset", str(dataset), "--generation-prompt", "Answer.",
        "--output", str(tmp_path / "out"), "--max-retries", "0", "--quiet",
    ])  # fmt: skip
    assert status == 3
    written = log.read_text(encoding="utf-8")
    assert written.startswith(
        "kyai generate: error: CandidateUnreachable: --endpoint: Cannot reach "
    ), written
    assert written.strip() == capsys.readouterr().err.strip()


def test_quiet_prints_the_result_line_only(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run_args(double.url, double.url, dataset, tmp_path / "out", "--quiet")) == 0
    printed = capsys.readouterr()
    assert printed.err == ""
    assert len(printed.out.splitlines()) == 1 and printed.out.startswith("avg_score=0.5000 ")


def test_retries_while_generating_are_said_and_reported_to_the_run(
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patches: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "kyai.evaluation._report.kubernetes_patcher", lambda namespace, name: patches.append
    )
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[Rule(model="judge", content=substring_judge), Rule(model="cand", content="Paris")],
        faults=Faults(rate=1.0, kinds=("503",), models=frozenset({"cand"})),
    )
    with server.start_in_thread() as double:
        args = run_args(double.url, double.url, dataset, tmp_path / "out", "--max-retries", "2",
                        "--concurrency", "1", "--report-run", "evals/run-1")  # fmt: skip
        assert main(args) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "; attempt " in line]
    assert said and all(
        line.startswith("kyai generate: candidate answered HTTP 503: Service Unavailable; attempt ")
        for line in said
    ), err
    assert any("attempt 1 of 3, next in " in line for line in said), err
    assert any("attempt 2 of 3, next in " in line for line in said), err
    messages = [
        patch["status"]["progress"].get("message")
        for patch in patches
        if "progress" in patch["status"]
    ]
    assert any(
        (message or "").startswith(
            "candidate answered HTTP 503: Service Unavailable; attempt 1 of 3, next in "
        )
        for message in messages
    ), messages
    assert messages[-1] is None  # cleared once the phase ended


def test_check_only_checks_and_sends_nothing(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([*run_args(double.url, double.url, dataset, out), "--check-only"]) == 0
    printed = capsys.readouterr()
    assert printed.out == (
        f"kyai run: checked: the candidate {double.url} serves 'cand'; the judge {double.url} "
        "serves 'judge'; nothing was sent\n"
    )
    assert double.requests == [] and not out.exists()
    # A judge Job's check, before anything was generated: the results directory is empty.
    results = tmp_path / "results"
    results.mkdir()
    port = closed_port()
    status = main([
        "judge", "--generations", str(results), "--judge-endpoint", f"http://127.0.0.1:{port}",
        "--judge-model", "judge", "--output", str(results), "--max-retries", "0", "--check-only",
    ])  # fmt: skip
    assert status == 3
    assert capsys.readouterr().err.startswith("kyai judge: error: JudgeUnreachable: ")
    assert list(results.iterdir()) == []


def test_a_key_the_server_echoes_is_in_no_retry_line(
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-echoed-9c1e7a55d2"
    patches: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "kyai.evaluation._report.kubernetes_patcher", lambda namespace, name: patches.append
    )
    monkeypatch.setenv("CAND_KEY", key)
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[Rule(model="judge", content=substring_judge), Rule(model="cand", content="Paris")],
        faults=Faults(rate=1.0, kinds=("503",), models=frozenset({"cand"})),
        api_key=key,
        echo_headers=True,  # its error answers quote the Authorization header
    )
    with server.start_in_thread() as double:
        keys = ("--api-key-env", "CAND_KEY", "--judge-api-key-env", "CAND_KEY")
        args = run_args(double.url, double.url, dataset, tmp_path / "out", "--max-retries", "1",
                        "--concurrency", "1", *keys, "--report-run", "evals/run-1")  # fmt: skip
        assert main(args) == 0
        echoed = [r.response for r in double.requests if r.response]
    err = capsys.readouterr().err
    assert echoed and key in json.dumps(echoed)  # the server did echo it
    assert "; attempt 1 of 2, next in " in err, err
    assert key not in err
    assert key not in json.dumps(patches)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)  # the kernel accepts; nobody reads or writes
        yield int(server.getsockname()[1])


def test_a_judge_that_never_answers_times_out_each_attempt(
    double: LLMDouble,
    dataset: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    silent_port: int,
) -> None:
    args = run_args(double.url, f"http://127.0.0.1:{silent_port}", dataset, tmp_path / "out",
                    "--max-retries", "1", "--request-timeout", "1")  # fmt: skip
    status, seconds = timed(args)
    err = capsys.readouterr().err
    assert status == 3, err
    assert seconds < 6, seconds  # two attempts of 1 s, 1 s apart
    assert "kyai run: judge timed out: no answer within 1 s; attempt 1 of 2, next in 1 s" in err
    assert re.search(
        rf"JudgeUnreachable: --judge-endpoint: Cannot reach http://127\.0\.0\.1:{silent_port}"
        r"/v1/models \(2 attempts in [0-9.]+ s\): no answer within 1 s$",
        error_line(err),
    ), err
    assert double.requests == []
