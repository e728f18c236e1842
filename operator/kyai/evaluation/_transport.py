"""What the chat client and its transports share: an answer, a transport failure, a backend.

The client (:mod:`kyai.evaluation._client`) sends its requests through a backend: aiohttp
(:mod:`kyai.evaluation._aiohttp_backend`, the default) or httpx
(:mod:`kyai.evaluation._httpx_backend`, for tests' ``httpx.MockTransport``). The backends import
this module and never the client, which imports them (the httpx one only when asked for, so
that processes whose requests go through aiohttp never import httpx): the dependency runs one
way, client → backends → this module.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from kyai import _json

#: Error kinds of a request that got no complete HTTP answer (they are :class:`ChatError` kinds).
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"


@dataclass(frozen=True)
class Reply:
    """One HTTP answer, read whole: status, headers (case-insensitive), body bytes."""

    status: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return _json.loads(self.content)


class TransportFailure(Exception):
    """No complete HTTP answer: ``kind`` is :data:`TIMEOUT` or :data:`CONNECTION_ERROR`.

    ``detail`` is the library's own words; ``reason`` says the same in a few words
    ("connection refused", "cannot resolve the host h"), or is None when nothing shorter is
    known.
    """

    def __init__(self, kind: str, detail: str, reason: str | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.reason = reason


def failure_reason(exc: BaseException, host: str | None = None) -> str | None:
    """A transport failure in a few words, from the OS error it comes from (None: unknown).

    Follows the exception's causes (and aiohttp's ``os_error``) down to the socket's error.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            what = f"cannot resolve the host {host}" if host else "cannot resolve the host"
            return f"{what} ({current.strerror})" if current.strerror else what
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, ConnectionResetError):
            return "connection reset by the server"
        if isinstance(current, ConnectionAbortedError | BrokenPipeError):
            return "connection closed by the server"
        os_error = getattr(current, "os_error", None)
        current = (
            os_error
            if isinstance(os_error, BaseException)
            else (current.__cause__ or current.__context__)
        )
    return None


#: Called with each piece of a streamed body as it is read (the stream reader times its events).
Feed = Callable[[bytes], None]


#: Headers of one request (the key read from a file), over the client's own.
Headers: TypeAlias = Mapping[str, str] | None


class Backend(Protocol):
    """A transport of the chat client."""

    async def request(
        self, method: str, path: str, body: bytes | None, headers: Headers = None
    ) -> Reply:
        """Send one request and read its answer whole."""
        ...

    async def stream(
        self, path: str, body: bytes, feed: Feed, headers: Headers = None
    ) -> Reply | None:
        """POST ``body``: an event stream goes to ``feed`` read by read (then None).

        Any other answer (an error, plain JSON) is read whole and returned.
        """
        ...

    async def aclose(self) -> None:
        """Close the connection pool."""
        ...
