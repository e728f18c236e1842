"""$KUBECONFIG is read when a command runs, not when the kubernetes client was imported."""

from __future__ import annotations

from pathlib import Path

import kubernetes  # noqa: F401  (imported first, as in a long-lived process)
import pytest
from kubernetes import client

from kyai._kubeconfig import kubeconfig_path, list_kube_config_contexts, load_kube_config
from kyai.cli import main as kyai_main

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team-a}}]
current-context: x
"""


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config to fall back on
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def test_the_variable_set_after_import_is_read(kubeconfig: Path) -> None:
    assert kubeconfig_path() == str(kubeconfig)
    configuration = client.Configuration()
    load_kube_config(client_configuration=configuration)
    assert configuration.host == "http://127.0.0.1:9"
    _, current = list_kube_config_contexts()
    assert current["context"]["namespace"] == "team-a"


def test_without_the_variable_home_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_path() == str(tmp_path / ".kube" / "config")


@pytest.mark.parametrize("command", [["leaderboard"], ["leaderboard", "--sweep", "s"]])
def test_cli_reaches_the_cluster_the_variable_names(
    kubeconfig: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = kyai_main(command)
    err = capsys.readouterr().err
    # Port 9 answers nothing: the command got as far as the cluster the variable names.
    assert "no kubeconfig" not in err, err
    assert code != 0 and "cannot be reached" in err, (code, err)
