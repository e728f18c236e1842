"""``make demo`` (scripts/demo_operator.py): the samples are served, evaluated and scored."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from system.helpers import REPO

pytestmark = pytest.mark.timeout(300)


def test_make_demo_serves_the_samples_and_prints_the_scored_run(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if request.config.getoption("--with-e2e"):
        pytest.skip("the demo starts its own devcluster")
    if shutil.which("kubectl") is None:
        pytest.skip("the demo needs kubectl")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/demo_operator.py"), "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    # The phases as they happened, in order, for the served Workload and the first run.
    workload = [line for line in out.splitlines() if "Workload/qwen3-8b-vllm " in line]
    assert [line.split()[2] for line in workload][-2:] == ["Deploying:", "Ready:"], workload
    run_lines = [line for line in out.splitlines() if "EvaluationRun/qwen3-8b-capitals " in line]
    phases = [line.split("qwen3-8b-capitals", 1)[1].split()[0].rstrip(":") for line in run_lines]
    assert phases[-3:] == ["Generating", "Judging", "Succeeded"], run_lines
    # The vLLM stand-in answered from the EngineArgsSet's flags and the demo's answers:
    # two of three capitals right; the re-judging by the platform judge agrees.
    assert re.search(r"qwen3-8b-vllm\s+vllm\s+Qwen/Qwen3-8B\s+Ready\s+32768", out), out
    table = out.split("$ kubectl get er", 1)[1]
    assert re.search(r"qwen3-8b-capitals\s+Succeeded\s+0\.666667\s", table), table
    assert re.search(r"qwen3-8b-capitals-rejudge\s+Succeeded\s+0\.666667\s", table), table
    # The sample's gate (avgScore 0.9) was missed: the PASSED column and the demo's last word.
    assert re.search(r"qwen3-8b-capitals\s+Succeeded\s+0\.666667\s+False\s", table), table
    assert "qwen3-8b-capitals gate: failed (avgScore 0.6667 < 0.9)\n" in table, table
    assert "qwen3-8b-capitals-rejudge gate" not in table  # no spec.thresholds, no gate
    assert "hf_demo" not in out and "api-key: demo" not in out
