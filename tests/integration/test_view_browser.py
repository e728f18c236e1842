"""``kyai report`` and ``kyai view`` in a real browser: headless Chromium (Debian's ``chromium``).

Two real runs of 100 questions, made by the pipeline against the LLM double
(:mod:`kyai_testing.paired_runs`: the baseline and the candidate are wrong on different
questions), are shown by ``kyai report`` (one file) and ``kyai view`` (a server on a free
port). Each page loads with no JavaScript error, draws its Plotly charts (their SVG), shows
both scores, and lists as many discordant questions as ``kyai compare`` counts on the same two
directories; an answer holding markup stays text. Screenshots are saved under the tests'
tmp_path. One browser for the module; Playwright drives it and downloads none.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kyai.cli import main as kyai
from kyai_testing.paired_runs import MARKUP, make_paired_runs

if TYPE_CHECKING:
    from playwright.sync_api import Browser, FloatRect, Locator, Page, Route

CHROMIUM = os.environ.get("KYAI_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"

pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"no Chromium at {CHROMIUM} (Debian's chromium; .ci/run installs it)",
    ),
    pytest.mark.timeout(180),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The baseline's and the candidate's run directories (100 questions each)."""
    return asyncio.run(make_paired_runs(tmp_path_factory.mktemp("view-runs"), questions=100))


def run_kyai(*args: str | Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = kyai([*map(str, args)])
    return status, out.getvalue()


@pytest.fixture(scope="module")
def expected(runs: tuple[Path, Path]) -> dict[str, Any]:
    """What the page must show: both scores and kyai compare's discordant count."""
    status, out = run_kyai("compare", *runs, "-o", "json")
    assert status == 0, out
    compared = json.loads(out)
    discordant = compared["discordant"]
    return {
        "scores": [f"{compared[role]['avg_score']:.4f}" for role in ("baseline", "candidate")],
        "discordant": discordant["baseline_only"] + discordant["candidate_only"],
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for the module."""
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("plotly")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    """The page at ``url`` once drawn, and the JavaScript errors it reported.

    A request anywhere but the page's own origin (the report's file, the view's server) is
    refused and counted as an error: the page works without network.
    """
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    origin = url if url.startswith("file:") else url.rstrip("/") + "/"

    def only_own(route: Route) -> None:
        if route.request.url.startswith(origin):
            route.continue_()
        else:
            errors.append(f"request elsewhere: {route.request.url}")
            route.abort()

    page.route("**/*", only_own)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            errors.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.goto(url)
    deadline = time.monotonic() + 30
    while not errors and not page.locator("body[data-ready=true]").count():
        assert time.monotonic() < deadline, "the page was never drawn (no data-ready)"
        page.wait_for_timeout(50)
    assert errors == []
    return page, errors


def box(locator: Locator) -> FloatRect:
    """Where an element is drawn (it must be)."""
    drawn = locator.bounding_box()
    assert drawn is not None, locator
    return drawn


def check_the_toolbar_covers_no_data(page: Page) -> None:
    """Plotly's toolbar (its modebar, top right, shown on hover) lies above every chart's plot
    area, clear of every marker and interval (issue 43: it covered the forest plot's top one)."""
    charts = page.locator(".chart").all()
    assert charts
    for chart in charts:
        chart.hover()
        bar = box(chart.locator(".modebar"))
        area = box(chart.locator(".nsewdrag").first)  # the plot area: where data is drawn
        assert bar["y"] + bar["height"] <= area["y"], (chart.get_attribute("id"), bar, area)
        for item in chart.locator(".point, .errorbar").all():
            drawn = box(item)
            apart = (
                drawn["x"] >= bar["x"] + bar["width"]
                or bar["x"] >= drawn["x"] + drawn["width"]
                or drawn["y"] >= bar["y"] + bar["height"]
                or bar["y"] >= drawn["y"] + drawn["height"]
            )
            assert apart, (chart.get_attribute("id"), bar, drawn)


def check_page(page: Page, errors: list[str], expected: dict[str, Any], shots: Path) -> None:
    """The checks both commands' pages pass."""
    assert errors == []
    for chart in page.locator(".chart").all():
        assert chart.locator("svg.main-svg").count() >= 1  # Plotly drew it
    assert page.locator(".chart").count() == 1  # one comparison key: one forest plot
    assert page.locator("#forest-0 .point").count() == 2  # both runs' markers
    assert page.locator("#runs-table .score").all_text_contents() == expected["scores"]
    assert page.locator("#pair-discordant-count").text_content() == str(expected["discordant"])
    assert page.locator("#pair-list article").count() == expected["discordant"]
    check_the_toolbar_covers_no_data(page)
    page.screenshot(path=str(shots / "page.png"), full_page=True)

    first = page.locator("#pair-list article header").first.text_content() or ""
    page.fill("#pair-search", first.split("·")[-1].strip())
    assert page.locator("#pair-list article").count() == 1
    page.select_option("#q-run", label="fp8")
    page.fill("#q-search", "onerror")
    (answer,) = [
        text for text in page.locator("#q-list pre").all_text_contents() if "onerror" in text
    ]
    assert answer.startswith(MARKUP)  # the markup is text: no element, no script ran
    assert page.locator("#q-list img").count() == 0 and page.title().startswith("KYAI results")
    page.locator("#questions").screenshot(path=str(shots / "questions.png"))
    assert errors == []


def test_the_report_opens_with_its_charts_both_scores_and_kyai_compare_s_discordant_count(
    runs: tuple[Path, Path], expected: dict[str, Any], browser: Browser, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    status, out = run_kyai("report", *runs, "-o", report)
    assert status == 0, out
    page, errors = open_page(browser, report.as_uri())
    try:
        check_page(page, errors, expected, tmp_path)
    finally:
        page.close()


def served_url(process: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The address ``kyai view`` prints once it serves."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            if line.startswith("kyai view: serving "):
                return line.split()[3]
        assert process.poll() is None, "kyai view exited before serving"
    raise AssertionError(f"kyai view printed no address in {timeout} s")


def test_kyai_view_serves_the_same_page(
    runs: tuple[Path, Path], expected: dict[str, Any], browser: Browser, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "kyai.cli", "view", *map(str, runs), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = served_url(process)
        assert url.startswith("http://127.0.0.1:")
        page, errors = open_page(browser, url)
        try:
            check_page(page, errors, expected, tmp_path)
        finally:
            page.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err, err


def sweep_objects() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An EvaluationSweep of three cells and their runs, as the API server returns them."""
    from kyai.api import EvaluationRunStatus
    from kyai.api.evaluationsweep import EvaluationSweepStatus, SweepRow
    from kyai.api.serving import ServingStatus

    cells = [("bf16", 80, 30.0, True), ("fp8", 70, 20.0, True), ("int4", 60, 45.0, False)]
    rows, runs = [], []
    for rank, (name, right, ttft, pareto) in enumerate(cells, start=1):
        scores = [1.0 if i < right else 0.0 for i in range(100)]
        rows.append(
            SweepRow(
                cell=name, workload=f"qwen-{name}", snapshot="mmlu", run=f"pick-{name}",
                phase="Succeeded", avg_score=right / 100, rank=rank, ttft_p50_ms=ttft,
                pareto=pareto, comparison_key="key-a", baseline=(name == "int4") or None,
            )
        )  # fmt: skip
        status = EvaluationRunStatus(
            phase="Succeeded", avg_score=right / 100, comparison_key="key-a", dataset="mmlu",
            questions=100, scores=scores, results_claim="results", results_path=f"/results/{name}",
            serving=ServingStatus(ttft_p50_ms=ttft),
        )  # fmt: skip
        runs.append(
            {
                "metadata": {"name": f"pick-{name}", "namespace": "evals"},
                "status": status.model_dump(by_alias=True, exclude_none=True),
            }
        )
    table = EvaluationSweepStatus(phase="Succeeded", table=rows, table_rows=len(rows))
    return {"metadata": {"name": "pick", "namespace": "evals"}, "status": table.to_k8s()}, runs


def test_a_sweep_page_draws_its_pareto_front_and_says_what_it_cannot_reach(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kyai.sweep_board import board_from
    from kyai.view.page import render
    from kyai.view.payload import build
    from kyai.view.sources import cluster_sources

    sweep, items = sweep_objects()
    monkeypatch.setattr("kyai.sweep_board.read_board", lambda namespace, name: board_from(sweep))
    monkeypatch.setattr(
        "kyai.leaderboard.cluster_runs", lambda namespace, all_namespaces: (items, {})
    )
    data = build(cluster_sources(None, "pick", None), now=datetime.now(UTC))
    report = tmp_path / "sweep.html"
    report.write_text(render(data, inline_plotly=True)[0], encoding="utf-8")
    page, errors = open_page(browser, report.as_uri())
    try:
        assert page.locator("#sweep-chart svg.main-svg").count() >= 1
        front = page.locator("#sweep-chart .scatterlayer .trace").nth(1)
        assert front.locator(".point").count() == 2  # the two cells on the front
        notices = page.locator("#notices li").all_text_contents()
        assert len(notices) == 3 and all("not reachable from here" in text for text in notices)
        assert page.locator("#q-none").count() == 1  # no run's questions: said, not hidden
        # Issue 43: two runs side by side start from the sweep's baseline (int4, ranked last),
        # so the difference has the sign of the sweep's DELTA (cell - baseline).
        assert page.locator("#pair-baseline option:checked").text_content() == "pick-int4"
        assert page.locator("#pair-candidate option:checked").text_content() == "pick-bf16"
        difference = page.locator('[data-figure="difference"]').text_content() or ""
        assert difference.startswith("+20.0 points"), difference
        check_the_toolbar_covers_no_data(page)
        page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
        assert errors == []
    finally:
        page.close()
