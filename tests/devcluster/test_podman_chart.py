"""The chart's operator runs in its container (in-cluster config) and runs an EvaluationRun.

The operator is the chart's Deployment (``helm template``), its workers are Jobs of the same
image, all as podman containers; the candidate and the judge are an LLM double on loopback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.helpers import KUBECTL
from devcluster.podman_image import podman_image
from kyai.devcluster import DevClusterThread
from kyai.testing import LLMDouble, ModelSpec, Rule
from kyai.testing._judge import substring_judge

__all__ = ["podman_image"]  # the session fixture, imported for pytest

pytestmark = [pytest.mark.podman, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
HELM = shutil.which("helm") or str(Path(sys.executable).parent / "helm")


def wait_for_status(get: Any, kind: str, name: str, done: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = get(kind, name).get("status") or {}
        if done(status):
            return status
        time.sleep(0.5)
    return status


def test_the_charts_operator_runs_in_its_container_and_an_evaluation_succeeds(
    tmp_path: Path, podman_image: str
) -> None:
    if KUBECTL is None or not Path(HELM).exists():
        pytest.skip("kubectl and helm are needed (make setup installs helm)")
    repository, _, tag = podman_image.rpartition(":")
    rendered = subprocess.run(
        [
            HELM, "template", "kyai", str(ROOT / "charts/kyai-operator"), "-n", "kyai-system",
            "--skip-tests",
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never",
        ],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    double = LLMDouble(
        models=[ModelSpec("cand", max_model_len=4096), ModelSpec("judge", max_model_len=8192)],
        rules=[
            Rule(match="France", model="cand", content="Paris"),
            Rule(model="cand", content="I do not know"),
            Rule(model="judge", content=substring_judge),
        ],
    )
    with (
        double.start_in_thread() as llm,
        DevClusterThread(workdir=tmp_path / "work", runtime="podman", image=podman_image) as dc,
    ):

        def kubectl(*args: str, stdin: str | None = None) -> str:
            assert KUBECTL is not None
            result = subprocess.run(
                [KUBECTL, "--kubeconfig", str(dc.kubeconfig_path), *args],
                input=stdin, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            return result.stdout

        def get(*args: str) -> Any:
            return json.loads(kubectl("get", *args, "-o", "json"))

        kubectl("apply", "-f", str(ROOT / "charts/kyai-operator/crds"))
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyai-system"}}
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
        kubectl("apply", "-n", "kyai-system", "-f", "-", stdin=rendered)
        kubectl(
            "-n", "kyai-system", "wait", "--for=condition=Available", "deployment",
            "--all", "--timeout=180s",
        )  # fmt: skip
        eas = {
            "apiVersion": "kyai.io/v1alpha1",
            "kind": "EngineArgsSet",
            "metadata": {"name": "owns-port", "namespace": "default"},
            # args.port is refused at admission (a CEL rule); extraArgs reach the operator.
            "spec": {"framework": "vllm", "extraArgs": ["--port=9000"]},
        }
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump(eas))
        status = wait_for_status(get, "engineargsset", "owns-port", lambda s: s.get("phase"), 120)
        assert status.get("phase") == "Invalid", status

        rows = [
            {"instruction": "Capital of France?", "groundTruthResponse": "Paris"},
            {"instruction": "Capital of Peru?", "groundTruthResponse": "Lima"},
        ]
        objects = [
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Snapshot",
                "metadata": {"name": "capitals", "namespace": "default"},
                "spec": {
                    "source": {"rows": rows},
                    "prompts": {"generation": "Answer briefly.", "judge": "Score 0..1."},
                },
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "Workload",
                "metadata": {"name": "cand", "namespace": "default"},
                "spec": {"framework": "vllm", "model": "cand", "endpoint": {"url": llm.base_url}},
            },
            {
                "apiVersion": "kyai.io/v1alpha1",
                "kind": "EvaluationRun",
                "metadata": {"name": "first", "namespace": "default"},
                "spec": {
                    "workloadRef": {"name": "cand"},
                    "snapshotRef": {"name": "capitals"},
                    "judge": {"type": "llm", "llm": {"endpoint": llm.base_url, "model": "judge"}},
                },
            },
        ]
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        finished = ("Succeeded", "Failed")
        run = wait_for_status(
            get, "evaluationrun", "first", lambda s: s.get("phase") in finished, 240
        )
        workers = get("pods", "-n", "default")["items"]
        assert run.get("phase") == "Succeeded", (run, [p["status"] for p in workers])
        assert run["avgScore"] == 0.5 and run["questions"] == 2
        assert workers and all(p["status"]["phase"] == "Succeeded" for p in workers)
        pod = get("pods", "-n", "kyai-system")["items"][0]
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        logs = kubectl("-n", "kyai-system", "logs", pod["metadata"]["name"])
        assert "kyai operator started" in logs
        assert "Initial authentication has finished" in logs
