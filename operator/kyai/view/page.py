"""The page: its data as JSON, rendered in the browser by ``page.js`` with Plotly's charts.

The data sits in a ``<script type="application/json">`` block; Plotly's JavaScript is the one
the ``plotly`` package ships.

Everything shown comes from the data block and reaches the page through ``textContent``
(answers are untrusted model output): the block is JSON with ``<``, ``>``, ``&`` and the two
JavaScript line separators escaped, so no text in it can close the element. A Content
Security Policy lets only the page's own scripts run (their SHA-256, or ``'self'`` for the
Plotly file the view serves), and the page loads nothing from the network: ``kyai report``
inlines Plotly, ``kyai view`` serves it from the same origin.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["PLOTLY_PATH", "PlotlyMissing", "plotly_js", "render"]

#: Where ``kyai view`` serves Plotly's JavaScript.
PLOTLY_PATH = "/plotly.min.js"

#: What to install when Plotly is missing.
INSTALL_HINT = "pip install 'kyai-operator[view]'"


class PlotlyMissing(Exception):
    """The ``plotly`` package is not installed: the page cannot draw its charts."""


@cache
def plotly_js() -> str:
    """Plotly's JavaScript as the installed ``plotly`` package ships it (no network)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise PlotlyMissing(
            f"the charts need the plotly package, which is not installed: {INSTALL_HINT}"
        ) from exc
    script: str = get_plotlyjs()
    return script.replace("</script", "<\\/script")


def _asset(name: str) -> str:
    return resources.files("kyai.view").joinpath("assets", name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element of an HTML page."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _hash(script: str) -> str:
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def _escape(text: str) -> str:
    return html.escape(text, quote=True)


def content_security_policy(*scripts: str, same_origin: bool = False) -> str:
    """Only these inline scripts (and, served, the same origin's) run; nothing is fetched."""
    sources = " ".join([*(["'self'"] if same_origin else []), *map(_hash, scripts)])
    return (
        f"default-src 'none'; script-src {sources}; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; "
        "form-action 'none'"
    )


def render(data: dict[str, Any], *, inline_plotly: bool) -> tuple[str, str]:
    """The page's HTML and its Content Security Policy.

    ``inline_plotly``: Plotly inside the page (``kyai report``: one self-contained file);
    otherwise the page loads it from :data:`PLOTLY_PATH` (``kyai view``).
    """
    script = _asset("page.js")
    if inline_plotly:
        plotly = plotly_js()
        plotly_tag = f"<script>{plotly}</script>"
        policy = content_security_policy(plotly, script)
    else:
        plotly_tag = f'<script src="{PLOTLY_PATH}"></script>'
        policy = content_security_policy(script, same_origin=True)
    title = _escape(f"KYAI results: {data.get('title') or ''}")
    page = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="kyai {_escape(str(data.get("kyai_version", "")))}">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{_asset("page.css")}</style>
</head>
<body>
<noscript><p class="notice">This page draws its tables and charts with JavaScript.</p></noscript>
<div id="app"></div>
<script type="application/json" id="kyai-data">{embed_json(data)}</script>
{plotly_tag}
<script>{script}</script>
</body>
</html>
"""
    return page, policy
