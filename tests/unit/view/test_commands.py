"""``kyai view`` and ``kyai report``: inputs, the extra, the page's escaping, the server."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai.cli import main
from kyai.view import page as page_module
from kyai.view.page import embed_json
from kyai.view.server import ViewServer, make_server

RunFactory = Callable[..., Path]


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    status = main([*map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def no_plotly(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As if the ``view`` extra were not installed."""
    monkeypatch.setitem(__import__("sys").modules, "plotly", None)
    monkeypatch.setitem(__import__("sys").modules, "plotly.offline", None)
    page_module.plotly_js.cache_clear()
    yield
    page_module.plotly_js.cache_clear()


@pytest.mark.parametrize("command", [["view", "--port", "0"], ["report", "-o", "x.html"]])
def test_without_plotly_both_commands_exit_2_saying_what_to_install(
    command: list[str], make_run: RunFactory, no_plotly: None, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, *command, make_run("a", [1.0, 0.0]))
    assert status == 2
    assert "pip install 'kyai-operator[view]'" in err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["-n", "evals"], "not both"),
        (["--results-root", "/tmp"], "--results-root reads a cluster's runs"),
    ],
)
def test_inputs_that_do_not_go_together_are_refused(
    extra: list[str], expected: str, make_run: RunFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, "report", "-o", "x.html", make_run("a", [1.0, 0.0]), *extra)
    assert status == 2 and expected in err


def test_nothing_to_show_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "view")
    assert status == 2 and "nothing to show: kyai view RUN_DIR..." in err


def test_a_bad_path_is_exit_2_naming_it_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("plotly")
    (tmp_path / "photos").mkdir()
    output = tmp_path / "report.html"
    status, _, err = run(capsys, "report", tmp_path / "photos", "-o", output)
    assert status == 2 and f"{tmp_path / 'photos'}: not a run directory" in err
    assert not output.exists()


def test_an_unreachable_cluster_is_exit_3(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("plotly")
    from urllib3.exceptions import NewConnectionError

    def refuse(namespace: str | None, all_namespaces: bool) -> Any:
        raise NewConnectionError(None, "connection refused")  # type: ignore[arg-type]

    monkeypatch.setattr("kyai.leaderboard.cluster_runs", refuse)
    status, _, err = run(capsys, "report", "-n", "evals", "-o", tmp_path / "r.html")
    assert status == 3 and "the API server cannot be reached" in err


def inline_scripts(html: str) -> list[str]:
    return re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)


def test_the_report_is_one_file_that_loads_nothing_and_runs_only_its_own_scripts(
    make_run: RunFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("plotly")
    hostile = '</script><script>alert(1)</script><img src=x onerror="alert(2)">\u2028'
    a = make_run("a", [1.0, 0.0, 1.0], answers={1: hostile})
    output = tmp_path / "report.html"
    status, out, _ = run(capsys, "report", a, make_run("b", [1.0, 1.0, 0.0]), "-o", output)
    assert status == 0 and f"wrote {output}" in out
    html = output.read_text(encoding="utf-8")
    assert "<script src=" not in html and '<link rel="stylesheet"' not in html
    block = re.search(r'<script type="application/json" id="kyai-data">(.*?)</script>', html, re.S)
    assert block is not None and "<" not in block.group(1)
    data = json.loads(block.group(1))
    assert data["questions"]["r0"][1]["answer"] == hostile
    scripts = inline_scripts(html)
    assert len(scripts) == 2 and "Plotly" in scripts[0]  # Plotly, then the page's own
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', html)
    assert policy is not None and "default-src 'none'" in policy.group(1)
    for script in scripts:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in policy.group(1)
    assert "unsafe-inline" not in policy.group(1).split("script-src")[1].split(";")[0]


def test_embedded_json_cannot_close_its_element() -> None:
    value = {"answer": "</script><!-- & \u2028 \u2029 >"}
    text = embed_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


# -- the server ---------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[tuple[ViewServer, list[int]]]:
    """A view server on a free port whose page counts its builds."""
    builds: list[int] = []

    def build() -> tuple[str, str]:
        builds.append(1)
        return f"<p>page {len(builds)}</p>", "default-src 'none'"

    served = make_server(0, build, "window.Plotly = {};")
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served, builds
    served.shutdown()
    served.server_close()


def get(url: str, host: str | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def test_the_server_binds_loopback_and_builds_the_page_on_each_load(
    server: tuple[ViewServer, list[int]],
) -> None:
    served, builds = server
    assert served.server_address[0] == "127.0.0.1" and served.url.startswith("http://127.0.0.1:")
    status, headers, body = get(served.url)
    assert (status, body) == (200, "<p>page 1</p>")
    assert headers["Content-Security-Policy"] == "default-src 'none'"
    assert get(served.url)[2] == "<p>page 2</p>" and len(builds) == 2
    status, headers, body = get(served.url + "plotly.min.js")
    assert (status, body) == (200, "window.Plotly = {};")
    assert headers["Content-Type"].startswith("text/javascript")
    assert get(served.url + "etc/passwd")[0] == 404


def test_the_server_refuses_a_host_that_is_not_its_own(
    server: tuple[ViewServer, list[int]],
) -> None:
    served, builds = server
    assert get(served.url, host="evil.example:80")[0] == 403
    assert builds == []
