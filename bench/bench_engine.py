"""Throughput and memory benchmark of the evaluation engine (``make bench``).

0. Client throughput: ``kyai generate`` (its generation phase, in a child process) against a
   minimal aiohttp client, 5,000 rows against a 1 ms stand-in (the LLM double in its own
   process) at concurrency 16, 64 and 256: wall time, the kyai/aiohttp ratio and CPU
   milliseconds per row. Two variants: whole answers (``kyai generate --no-stream`` against
   a client reading JSON answers), and streamed answers of 20 tokens each (the stand-in
   sends them back to back after 1 ms) against a minimal streaming client that times and
   parses every event as ``vllm bench serve``'s client does.
1. Concurrency: ``kyai run`` (a subprocess, so its peak RSS can be measured) on a
   100-row custom dataset against the LLM double answering after 200 ms, at concurrency 1,
   4, 16 and 64: wall time of the generation and judge phases (``summary.json``), the ideal
   ``ceil(rows / concurrency) * latency``, their ratio, and peak RSS.
2. lm-evaluation-harness: the same rows through ``lm_eval --model local-chat-completions``
   against the same double, side by side with kyai's generation phase. lm-eval (~650 MB) is
   installed on first use into ``.venv-bench``; when that fails the bench says why and goes on.
3. Memory: a 10,000-row dataset through ``kyai generate`` and ``kyai judge`` at concurrency 64
   with no latency: peak RSS and wall time.

``--quick`` is a smoke run (fewer rows, lower latency; lm-eval only if already installed).
Every child process has a deadline, so the bench always stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kyai_testing import ChatRequest, LLMDouble, ModelSpec, Rule, substring_judge

ROOT = Path(__file__).resolve().parent.parent
BENCH_VENV = ROOT / ".venv-bench"
LM_EVAL = BENCH_VENV / "bin" / "lm_eval"
CANDIDATE = "bench-candidate"
JUDGE = "bench-judge"

GENERATION_PROMPT = "Answer the arithmetic question. End with 'The answer is N.'"
JUDGE_PROMPT = (
    "You are a strict grader. Compare the candidate response with the ground truth. "
    'Reply with only JSON: {"score": <0 or 1>, "reasoning": "<one sentence>"}.'
)

# A paragraph of context so that prompts have a realistic size (about 100 tokens).
FILLER = (
    "Read the question carefully, work it out step by step, and state the final answer "
    "plainly at the end. Do not add anything after the final answer. "
)
QUESTION = re.compile(r"what is (\d+) plus (\d+)\?")


# -- the double ----------------------------------------------------------------------------


def answer_arithmetic(request: ChatRequest) -> str:
    """The scripted candidate: works out ``a plus b`` and explains a little."""
    found = QUESTION.search(request.last_user_message)
    if found is None:
        return "I cannot tell what is being asked."
    a, b = int(found.group(1)), int(found.group(2))
    return (
        f"Adding {a} and {b} gives {a + b}; checking by subtraction confirms it. "
        f"The answer is {a + b}."
    )


def bench_double(latency_s: float) -> LLMDouble:
    return LLMDouble(
        models=[ModelSpec(CANDIDATE, max_model_len=8192), ModelSpec(JUDGE, max_model_len=8192)],
        rules=[
            Rule(model=JUDGE, content=substring_judge),
            Rule(model=CANDIDATE, content=answer_arithmetic),
        ],
        latency_s=latency_s,
    )


def write_dataset(path: Path, rows: int) -> Path:
    with path.open("w", encoding="utf-8") as handle:
        for index in range(rows):
            a, b = 1000 + 37 * index, 20_000 + 113 * index
            record = {
                "instruction": f"{FILLER}Question {index}: what is {a} plus {b}?",
                "ground_truth_response": str(a + b),
                "external_row_id": f"q{index:05d}",
            }
            handle.write(json.dumps(record) + "\n")
    return path


def serving_span(double: LLMDouble, model: str) -> float | None:
    """Seconds from the first request's arrival to the last answer, for ``model``."""
    records = [r for r in double.requests_for(model) if r.finished is not None]
    if not records:
        return None
    return max(r.finished or 0.0 for r in records) - min(r.started for r in records)


# -- measured subprocesses -----------------------------------------------------------------


@dataclass
class Measured:
    command: list[str]
    wall_s: float
    peak_rss_mb: float
    returncode: int
    timed_out: bool
    stdout: str = field(repr=False, default="")
    stderr: str = field(repr=False, default="")

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str:
        tail = (self.stderr or self.stdout).strip().splitlines()[-8:]
        why = "timed out" if self.timed_out else f"exit status {self.returncode}"
        return f"{' '.join(self.command[:3])} … {why}:\n    " + "\n    ".join(tail)


def run_measured(
    command: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None
) -> Measured:
    """Run a child to completion (killed at ``timeout_s``): wall time and its own peak RSS.

    ``os.wait4`` gives the rusage of that one child (``ru_maxrss`` in KiB on Linux).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        process = subprocess.Popen(
            list(command), stdout=out, stderr=err, env=env, start_new_session=True, cwd=ROOT
        )
        reaped: dict[str, Any] = {}

        def reap() -> None:
            _, status, usage = os.wait4(process.pid, 0)
            reaped.update(status=status, usage=usage, ended=time.monotonic())

        waiter = threading.Thread(target=reap, daemon=True)
        waiter.start()
        waiter.join(timeout_s)
        timed_out = waiter.is_alive()
        if timed_out:
            os.killpg(process.pid, signal.SIGKILL)
            waiter.join(30)
        process.returncode = os.waitstatus_to_exitcode(reaped["status"])
        out.seek(0)
        err.seek(0)
        return Measured(
            command=list(command),
            wall_s=reaped["ended"] - started,
            peak_rss_mb=reaped["usage"].ru_maxrss / 1024,
            returncode=process.returncode,
            timed_out=timed_out,
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def kyai(*args: str) -> list[str]:
    return [sys.executable, "-m", "kyai.cli", *args]


# -- part 0: client throughput against a 1 ms stand-in ---------------------------------------

THROUGHPUT_LATENCY_S = 0.001
#: The streamed variant's answer: 20 tokens of the double's tokenizer (4 characters each).
STREAMED_ANSWER = "The answer is 12345." * 4


@dataclass
class ThroughputResult:
    client: str
    concurrency: int
    rows: int
    wall_s: float | None
    cpu_s: float | None
    errors: int | None
    error: str | None = None
    stream: bool = False

    @property
    def cpu_ms_per_row(self) -> float | None:
        return None if self.cpu_s is None else self.cpu_s * 1000 / self.rows


def _chat_body(instruction: str, *, stream: bool) -> dict[str, Any]:
    """The baselines' request: what kyai generate sends for a row (streamed: with usage)."""
    body: dict[str, Any] = {
        "model": CANDIDATE,
        "messages": [
            {"role": "system", "content": GENERATION_PROMPT},
            {"role": "user", "content": instruction},
        ],
        "max_tokens": 256,
    }
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


async def _aiohttp_baseline(url: str, rows: Sequence[str], concurrency: int) -> int:
    """The minimal aiohttp client kyai is measured against: N workers, one session."""
    import aiohttp

    queue: list[str] = list(reversed(rows))
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            while queue:
                body = _chat_body(queue.pop(), stream=False)
                async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                    answer = await response.json()
                    errors += response.status != 200 or not answer.get("choices")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


async def _aiohttp_stream_baseline(url: str, rows: Sequence[str], concurrency: int) -> int:
    """The minimal streaming client: as vllm bench serve's, it times and parses every event."""
    import aiohttp

    queue: list[str] = list(reversed(rows))
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal errors
            while queue:
                body = _chat_body(queue.pop(), stream=True)
                sent = last = time.perf_counter()
                ttft: float | None = None
                gaps: list[float] = []
                text: list[str] = []
                buffer = b""
                async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                    async for chunk in response.content.iter_any():
                        now = time.perf_counter()
                        *lines, buffer = (buffer + chunk).split(b"\n")
                        for line in lines:
                            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                                continue
                            choices = json.loads(line[6:]).get("choices")
                            piece = choices[0]["delta"].get("content") if choices else None
                            if piece:
                                if ttft is None:
                                    ttft = now - sent
                                else:
                                    gaps.append(now - last)
                                last = now
                                text.append(piece)
                errors += response.status != 200 or "".join(text) != STREAMED_ANSWER

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return errors


def throughput_client(args: argparse.Namespace) -> int:
    """One measured client run (a child of the bench): prints wall and CPU seconds as JSON."""
    rows = [
        json.loads(line)["instruction"]
        for line in args.dataset.read_text(encoding="utf-8").splitlines()
    ]
    errors: int
    if args.throughput_client == "aiohttp":
        baseline = _aiohttp_stream_baseline if args.stream else _aiohttp_baseline
        cpu0, wall0 = time.process_time(), time.perf_counter()
        errors = asyncio.run(baseline(args.url, rows, args.concurrency))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    else:
        from kyai.datasets import load_dataset
        from kyai.evaluation import CandidateConfig, generate

        dataset = load_dataset(str(args.dataset), generation_prompt=GENERATION_PROMPT)
        config = CandidateConfig(
            args.url, CANDIDATE, concurrency=args.concurrency, stream=args.stream
        )
        cpu0, wall0 = time.process_time(), time.perf_counter()
        outcome = asyncio.run(generate(dataset, args.workdir, config))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        errors = outcome.errors
        if args.stream and (outcome.serving or {}).get("output_tokens") != 20 * len(rows):
            errors += 1  # every answer must have come streamed, whole
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "errors": errors}))
    return 0


def start_stand_in(work: Path, *answer: str) -> tuple[subprocess.Popen[bytes], str]:
    """The 1 ms stand-in: the LLM double in its own process (so it does not share the client's)."""
    ready = work / "stand-in.url"
    ready.unlink(missing_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kyai_testing.llm_double",
            "--model",
            CANDIDATE,
            "--max-model-len",
            "0",
            "--latency",
            str(THROUGHPUT_LATENCY_S),
            "--ready-file",
            str(ready),
            *(("--answer", answer[0]) if answer else ()),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text().strip():
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("the stand-in server did not start")
        time.sleep(0.05)
    return process, ready.read_text().strip()


def _throughput_once(
    work: Path,
    url: str,
    dataset: Path,
    client: str,
    concurrency: int,
    attempt: int,
    stream: bool,
) -> ThroughputResult:
    out = work / f"throughput-{client}-{concurrency}-{attempt}-{stream}"
    measured = run_measured(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--throughput-client",
            client,
            "--url",
            url,
            "--dataset",
            str(dataset),
            "--workdir",
            str(out),
            "--concurrency",
            str(concurrency),
            *(("--stream",) if stream else ()),
        ],
        timeout_s=300,
    )
    shutil.rmtree(out, ignore_errors=True)
    if not measured.ok:
        failure = measured.failure()
        return ThroughputResult(client, concurrency, 0, None, None, None, failure, stream)
    figures = json.loads(measured.stdout.strip().splitlines()[-1])
    return ThroughputResult(
        client, concurrency, 0, figures["wall_s"], figures["cpu_s"], figures["errors"], None, stream
    )


def bench_throughput(
    work: Path, *, rows: int, levels: Sequence[int], repeats: int, stream: bool = False
) -> list[ThroughputResult]:
    """kyai generate vs a minimal aiohttp client, each the best of ``repeats`` runs."""
    dataset = write_dataset(work / f"throughput-{rows}.jsonl", rows)
    server, url = start_stand_in(work, *((STREAMED_ANSWER,) if stream else ()))
    results: list[ThroughputResult] = []
    try:
        for concurrency in levels:
            best: dict[str, ThroughputResult] = {}
            # The clients take turns, so that both see the same background load.
            for attempt in range(repeats):
                for client in ("aiohttp", "kyai"):
                    if best.get(client) is not None and best[client].error is not None:
                        continue
                    result = _throughput_once(
                        work, url, dataset, client, concurrency, attempt, stream
                    )
                    result.rows = rows
                    previous = best.get(client)
                    if (
                        previous is None
                        or result.error is not None
                        or ((result.wall_s or 0) < (previous.wall_s or 0))
                    ):
                        best[client] = result
            for client in ("aiohttp", "kyai"):
                result = best[client]
                print(
                    f"  {'streamed' if stream else 'whole':8s} {client:8s} conc {concurrency:4d}: "
                    + (
                        f"{fmt(result.wall_s)} s, {fmt(result.cpu_ms_per_row, 3)} ms CPU/row"
                        if result.error is None
                        else result.error
                    ),
                    flush=True,
                )
                results.append(result)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    return results


def throughput_report(results: Sequence[ThroughputResult]) -> str:
    if not results:
        return ""
    by_key = {(r.stream, r.client, r.concurrency): r for r in results}
    rows = []
    for stream, level in sorted({(r.stream, r.concurrency) for r in results}):
        base, ours = by_key.get((stream, "aiohttp", level)), by_key.get((stream, "kyai", level))
        if base is None or ours is None:
            continue
        rows.append(
            [
                "streamed" if stream else "whole",
                str(level),
                fmt(base.wall_s),
                fmt(ours.wall_s),
                ratio(ours.wall_s, base.wall_s),
                fmt(base.cpu_ms_per_row, 3),
                fmt(ours.cpu_ms_per_row, 3),
                str(ours.errors if ours.errors is not None else "-"),
            ]
        )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    lines = [
        f"\n0. client throughput: {results[0].rows} rows against a "
        f"{THROUGHPUT_LATENCY_S * 1000:.0f} ms stand-in (its own process); "
        "kyai = the generation phase, aiohttp = a minimal client; whole = JSON answers, "
        "streamed = 20 tokens per answer as server-sent events, each timed and parsed; best "
        f"of the repeats (each client's fastest run, its CPU from that run); load average now "
        f"{load} on {os.cpu_count()} CPUs",
        table(
            [
                "answers",
                "conc",
                "aiohttp s",
                "kyai s",
                "kyai/aiohttp",
                "aiohttp CPU ms/row",
                "kyai CPU ms/row",
                "kyai errors",
            ],
            rows,
        ),
    ]
    lines += [f"   {r.client} conc {r.concurrency}: {r.error}" for r in results if r.error]
    return "\n".join(lines)


# -- part 1: concurrency -------------------------------------------------------------------


@dataclass
class ConcurrencyResult:
    concurrency: int
    rows: int
    latency_s: float
    generation_s: float | None
    judging_s: float | None
    ideal_s: float
    peak_rss_mb: float
    wall_s: float
    generation_span_s: float | None
    max_in_flight: int
    avg_score: float | None
    error: str | None = None


def phase_seconds(summary: dict[str, Any], phase: str) -> float | None:
    section = summary.get(phase)
    value = section.get("wall_seconds") if isinstance(section, dict) else None
    return float(value) if isinstance(value, int | float) else None


def bench_concurrency(
    double: LLMDouble,
    dataset: Path,
    work: Path,
    *,
    rows: int,
    latency_s: float,
    levels: Sequence[int],
) -> list[ConcurrencyResult]:
    results = []
    for level in levels:
        out = work / f"run-c{level}"
        double.reset()
        timeout = 120 + 4 * math.ceil(rows / level) * max(latency_s, 0.05) * 3
        measured = run_measured(
            kyai(
                "run",
                "--endpoint", double.base_url,
                "--model", CANDIDATE,
                "--dataset", str(dataset),
                "--generation-prompt", GENERATION_PROMPT,
                "--judge-endpoint", double.base_url,
                "--judge-model", JUDGE,
                "--judge-prompt", JUDGE_PROMPT,
                "--concurrency", str(level),
                "--output", str(out),
                "--quiet",
            ),
            timeout_s=timeout,
        )  # fmt: skip
        summary: dict[str, Any] = {}
        if (out / "summary.json").exists():
            summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
        generation, judging = (
            phase_seconds(summary, "generation"),
            phase_seconds(summary, "judging"),
        )
        error = None if measured.ok else measured.failure()
        if measured.ok and (generation is None or judging is None):
            # No per-phase times in summary.json: time the phases as separate commands.
            generation, judging, error = time_phases_separately(
                double, dataset, work, level, timeout
            )
        results.append(
            ConcurrencyResult(
                concurrency=level,
                rows=rows,
                latency_s=latency_s,
                generation_s=generation,
                judging_s=judging,
                ideal_s=math.ceil(rows / level) * latency_s,
                peak_rss_mb=measured.peak_rss_mb,
                wall_s=measured.wall_s,
                generation_span_s=serving_span(double, CANDIDATE),
                max_in_flight=double.max_in_flight,
                avg_score=summary.get("avg_score"),
                error=error,
            )
        )
        print(f"  concurrency {level:>3}: done in {measured.wall_s:.1f}s", flush=True)
    return results


def time_phases_separately(
    double: LLMDouble, dataset: Path, work: Path, level: int, timeout: float
) -> tuple[float | None, float | None, str | None]:
    generations, judged = work / f"gen-c{level}", work / f"judge-c{level}"
    gen = run_measured(
        kyai(
            "generate", "--endpoint", double.base_url, "--model", CANDIDATE,
            "--dataset", str(dataset), "--generation-prompt", GENERATION_PROMPT,
            "--judge-prompt", JUDGE_PROMPT, "--concurrency", str(level),
            "--output", str(generations), "--quiet",
        ),
        timeout_s=timeout,
    )  # fmt: skip
    if not gen.ok:
        return None, None, gen.failure()
    judge = run_measured(
        kyai(
            "judge", "--generations", str(generations), "--judge-endpoint", double.base_url,
            "--judge-model", JUDGE, "--judge-prompt", JUDGE_PROMPT,
            "--concurrency", str(level), "--output", str(judged), "--quiet",
        ),
        timeout_s=timeout,
    )  # fmt: skip
    return gen.wall_s, judge.wall_s, (None if judge.ok else judge.failure())


# -- part 2: lm-evaluation-harness ---------------------------------------------------------


def ensure_lm_eval(*, install: bool) -> str | None:
    """None when ``lm_eval`` is ready in .venv-bench, else why it is not."""
    if LM_EVAL.exists():
        return None
    if not install:
        return f"lm-eval is not installed in {BENCH_VENV} (--quick does not install it)"
    print(f"  installing lm-eval into {BENCH_VENV} (first use, ~650 MB) …", flush=True)
    steps = [
        [shutil.which("python3") or "python3", "-m", "venv", str(BENCH_VENV)],
        [str(BENCH_VENV / "bin" / "pip"), "install", "--quiet", "lm-eval[api]"],
    ]
    for step in steps:
        done = run_measured(step, timeout_s=1800)
        if not done.ok:
            return f"installing lm-eval failed: {done.failure()}"
    return None if LM_EVAL.exists() else f"{LM_EVAL} missing after installation"


def write_lm_eval_task(directory: Path, dataset: Path) -> str:
    name = "kyai_bench_arith"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.yaml").write_text(
        "\n".join(
            [
                f"task: {name}",
                "dataset_path: json",
                "dataset_name: null",
                "dataset_kwargs:",
                f"  data_files: {json.dumps(str(dataset))}",
                "test_split: train",
                "output_type: generate_until",
                'doc_to_text: "{{instruction}}"',
                'doc_to_target: "{{ground_truth_response}}"',
                "generation_kwargs:",
                "  until: []",
                "  max_gen_toks: 256",
                "metric_list:",
                "  - metric: exact_match",
                "    aggregation: mean",
                "    higher_is_better: true",
                "metadata:",
                "  version: 1.0",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return name


@dataclass
class LmEvalResult:
    concurrency: int
    lm_eval_wall_s: float | None
    lm_eval_span_s: float | None
    lm_eval_peak_rss_mb: float | None
    kyai_generation_s: float | None
    kyai_span_s: float | None
    max_in_flight: int
    error: str | None = None


def bench_lm_eval(
    double: LLMDouble,
    dataset: Path,
    work: Path,
    kyai_results: Sequence[ConcurrencyResult],
    *,
    install: bool,
) -> tuple[list[LmEvalResult], str | None]:
    why = ensure_lm_eval(install=install)
    if why is not None:
        return [], why
    task = write_lm_eval_task(work / "lm_eval_tasks", dataset)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(work / "hf-home"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    results = []
    for row in kyai_results:
        double.reset()
        measured = run_measured(
            [
                str(LM_EVAL),
                "--model", "local-chat-completions",
                "--model_args",
                f"model={CANDIDATE},base_url={double.base_url}/chat/completions,"
                f"num_concurrent={row.concurrency},tokenized_requests=False,max_retries=1",
                "--apply_chat_template",
                "--tasks", task,
                "--include_path", str(work / "lm_eval_tasks"),
                "--output_path", str(work / f"lm_eval-c{row.concurrency}"),
            ],
            timeout_s=300 + 4 * math.ceil(row.rows / row.concurrency) * row.latency_s,
            env=env,
        )  # fmt: skip
        served = len(double.requests_for(CANDIDATE))
        error = None if measured.ok else measured.failure()
        if measured.ok and served != row.rows:
            error = f"lm_eval sent {served} requests for {row.rows} rows"
        results.append(
            LmEvalResult(
                concurrency=row.concurrency,
                lm_eval_wall_s=measured.wall_s,
                lm_eval_span_s=serving_span(double, CANDIDATE),
                lm_eval_peak_rss_mb=measured.peak_rss_mb,
                kyai_generation_s=row.generation_s,
                kyai_span_s=row.generation_span_s,
                max_in_flight=double.max_in_flight,
                error=error,
            )
        )
        print(
            f"  lm_eval concurrency {row.concurrency:>3}: done in {measured.wall_s:.1f}s",
            flush=True,
        )
    return results, None


# -- part 3: memory ------------------------------------------------------------------------


@dataclass
class MemoryResult:
    command: str
    rows: int
    concurrency: int
    wall_s: float
    peak_rss_mb: float
    requests_per_s: float
    max_in_flight: int
    error: str | None = None


def bench_memory(
    double: LLMDouble, work: Path, *, rows: int, concurrency: int
) -> list[MemoryResult]:
    dataset = write_dataset(work / f"memory-{rows}.jsonl", rows)
    generations, judged = work / "memory-gen", work / "memory-judge"
    timeout = 120 + rows * 0.1
    commands = {
        "kyai generate": kyai(
            "generate", "--endpoint", double.base_url, "--model", CANDIDATE,
            "--dataset", str(dataset), "--generation-prompt", GENERATION_PROMPT,
            "--judge-prompt", JUDGE_PROMPT, "--concurrency", str(concurrency),
            "--output", str(generations), "--quiet",
        ),
        "kyai judge": kyai(
            "judge", "--generations", str(generations), "--judge-endpoint", double.base_url,
            "--judge-model", JUDGE, "--judge-prompt", JUDGE_PROMPT,
            "--concurrency", str(concurrency), "--output", str(judged), "--quiet",
        ),
    }  # fmt: skip
    results = []
    for name, command in commands.items():
        double.reset()
        measured = run_measured(command, timeout_s=timeout)
        results.append(
            MemoryResult(
                command=name,
                rows=rows,
                concurrency=concurrency,
                wall_s=measured.wall_s,
                peak_rss_mb=measured.peak_rss_mb,
                requests_per_s=len(double.requests) / measured.wall_s if measured.wall_s else 0.0,
                max_in_flight=double.max_in_flight,
                error=None if measured.ok else measured.failure(),
            )
        )
        print(f"  {name}: done in {measured.wall_s:.1f}s", flush=True)
        if not measured.ok:
            break
        double.requests.clear()  # the double's own records are not what is measured
    return results


# -- report --------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(value: float | None, ideal: float | None) -> str:
    return "-" if value is None or not ideal else f"{value / ideal:.2f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, rule, *body])


def report(
    concurrency: Sequence[ConcurrencyResult],
    lm_eval: Sequence[LmEvalResult],
    lm_eval_skipped: str | None,
    memory: Sequence[MemoryResult],
) -> str:
    parts = []
    if concurrency:
        first = concurrency[0]
        parts.append(
            f"\n1. kyai run: {first.rows} rows, {first.latency_s * 1000:.0f} ms per request, "
            "ideal = ceil(rows / concurrency) x latency per phase"
        )
        parts.append(
            table(
                [
                    "conc",
                    "gen s",
                    "ideal s",
                    "gen/ideal",
                    "judge s",
                    "judge/ideal",
                    "in flight",
                    "peak RSS MB",
                    "avg_score",
                ],
                [
                    [
                        str(r.concurrency),
                        fmt(r.generation_s),
                        fmt(r.ideal_s),
                        ratio(r.generation_s, r.ideal_s),
                        fmt(r.judging_s),
                        ratio(r.judging_s, r.ideal_s),
                        str(r.max_in_flight),
                        fmt(r.peak_rss_mb, 1),
                        fmt(r.avg_score, 3),
                    ]
                    for r in concurrency
                ],
            )
        )
        parts += [f"   conc {r.concurrency}: {r.error}" for r in concurrency if r.error]
    parts.append(
        "\n2. lm-evaluation-harness (local-chat-completions) vs kyai generation, same double"
    )
    if lm_eval_skipped:
        parts.append(f"   skipped: {lm_eval_skipped}")
    else:
        parts.append(
            table(
                [
                    "conc",
                    "lm_eval wall s",
                    "lm_eval serve s",
                    "kyai gen s",
                    "kyai serve s",
                    "serve ratio",
                    "lm_eval RSS MB",
                ],
                [
                    [
                        str(r.concurrency),
                        fmt(r.lm_eval_wall_s),
                        fmt(r.lm_eval_span_s),
                        fmt(r.kyai_generation_s),
                        fmt(r.kyai_span_s),
                        ratio(r.lm_eval_span_s, r.kyai_span_s),
                        fmt(r.lm_eval_peak_rss_mb, 1),
                    ]
                    for r in lm_eval
                ],
            )
        )
        parts.append(
            "   serve s = first request to last answer at the double; "
            "serve ratio = lm_eval / kyai (above 1: kyai is faster)"
        )
        parts += [f"   conc {r.concurrency}: {r.error}" for r in lm_eval if r.error]
    if memory:
        parts.append(
            f"\n3. memory: {memory[0].rows} rows, concurrency {memory[0].concurrency}, no latency"
        )
        parts.append(
            table(
                ["command", "wall s", "req/s", "in flight", "peak RSS MB"],
                [
                    [
                        r.command,
                        fmt(r.wall_s),
                        fmt(r.requests_per_s, 0),
                        str(r.max_in_flight),
                        fmt(r.peak_rss_mb, 1),
                    ]
                    for r in memory
                ],
            )
        )
        parts += [f"   {r.command}: {r.error}" for r in memory if r.error]
    return "\n".join(parts)


class _Done(Exception):
    """Raised to skip the remaining parts (``--throughput-only``)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: small and fast")
    parser.add_argument("--rows", type=int, help="rows for parts 1-2 (100; quick: 20)")
    parser.add_argument("--latency", type=float, help="seconds per request (0.2; quick: 0.05)")
    parser.add_argument("--concurrency", type=int, nargs="+", help="levels (1 4 16 64)")
    parser.add_argument("--memory-rows", type=int, help="rows for part 3 (10000; quick: 500)")
    parser.add_argument("--skip-lm-eval", action="store_true", help="leave out part 2")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="results folder")
    parser.add_argument("--throughput-rows", type=int, help="rows for part 0 (5000; quick: 1000)")
    parser.add_argument(
        "--throughput-concurrency", type=int, nargs="+", help="levels for part 0 (16 64 256)"
    )
    parser.add_argument("--throughput-only", action="store_true", help="run part 0 only")
    parser.add_argument(
        "--throughput-variants",
        nargs="+",
        choices=("whole", "streamed"),
        default=["whole", "streamed"],
        help="part 0's answers: whole JSON, streamed events, or both (default)",
    )
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--throughput-client", choices=("kyai", "aiohttp"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.throughput_client:
        args.concurrency = args.concurrency[0]
        return throughput_client(args)
    rows = args.rows or (20 if args.quick else 100)
    latency = args.latency if args.latency is not None else (0.05 if args.quick else 0.2)
    levels = args.concurrency or ([1, 4, 16] if args.quick else [1, 4, 16, 64])
    memory_rows = args.memory_rows or (500 if args.quick else 10_000)

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kyai-bench-"))
    mode = "quick" if args.quick else "full"
    print(f"kyai engine bench ({mode}); {os.cpu_count()} CPUs; work dir {work}")
    started = time.monotonic()
    throughput_rows = args.throughput_rows or (1000 if args.quick else 5000)
    throughput_levels = args.throughput_concurrency or [16, 64, 256]
    concurrency: list[ConcurrencyResult] = []
    lm_eval: list[LmEvalResult] = []
    skipped: str | None = "--skip-lm-eval"
    memory: list[MemoryResult] = []
    try:
        print(
            f"0. client throughput: {throughput_rows} rows, 1 ms stand-in, "
            f"concurrency {throughput_levels}; load average "
            + " ".join(f"{value:.2f}" for value in os.getloadavg()),
            flush=True,
        )
        throughput = [
            result
            for variant in args.throughput_variants
            for result in bench_throughput(
                work,
                rows=throughput_rows,
                levels=throughput_levels,
                repeats=1 if args.quick else 3,
                stream=variant == "streamed",
            )
        ]
        if args.throughput_only:
            raise _Done
        dataset = write_dataset(work / f"rows-{rows}.jsonl", rows)
        with bench_double(latency).start_in_thread() as double:
            print(
                f"LLM double at {double.base_url}\n1. kyai run at concurrency {levels}", flush=True
            )
            concurrency = bench_concurrency(
                double, dataset, work, rows=rows, latency_s=latency, levels=levels
            )
            if not args.skip_lm_eval:
                print("2. lm-evaluation-harness", flush=True)
                lm_eval, skipped = bench_lm_eval(
                    double, dataset, work, concurrency, install=not args.quick
                )
                if skipped:
                    print(f"  skipped: {skipped}", flush=True)
        with bench_double(0.0).start_in_thread() as double:
            print(f"3. memory: {memory_rows} rows at concurrency 64", flush=True)
            memory = bench_memory(double, work, rows=memory_rows, concurrency=64)
    except _Done:
        pass
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = throughput_report(throughput)
    if not args.throughput_only:
        text += "\n" + report(concurrency, lm_eval, skipped, memory)
    print(text)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    result_file = args.out / f"bench-{stamp}.json"
    result_file.write_text(
        json.dumps(
            {
                "quick": args.quick,
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "seconds": round(time.monotonic() - started, 1),
                "concurrency": [asdict(r) for r in concurrency],
                "lm_eval": [asdict(r) for r in lm_eval],
                "lm_eval_skipped": skipped,
                "memory": [asdict(r) for r in memory],
                "throughput": [
                    {**asdict(r), "cpu_ms_per_row": r.cpu_ms_per_row} for r in throughput
                ],
            },
            indent=2,
        ),
        encoding="utf-8",
    )
    print(f"\nresults: {result_file} ({time.monotonic() - started:.0f}s in all)")
    failed = (
        any(r.error for r in concurrency)
        or any(r.error for r in memory)
        or any(r.error for r in throughput)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
