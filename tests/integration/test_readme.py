"""The runnable blocks of README.md and the docs site run as written: against the devcluster
and the stand-ins.

A shell block preceded by the line ``<!-- readme-test -->`` is runnable: all of them, file by
file in the order of :data:`RUNNABLE` (then in each file's order), make one bash script
(``set -euo pipefail``) run from the repository's root, the way a newcomer would paste them.
Background processes they start (the devcluster, the operator, the stand-ins) are stopped
afterwards with their process group. The order is documented in docs/development.md ("The
documentation site"); a file with a marked block that is not listed fails a test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- readme-test -->"
#: The files whose marked blocks run, in the order they run: the devcluster walk (the cluster,
#: the operator, the samples, the sweeps, an engine stand-in), then the offline walk.
RUNNABLE = (
    "README.md",
    "docs/getting-started/without-a-cluster.md",
    "docs/how-to/evaluate-a-served-model.md",
)
#: The fixed addresses and paths the README's blocks use (the operator's metrics and health
#: ports are its defaults, 8080 and 8081; 8002: the offline walk's LLM double). The offline
#: walk works in a new directory (``mktemp -d``), which it names last: "the walk's files: DIR".
PORTS = (6443, 8000, 8001, 8002, 8080, 8081)
PATHS = (Path("/tmp/kyai-dc"), Path("/tmp/kyai.kubeconfig"))
OFFLINE_WALK = "docs/how-to/evaluate-a-served-model.md"
WALK_DIR = re.compile(r"^the walk's files: (\S+)$", re.MULTILINE)


def runnable_blocks(text: str) -> list[str]:
    """The ``sh`` blocks that follow the marker line."""
    pattern = re.compile(re.escape(MARKER) + r"\n```(?:sh|bash)\n(.*?)\n```", re.DOTALL)
    return [match.group(1) for match in pattern.finditer(text)]


def all_runnable_blocks() -> list[str]:
    """Every marked block of the files of :data:`RUNNABLE`, in that order."""
    return [
        block
        for name in RUNNABLE
        for block in runnable_blocks((ROOT / name).read_text(encoding="utf-8"))
    ]


def test_the_marked_blocks_are_found() -> None:
    blocks = all_runnable_blocks()
    assert len(blocks) >= 3
    assert any("kyai devcluster" in block for block in blocks)
    assert any("config/samples-devcluster" in block for block in blocks)
    assert runnable_blocks(f"{MARKER}\n```sh\necho hi\n```\n```sh\nnot marked\n```") == ["echo hi"]
    # The devcluster is started before anything uses it, the offline walk comes last.
    starts = next(i for i, block in enumerate(blocks) if "kyai devcluster --port" in block)
    assert starts == 0, blocks[0]
    assert "kyai compare" in blocks[-1], blocks[-1]


def test_every_file_with_a_marked_block_is_run() -> None:
    """A marked block in a file missing from RUNNABLE would silently never run."""
    candidates = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    marked = {
        path.relative_to(ROOT).as_posix()
        for path in candidates
        if runnable_blocks(path.read_text(encoding="utf-8"))
    }
    unlisted = sorted(marked - set(RUNNABLE))
    assert not unlisted, f"marked blocks in {unlisted}: add the files to RUNNABLE"
    assert all((ROOT / name).is_file() for name in RUNNABLE), RUNNABLE


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="the README's blocks need kubectl")
def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    taken = [port for port in PORTS if port_in_use(port)]
    assert not taken, f"the README's ports {taken} are in use: stop what holds them"
    for path in PATHS:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    blocks = all_runnable_blocks()
    script = "set -euo pipefail\n" + "\n".join(blocks) + "\n"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = tmp_path / "readme.log"
    # A file, not a pipe: the background processes keep their stdout open past the script.
    with log.open("w") as sink:
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        code = process.wait(timeout=480)
    finally:
        stop(process)
    output = log.read_text(errors="replace")
    for walked in WALK_DIR.findall(output):
        shutil.rmtree(walked, ignore_errors=True)
    assert code == 0, output[-6000:]
    # The samples' two runs (the run and its re-judge) succeeded, as `kubectl get` shows.
    phases = dict(re.findall(r"^evaluationrun\.kyai\.io/(\S+)\s+(Pending|Generating|"
                             r"Judging|Succeeded|Failed)\s", output, re.MULTILINE))  # fmt: skip
    assert phases == {
        "qwen3-8b-capitals": "Succeeded",
        "qwen3-8b-capitals-rejudge": "Succeeded",
    }, output[-6000:]
    assert "Qwen/Qwen3-0.6B" in output  # the engine stand-in's /v1/models
    assert "qwen3-8b-vllm" in output  # the leaderboard's entry
    check_the_walk_shows_figures(output)


def run_offline_walk(tmp_path: Path, name: str) -> tuple[str, Path]:
    """Run the offline walk's block alone (its new directory under ``tmp_path``).

    Returns its output and the directory it worked in; its LLM double is stopped.
    """
    (block,) = [
        block
        for block in runnable_blocks((ROOT / OFFLINE_WALK).read_text(encoding="utf-8"))
        if "kyai_testing.llm_double" in block
    ]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    log = tmp_path / f"{name}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(
            ["bash", "-c", f"set -euo pipefail\n{block}\n"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        code = process.wait(timeout=90)
    finally:
        stop(process)
    output = log.read_text(errors="replace")
    assert code == 0, output[-4000:]
    walked = WALK_DIR.findall(output)
    assert len(walked) == 1, output[-4000:]
    return output, Path(walked[0])


@pytest.mark.timeout(240)
def test_a_second_offline_walk_never_meets_the_first_one_s_results(tmp_path: Path) -> None:
    """Issue 43: a walk into a fixed directory resumed an earlier walk's run there, silently.

    The first walk's answers are then spoiled (every one a wrong city): the second walk works
    elsewhere and shows the walk's own figures.
    """
    assert not port_in_use(8002), "the offline walk's port 8002 is in use: stop what holds it"
    first, walked = run_offline_walk(tmp_path, "first")
    assert walked.parent == tmp_path and "avg_score=0.8333 count=6 errors=0" in first, first
    logs = sorted(walked.glob("out/*/generations.jsonl"))
    assert len(logs) == 2, logs
    for path in logs:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        spoiled = [{**record, "content": "Lagos"} for record in records]
        path.write_text("".join(json.dumps(record) + "\n" for record in spoiled), "utf-8")

    second, walked_again = run_offline_walk(tmp_path, "second")
    assert walked_again != walked
    assert "avg_score=0.8333 count=6 errors=0" in second, second[-4000:]
    assert "avg_score=0.3333 count=6 errors=0" in second, second[-4000:]
    assert "resuming" not in second, second[-4000:]


def table_row(output: str, sweep: str, workload: str) -> list[str]:
    """The columns of ``workload``'s row in ``kyai leaderboard --sweep SWEEP``'s table."""
    block = output.split(f"SWEEP kyai-samples/{sweep}:", 1)[1].split("RANK: within", 1)[0]
    for line in block.splitlines():
        columns = line.split()
        if len(columns) > 1 and columns[1] == workload:
            return columns
    raise AssertionError(f"no row of {workload} in sweep {sweep}'s table:\n{block}")


def check_the_walk_shows_figures(output: str) -> None:
    """Non-zero scores that differ, a ranked sweep, a failed cell that says why, a comparison."""
    # The samples' run: Qwen3's stand-in is right on 1 of 3 capitals (its gate fails).
    run = re.search(r"^evaluationrun\.kyai\.io/qwen3-8b-capitals\s+Succeeded\s+(\S+)",
                    output, re.MULTILINE)  # fmt: skip
    assert run is not None and float(run.group(1)) == pytest.approx(1 / 3, abs=1e-3), output
    # The sweep: both cells succeeded, ranked, with different scores against the baseline.
    assert "SWEEP kyai-samples/capitals: Succeeded, 2/2 cells succeeded" in output, output
    qwen = table_row(output, "capitals", "qwen3-8b-vllm")
    llama = table_row(output, "capitals", "llama-remote")
    assert qwen[0] == llama[0] == "1", (qwen, llama)  # 3 questions separate nothing
    assert (qwen[4], qwen[5]) == ("Succeeded", "0.3333"), qwen
    assert (llama[4], llama[5]) == ("Succeeded", "0.6667"), llama
    assert "+0.3333" in llama and "mcnemar-exact" in llama, llama
    # The failed cell: its note carries the run's reason and message.
    failed = table_row(output, "capitals-builtin", "llama-remote")
    assert failed[4] == "Failed", failed
    note = " ".join(failed)
    assert "failed: InvalidSpec: judge type builtin: deterministic graders exist only" in note
    # ... and `kubectl get er` shows what the run names although it failed early.
    listed = re.search(r"^capitals-builtin-\S+\s+Failed\s+(.*)$", output,
                       re.MULTILINE)  # fmt: skip
    shown = set(listed.group(1).split()) if listed is not None else set()
    assert {"llama-remote", "capitals", "InvalidSpec"} <= shown, output[-6000:]
    # The offline walk: two candidates on a custom dataset, scored 5/6 and 2/6, compared.
    assert "avg_score=0.8333 count=6 errors=0" in output, output[-6000:]
    assert "avg_score=0.3333 count=6 errors=0" in output, output[-6000:]
    assert "McNemar exact p = 0.375" in output, output[-6000:]
    assert "exit status 4" in output, output[-6000:]


def stop(process: subprocess.Popen[str]) -> None:
    """Stop the script's process group: SIGTERM (the devcluster stops its pods), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 5.0)):
        if not group_alive(process.pid):
            break
        os.killpg(process.pid, sig)
        deadline = time.monotonic() + grace
        while group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    process.wait(timeout=5)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
