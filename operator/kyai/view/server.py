"""``kyai view``'s server: the page on 127.0.0.1, rebuilt on each load, and Plotly beside it.

The standard library's :class:`~http.server.ThreadingHTTPServer`, bound to the loopback
address only. ``/`` is the page (built again on every load: a reload shows runs that finished
meanwhile), ``/plotly.min.js`` Plotly's JavaScript as the ``plotly`` package ships it; nothing
else. A request whose ``Host`` is not this server's loopback address is refused, so that a
web page elsewhere cannot read the results through a name that resolves to 127.0.0.1.
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kyai.view.page import PLOTLY_PATH

__all__ = ["HOST", "ViewServer", "make_server"]

#: The only address the view binds.
HOST = "127.0.0.1"

#: The page's HTML and its Content Security Policy.
PageBuilder = Callable[[], tuple[str, str]]


class ViewServer(ThreadingHTTPServer):
    """The view's server: what to serve, and the names it answers to."""

    daemon_threads = True

    def __init__(self, port: int, build: PageBuilder, plotly: str) -> None:
        super().__init__((HOST, port), _Handler)
        self.build = build
        self.plotly = plotly.encode("utf-8")
        bound = self.server_address[1]
        self.hosts = {f"{HOST}:{bound}", f"localhost:{bound}"}

    @property
    def url(self) -> str:
        """The page's address."""
        return f"http://{HOST}:{self.server_address[1]}/"


def make_server(port: int, build: PageBuilder, plotly: str) -> ViewServer:
    """A server on ``127.0.0.1:port`` (0: a free port), not yet serving."""
    return ViewServer(port, build, plotly)


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    server_version = "kyai-view"

    def do_GET(self) -> None:
        if self.headers.get("Host", "") not in self.server.hosts:
            self._send(HTTPStatus.FORBIDDEN, b"unknown host\n", "text/plain; charset=utf-8")
            return
        path = self.path.split("?", 1)[0]
        if path == PLOTLY_PATH:
            self._send(
                HTTPStatus.OK,
                self.server.plotly,
                "text/javascript; charset=utf-8",
                {"Cache-Control": "max-age=3600"},
            )
        elif path in ("/", "/index.html"):
            self._page()
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def _page(self) -> None:
        from kyai.view.sources import ViewError

        try:
            page, policy = self.server.build()
        except ViewError as exc:
            body = f"<!DOCTYPE html><title>kyai view</title><p>{html.escape(str(exc))}</p>"
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, body.encode(), "text/html; charset=utf-8")
            return
        self._send(
            HTTPStatus.OK,
            page.encode("utf-8"),
            "text/html; charset=utf-8",
            {"Content-Security-Policy": policy, "Cache-Control": "no-store"},
        )

    def _send(
        self,
        status: HTTPStatus,
        body: bytes,
        kind: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Only failed requests are logged (stderr)."""
        if len(args) >= 2 and str(args[1]).startswith(("4", "5")):
            sys.stderr.write(f"kyai view: {self.address_string()} {format % args}\n")
