"""``kyai snapshot-load`` (a large Snapshot's load Job) over real HTTP on loopback."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.builders.snapshot import LOAD_MOUNT, load_job_name, snapshot_claim, snapshot_load_job
from kyai.datasets import load_snapshot_dir

ROWS = 3000


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    data = "".join(
        json.dumps({"instruction": f"q{i}?", "ground_truth_response": f"a{i}"}) + "\n"
        for i in range(ROWS)
    ).encode()
    root = tmp_path / "www"
    root.mkdir()
    (root / "rows.jsonl").write_bytes(data)
    handler = type(
        "Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}
    )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: handler(*a, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/rows.jsonl", data
    finally:
        server.shutdown()
        server.server_close()


def spec(url: str, sha256: str) -> dict[str, object]:
    return {
        "source": {"url": {"url": url, "sha256": sha256}},
        "prompts": {"generation": "Answer.", "judge": "Score."},
    }


def load(tmp_path: Path, body: dict[str, object], expect: str, out: Path) -> tuple[int, str]:
    term = tmp_path / "termination-log"
    term.write_bytes(b"")
    completed = subprocess.run(
        [sys.executable, "-m", "kyai.cli", "snapshot-load", "--name", "big",
         "--spec", json.dumps(body), "--expect-sha256", expect, "--output", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "KYAI_TERMINATION_MESSAGE_PATH": str(term)},
    )  # fmt: skip
    assert completed.returncode != 0 or term.read_text() == ""
    return completed.returncode, completed.stderr + term.read_text()


def test_the_load_job_writes_the_resolved_rows(tmp_path: Path, served: tuple[str, bytes]) -> None:
    url, data = served
    body = spec(url, hashlib.sha256(data).hexdigest())
    # What the operator computed: the same rows resolved in-process.
    out = tmp_path / "claim"
    code, _ = load(tmp_path, body, "0" * 64, out)
    assert code == 1  # a different expected sha256 is refused ...
    assert not (out / "snapshot.json").exists()  # ... and nothing is left half-written
    manifest_sha = _dataset_sha(tmp_path, body)
    code, output = load(tmp_path, body, manifest_sha, out)
    assert code == 0, output
    dataset = load_snapshot_dir(out)
    assert len(dataset.rows) == ROWS and dataset.sha256 == manifest_sha


def test_a_changed_file_is_refused_with_the_message_in_the_termination_log(
    tmp_path: Path, served: tuple[str, bytes]
) -> None:
    url, _ = served
    code, output = load(tmp_path, spec(url, "a" * 64), "b" * 64, tmp_path / "claim")
    assert code == 1
    assert "has sha256" in output and "spec.source.url.sha256" in output


def _dataset_sha(tmp_path: Path, body: dict[str, object]) -> str:
    import asyncio

    from kyai.api import SnapshotSpec
    from kyai.controllers.snapshot import resolve

    dataset = asyncio.run(resolve(None, "", "big", SnapshotSpec.model_validate(body)))  # type: ignore[arg-type]
    return dataset.sha256


def test_the_claim_and_the_job_manifests() -> None:
    owner = {
        "apiVersion": "kyai.io/v1alpha1", "kind": "Snapshot",
        "metadata": {"name": "s" * 200, "namespace": "n", "uid": "u"},
        "spec": spec("http://x/rows.jsonl", "c" * 64),
    }  # fmt: skip
    claim = snapshot_claim(owner, size_bytes=300 * 1024 * 1024)
    assert claim["spec"]["resources"]["requests"]["storage"] == "664Mi"
    job = snapshot_load_job(owner, image="kyai:1", image_pull_policy="Never", expect_sha256="d")
    assert (
        job["metadata"]["name"] == load_job_name("s" * 200) and len(job["metadata"]["name"]) <= 63
    )
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "snapshot-load" and "command" not in container
    assert container["volumeMounts"][0] == {"name": "rows", "mountPath": LOAD_MOUNT}
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
