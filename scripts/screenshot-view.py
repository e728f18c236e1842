"""The README's screenshot of ``kyai view``: docs/assets/kyai-view.png.

Makes two runs of 100 questions against the LLM double (:mod:`kyai_testing.paired_runs`),
writes their ``kyai report`` and takes a screenshot of its top (the runs, the forest plot,
two runs side by side with their first discordant questions) in headless Chromium
(Debian's ``chromium``, or ``KYAI_CHROMIUM``; Playwright drives it, it downloads no browser).

    .venv/bin/python scripts/screenshot-view.py [OUTPUT]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = ROOT / "docs" / "assets" / "kyai-view.png"
WIDTH, HEIGHT = 1280, 1480


def main(argv: list[str]) -> int:
    """Write the screenshot to ``argv[0]`` (default: docs/assets/kyai-view.png)."""
    from playwright.sync_api import sync_playwright

    from kyai.cli import main as kyai
    from kyai_testing.paired_runs import make_paired_runs

    output = Path(argv[0]).resolve() if argv else DEFAULT_OUTPUT
    chromium = os.environ.get("KYAI_CHROMIUM", "/usr/bin/chromium")
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)  # the page names the runs as given: bf16, fp8
        asyncio.run(make_paired_runs(Path("."), questions=100))
        if kyai(["report", "bf16", "fp8", "-o", "report.html"]) != 0:
            return 1
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium)
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            page.goto(Path(work, "report.html").as_uri())
            page.wait_for_selector("body[data-ready=true]")
            output.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(
                path=str(output), clip={"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT}
            )
            browser.close()
    print(f"wrote {output} ({output.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
