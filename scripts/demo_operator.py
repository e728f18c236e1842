"""``make demo``: the operator on this machine, serving and evaluating the samples.

Starts ``kyai devcluster`` (process runtime) in this process, an LLM double as the judge,
and ``kyai operator`` as a subprocess; applies ``config/samples`` (``kubectl kustomize``),
adapted to a machine without GPUs or network (see :func:`adapt`); prints the Workload and the
EvaluationRuns as they move through their phases, and ends with ``kubectl get er`` and each
gated run's verdict (its Passed condition: ``gate: failed (avgScore 0.6667 < 0.9)``).

The served vLLM Workload runs the vLLM stand-in (``python -m kyai_testing.engines``, which the
devcluster's kubelet runs for vLLM's image) with the EngineArgsSet's real flags. Its answers
come from a rules file (one wrong on purpose); the judge is the substring judge.

    python scripts/demo_operator.py [--workdir DIR] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from kyai_devcluster import DevClusterThread
from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from kyai_testing.kubectl_watch import json_documents

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "default"
JUDGE_MODEL = "judge"
WORKER_IMAGE = "ghcr.io/kyai-io/kyai-operator:dev"
#: What the stand-in answers (one wrong on purpose); the questions are the capitals sample's.
ANSWERS = [
    {"match": "Australia", "content": "Canberra."},
    {"match": "Canada", "content": "The capital of Canada is Ottawa."},
    {"match": "Brazil", "content": "São Paulo."},
]
#: Samples that need what this machine has not: a built-in set (downloaded from the
#: HuggingFace Hub) and a Workload served by another team's cluster.
SKIPPED = {("Snapshot", "humaneval-v1"), ("Workload", "llama-remote")}
FINISHED = ("Succeeded", "Failed")


class DemoError(Exception):
    """The demo cannot go on (the message says why)."""


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """The output of ``kubectl ARGS``; DemoError with kubectl's message when it fails."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def samples() -> list[dict[str, Any]]:
    """config/samples as kustomize renders it."""
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "config/samples")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if rendered.returncode != 0:
        raise DemoError(f"kubectl kustomize config/samples failed: {rendered.stderr.strip()}")
    return [obj for obj in yaml.safe_load_all(rendered.stdout) if obj]


def adapt(objects: list[dict[str, Any]], judge_url: str, rules: Path) -> list[dict[str, Any]]:
    """The samples for this machine, plus the Secrets and the claim they reference.

    The run's judge is the double (its Secret holds a placeholder key), the EngineArgsSet
    tells the vLLM stand-in what to answer, and the Workload's HuggingFace token and model
    cache get a placeholder Secret and a claim. Everything else is applied as written.
    """
    kept = []
    for obj in objects:
        name = obj["metadata"]["name"]
        if (obj["kind"], name) in SKIPPED:
            print(f"  (skipping {obj['kind']}/{name}: needs network access)")
            continue
        obj["metadata"]["namespace"] = NAMESPACE
        spec = obj["spec"]
        if obj["kind"] == "EvaluationRun" and "judge" in spec:
            spec["judge"]["llm"].update(endpoint=judge_url, model=JUDGE_MODEL)
        if obj["kind"] == "EngineArgsSet":
            spec.setdefault("env", []).append({"name": "KYAI_STANDIN_RULES", "value": str(rules)})
        kept.append(obj)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque"}
    return [
        {**secret, "metadata": {"name": "hf-token"}, "stringData": {"token": "hf_demo"}},
        {**secret, "metadata": {"name": "judge-api-key"}, "stringData": {"api-key": "demo"}},
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "hf-cache"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "50Gi"}},
            },
        },
        *kept,
    ]


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def operator(
    cluster: DevClusterThread, judge_url: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``kyai operator -A`` against the devcluster, resolving Service names like a pod."""
    env = cluster.network_env(
        {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig_path),
            "KYAI_WORKER_IMAGE": WORKER_IMAGE,
            "KYAI_DEFAULT_JUDGE_ENDPOINT": judge_url,
            "KYAI_DEFAULT_JUDGE_MODEL": JUDGE_MODEL,
            "KYAI_METRICS_PORT": str(free_port()),
            "KYAI_HEALTH_PORT": "0",
            "HF_HUB_OFFLINE": "1",
        }
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kyai.cli", "operator", "--all-namespaces"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def shown_phase(obj: dict[str, Any]) -> str:
    """An object's phase, with its message while it is not finished."""
    status = obj.get("status") or {}
    phase = status.get("phase") or "Pending"
    message = status.get("message")
    return f"{phase}: {message}" if message and phase not in FINISHED else phase


def phases(kubeconfig: Path) -> dict[str, str]:
    """``Kind/name`` → phase (and message) of the Workloads, as they are now."""
    listing = json.loads(kubectl(kubeconfig, "get", "workloads", "-A", "-o", "json"))
    return {f"Workload/{obj['metadata']['name']}": shown_phase(obj) for obj in listing["items"]}


class RunWatch:
    """``kubectl get evaluationruns -w``: every state of every run, in order, none missed.

    A poll would miss a phase shorter than its interval (the demo's generation can take under
    a second); a watch sees each status update. The objects kubectl prints are read as a
    stream of JSON documents on a thread and queued as ``(EvaluationRun/NAME, phase)``.
    """

    def __init__(self, kubeconfig: Path) -> None:
        self.process = subprocess.Popen(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", "evaluationruns", "-A",
             "-w", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.seen: queue.Queue[tuple[str, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for obj in json_documents(self.process.stdout):
            self.seen.put((f"EvaluationRun/{obj['metadata']['name']}", shown_phase(obj)))

    def changes(self) -> list[tuple[str, str]]:
        """The states seen since the last call, in order."""
        found = []
        while True:
            try:
                found.append(self.seen.get_nowait())
            except queue.Empty:
                return found

    def close(self) -> None:
        """Stop the watch."""
        self.process.terminate()
        self.process.wait(timeout=10)


def log_tail(log: Path) -> str:
    """The end of the operator's log."""
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def watch(
    kubeconfig: Path, started: float, timeout: float, log: Path, process: subprocess.Popen[bytes]
) -> None:
    """Print every phase change until every run has finished."""
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    runs = RunWatch(kubeconfig)
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DemoError(f"the operator exited ({process.returncode}):\n{log_tail(log)}")
            changes = sorted(phases(kubeconfig).items()) + runs.changes()
            for key, value in changes:
                if seen.get(key) != value:
                    print(f"  {time.monotonic() - started:6.1f}s  {key:<42} {value}", flush=True)
                seen[key] = value
            states = [v for k, v in seen.items() if k.startswith("EvaluationRun/")]
            if states and all(v in FINISHED for v in states):
                return
            time.sleep(0.5)
    finally:
        runs.close()
    raise DemoError(
        f"the runs did not finish in {timeout:.0f}s; the operator's log ends:\n{log_tail(log)}"
    )


def gate(run: dict[str, Any]) -> str | None:
    """``gate: passed (…)`` / ``gate: failed (…)`` from a run's Passed condition (None without).

    A failed gate's message says what was missed (``avgScore 0.6667 < 0.9``); a passed
    avgScore gate is shown with its figures too (``avgScore 0.9333 ≥ 0.9: every threshold is
    met``).
    """
    status = run.get("status") or {}
    conditions = status.get("conditions") or []
    passed = next((c for c in conditions if c.get("type") == "Passed"), None)
    if passed is None:
        return None
    verdict = {"True": "passed", "False": "failed"}.get(passed.get("status"), "unknown")
    why = passed.get("message") or passed.get("reason") or ""
    threshold = ((run.get("spec") or {}).get("thresholds") or {}).get("avgScore")
    score = status.get("avgScore")
    if verdict == "passed" and threshold is not None and isinstance(score, int | float):
        why = f"avgScore {score:.4f} ≥ {threshold}: {why}"
    return f"gate: {verdict} ({why})"


def gates(kubeconfig: Path) -> str:
    """One line per run that has a gate (``spec.thresholds``): its name and :func:`gate`."""
    listing = json.loads(kubectl(kubeconfig, "get", "er", "-n", NAMESPACE, "-o", "json"))
    lines = []
    for run in listing["items"]:
        verdict = gate(run)
        if verdict is not None:
            lines.append(f"{run['metadata']['name']} {verdict}\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every run finished, 1 when something failed on the way."""
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=None, help="keep files here")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds for the runs")
    args = parser.parse_args(argv)
    if shutil.which("kubectl") is None:
        print("make demo needs kubectl on PATH (https://kubernetes.io/docs/tasks/tools/)")
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kyai-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rules = workdir / "vllm-answers.json"
    rules.write_text(json.dumps(ANSWERS, ensure_ascii=False))
    judge = LLMDouble(
        models=[ModelSpec(JUDGE_MODEL, max_model_len=8192)],
        rules=[Rule(model=JUDGE_MODEL, content=substring_judge)],
    )
    started = time.monotonic()
    log = workdir / "operator.log"
    try:
        with (
            judge.start_in_thread() as running_judge,
            DevClusterThread(workdir=workdir / "cluster") as cluster,
        ):
            config = cluster.kubeconfig_path
            print(f"devcluster at {cluster.url} (KUBECONFIG={config})")
            print(f"judge stand-in (LLM double) at {running_judge.base_url}")
            kubectl(config, "apply", "-f", str(ROOT / "crds"))
            with operator(cluster, running_judge.base_url, log) as process:
                print(f"operator started (log: {log})")
                print("applying config/samples (adapted for this machine):")
                objects = adapt(samples(), running_judge.base_url, rules)
                applied = kubectl(
                    config, "apply", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(objects)
                )
                print("".join(f"  {line}\n" for line in applied.splitlines()), end="")
                print("phases:")
                watch(config, started, args.timeout, log, process)
                print("\n$ kubectl get workloads")
                print(kubectl(config, "get", "workloads", "-n", NAMESPACE), end="")
                print("\n$ kubectl get er")
                print(kubectl(config, "get", "er", "-n", NAMESPACE), end="")
                print(f"\n{gates(config)}", end="")
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    print(f"\ndone in {time.monotonic() - started:.0f}s; files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
