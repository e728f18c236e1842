"""``kyai devcluster`` as a command: kubeconfig, serving, clean stop with open watches."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml


def test_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config" / "kubeconfig"
    workdir = tmp_path / "work"
    kyai = Path(sys.executable).with_name("kyai")
    process = subprocess.Popen(
        [
            str(kyai),
            "devcluster",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--workdir",
            str(workdir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("kyai devcluster serving at http://127.0.0.1:"), first
        url = first.split()[-1]
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"] == url
        assert config["contexts"][0]["context"]["namespace"] == "default"
        with urllib.request.urlopen(f"{url}/version", timeout=5) as response:
            assert json.load(response)["major"] == "1"
        # An open watch must not keep the server from stopping.
        watch = urllib.request.urlopen(
            f"{url}/api/v1/namespaces/default/configmaps?watch=true", timeout=10
        )
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        # The watch has no timeoutSeconds: a server that waited for it would not stop before
        # aiohttp's default shutdown timeout (60 s), and communicate's 30 s (a safety net:
        # stopping takes well under a second) would raise.
        out, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "kyai devcluster stopped" in out
        assert watch.read() == b""
        watch.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
