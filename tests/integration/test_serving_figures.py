"""Serving figures end to end: ``kyai`` against engine stand-ins and the double, with the
engines' own histograms (``--server-metrics``) beside the client's, and on the command line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kyai.cli import main
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge

GEN_PROMPT = "Answer with the bare answer only."
JUDGE_PROMPT = 'Return JSON {"score": 0..1, "reasoning": "..."}.'
ANSWER = "word" * 20  # 20 tokens
ROWS = 8


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    rows = [
        {"instruction": f"Q{n}: the word?", "ground_truth_response": "word"} for n in range(ROWS)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


STANDIN_ARGV = {
    "vllm": ["vllm", "serve", "org/cand", "--served-model-name", "cand", "--host", "127.0.0.1"],
    "sglang": [
        "python3",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "org/cand",
        "--served-model-name",
        "cand",
        "--host",
        "127.0.0.1",
        "--enable-metrics",
    ],
}


@pytest.fixture(params=sorted(STANDIN_ARGV))
def standin(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A stand-in answering 20 tokens, 200 ms to the first and 10 ms per further token."""
    port = free_port()
    env = {
        **os.environ,
        "KYAI_STANDIN_LOAD_SECONDS": "0",
        "KYAI_STANDIN_TTFT_MS": "200",
        "KYAI_STANDIN_TOKEN_MS": "10",
        "KYAI_STANDIN_ANSWER": ANSWER,
    }
    argv = [*STANDIN_ARGV[request.param], "--port", str(port)]
    process = subprocess.Popen(
        [sys.executable, "-m", "kyai_testing.engines", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.05)
        yield request.param, url
    finally:
        process.terminate()
        process.communicate(timeout=10)


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
        "--concurrency",
        "4",
        "--output",
        str(out),
        "--quiet",
        *extra,
    ]


def run_serving(out: Path) -> dict[str, Any]:
    block: dict[str, Any] = json.loads((out / "run.json").read_text())["generation"]["serving"]
    return block


def test_client_and_engine_figures_agree_on_loopback(
    standin: tuple[str, str], dataset: Path, tmp_path: Path
) -> None:
    engine, url = standin
    out = tmp_path / "out"
    args = generate_args(url, dataset, out, "--server-metrics", f"{url}/metrics", "--gpus", "2")
    assert main(args) == 0
    block = run_serving(out)
    server = block["server"]
    assert server["families"][0] == f"{engine}:time_to_first_token_seconds"
    assert (block["requests"], server["requests"]) == (ROWS, ROWS)
    assert block["output_tokens"] == server["output_tokens"] == ROWS * 20
    for figure in ("ttft_ms", "e2e_ms", "itl_ms"):
        client, engine_side = block[figure]["mean"], server[figure]["mean"]
        # Within 10 %, plus what the client's loopback and event loop add on a loaded machine
        # (three test workers on two cores: 21 ms was seen on a 200 ms TTFT); a gap between
        # tokens (10 ms) is measured at both ends alike.
        slack = 0.10 * engine_side + (3.0 if figure == "itl_ms" else 25.0)
        assert abs(client - engine_side) <= slack, (figure, client, engine_side)
    assert 200.0 <= server["ttft_ms"]["mean"] < 260.0
    assert block["gpu_seconds"] == pytest.approx(2 * block["wall_seconds"], abs=0.002)
    history = json.loads((out / "run.json").read_text())["history"]
    assert history[-1]["serving"] == block


def test_events_batched_in_reads_show_as_vllm_bench_counts_them_beside_the_engines_itl(
    llm_double_thread: Any, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Five events per write (the role chunk and four tokens, then four and four ...): every
    event is timed on its own, as vllm bench's client times it, so the client's ITL
    distribution is mostly the time between events of one read (tiny, never 0) while the
    engine's own ITL stays the pacing (10 ms): both stand side by side in the block and on the
    result line. Timed per read (before), the client's p50 was exactly 0.0."""
    double = llm_double_thread(
        models=[ModelSpec("cand")],
        rules=[Rule(content=ANSWER)],
        ttft_s=0.02,
        token_s=0.01,
        events_per_write=4,
    )
    out = tmp_path / "out"
    assert (
        main(generate_args(double.url, dataset, out, "--server-metrics", f"{double.url}/metrics"))
        == 0
    )
    block = run_serving(out)
    client, engine = block["itl_ms"], block["server"]["itl_ms"]
    assert 0.0 < client["p50"] < 2.0, client  # three gaps in four are inside one read
    assert 8.0 <= engine["mean"] < 10.0 + 5.0, engine  # the engine stamps each token when due
    # The gaps add up to the time between the first and last choice chunk: per answer, the
    # mean ITL is (E2E - TTFT) / gaps, 20 gaps (the role chunk's and 19 tokens') for 20 tokens.
    stored = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    for record in stored:
        expected = (record["latency_ms"] - record["ttft_ms"]) / 20
        assert record["itl_ms_mean"] == pytest.approx(expected, abs=0.01), record
    line = capsys.readouterr().err
    assert f"itl_p50_ms={client['p50']:.1f} engine_itl_p50_ms={engine['p50']:.1f}" in line


def test_unreachable_metrics_warn_and_the_run_goes_on(
    dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with LLMDouble(models=[ModelSpec("cand")]).start_in_thread() as double:
        closed = f"http://127.0.0.1:{free_port()}/metrics"
        out = tmp_path / "out"
        assert main(generate_args(double.url, dataset, out, "--server-metrics", closed)) == 0
        no_route = f"{double.url}/no-metrics-here"
        again = tmp_path / "again"
        assert main(generate_args(double.url, dataset, again, "--server-metrics", no_route)) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2  # once per run
    assert f"The engine's metrics at {closed} cannot be read" in warnings[0]
    assert "HTTP 404" in warnings[1]
    for directory in (out, again):
        block = run_serving(directory)
        assert "server" not in block
        assert block["requests"] == ROWS


@pytest.fixture
def double() -> Iterator[LLMDouble]:
    server = LLMDouble(
        models=[ModelSpec("cand"), ModelSpec("judge")],
        rules=[Rule(model="cand", content=ANSWER), Rule(model="judge", content=substring_judge)],
        ttft_s=0.02,
        token_s=0.002,
    )
    with server.start_in_thread() as running:
        yield running


def judge_args(double: LLMDouble, generations: Path, out: Path) -> list[str]:
    return [
        "judge",
        "--generations",
        str(generations),
        "--judge-endpoint",
        double.url,
        "--judge-model",
        "judge",
        "--output",
        str(out),
    ]


def test_run_and_judge_print_and_store_the_serving_block(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = ["--server-metrics", f"{double.url}/metrics", "--gpus", "1"]
    generated = tmp_path / "gen"
    assert main(generate_args(double.url, dataset, generated, *metrics)) == 0
    assert "ttft_p50_ms=" in capsys.readouterr().err  # the "generated ..." line
    judged = tmp_path / "judged"
    assert main(judge_args(double, generated, judged)) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads((judged / "summary.json").read_text())
    block = run_serving(generated)
    assert summary["serving"] == block  # kyai judge reads the generation phase's figures
    assert f"ttft_p50_ms={block['ttft_ms']['p50']:.1f}" in line
    assert f"output_tokens_per_s={block['output_tokens_per_second']:.1f}" in line
    assert summary["serving"]["server"]["requests"] == ROWS

    run_dir = tmp_path / "run"
    run = generate_args(double.url, dataset, run_dir, *metrics)
    run[0] = "run"
    run += ["--judge-endpoint", double.url, "--judge-model", "judge"]
    run.remove("--quiet")
    assert main(run) == 0
    run_summary = json.loads((run_dir / "summary.json").read_text())
    assert run_summary["serving"] == run_serving(run_dir)
    assert run_summary["serving"]["streamed"] is True
    assert "ttft_p50_ms=" in capsys.readouterr().out


def test_no_stream_and_a_finished_directory_keep_their_figures(
    double: LLMDouble, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(generate_args(double.url, dataset, out, "--no-stream")) == 0
    block = run_serving(out)
    lines = (out / "generations.jsonl").read_text().splitlines()
    assert not any(json.loads(line)["streamed"] for line in lines)
    assert block["streamed"] is False and block["ttft_ms"]["p50"] is None
    assert block["output_tokens"] == ROWS * 20
    # Nothing left to ask: the figures of the phase that measured stay.
    assert main(generate_args(double.url, dataset, out)) == 0
    assert run_serving(out) == block
    assert main(judge_args(double, out, out)) == 0
    assert "ttft_p50_ms=n/a" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--server-metrics", "ftp://engine/metrics"], "--server-metrics"),
        (["--server-metrics", "metrics"], "--server-metrics"),
        (["--gpus", "0"], "--gpus"),
        (["--gpus", "two"], "--gpus"),
    ],
)
def test_bad_serving_flags_exit_2_naming_the_flag(
    flags: list[str], named: str, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(generate_args("http://127.0.0.1:9", dataset, tmp_path / "out", *flags))
    assert caught.value.code == 2
    assert f"argument {named}" in capsys.readouterr().err


def test_the_engines_figures_are_the_runs_own_after_earlier_traffic(
    llm_double_thread: Any, dataset: Path, tmp_path: Path
) -> None:
    """Warm-up traffic and an earlier run on the same engine are not the run's figures.

    The engine's histograms are cumulative; ``serving.server`` must be the difference between
    the scrapes before and after the phase: the run's requests, tokens and latencies only.
    """
    double = llm_double_thread(
        models=[ModelSpec("cand")],
        rules=[
            # Warm-up: slow (300 ms before the first token) and long (40 tokens).
            Rule(match="warm up", delay_s=0.3, content="warm" * 40),
            Rule(content=ANSWER),  # the run's rows: 20 tokens, at once
        ],
    )
    metrics = f"{double.url}/metrics"
    with httpx.Client(timeout=10) as http:
        for number in range(6):
            body = {"model": "cand", "messages": [{"role": "user", "content": f"warm up {number}"}]}
            assert http.post(f"{double.base_url}/chat/completions", json=body).status_code == 200
    blocks = []
    for name in ("first", "second"):  # the second run follows the first on the same engine
        out = tmp_path / name
        assert main(generate_args(double.url, dataset, out, "--server-metrics", metrics)) == 0
        blocks.append(run_serving(out))
    for block in blocks:
        server = block["server"]
        assert server["requests"] == ROWS == block["requests"]
        assert server["output_tokens"] == ROWS * 20 == block["output_tokens"]
        # Not one warm-up request (>= 300 ms to its first token) in the engine's TTFT.
        assert server["ttft_ms"]["mean"] < 150.0, server["ttft_ms"]
        assert server["e2e_ms"]["mean"] < 150.0, server["e2e_ms"]
        assert server["ttft_ms"]["mean"] <= block["ttft_ms"]["mean"] + 1.0
