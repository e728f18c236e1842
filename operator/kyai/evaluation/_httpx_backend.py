"""The chat client's httpx transport: for tests (``httpx.MockTransport``) and other routes.

Kept apart from :mod:`kyai.evaluation._client`, which imports it only when asked for httpx,
so that ``kyai generate`` and ``kyai judge``, whose requests go through aiohttp, never import
httpx (a tenth of a second of start-up). It imports what it shares with the client from
:mod:`kyai.evaluation._transport`, never the client itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator, Mapping

import httpx

from kyai.evaluation._keyfile import KeyFile
from kyai.evaluation._stream import is_event_stream
from kyai.evaluation._transport import (
    CONNECTION_ERROR,
    TIMEOUT,
    Feed,
    Headers,
    Reply,
    TransportFailure,
    failure_reason,
)


@contextlib.contextmanager
def _httpx_failures(client: httpx.AsyncClient) -> Iterator[None]:
    """Map httpx's time-outs and transport errors to :class:`TransportFailure`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise TransportFailure(TIMEOUT, f"timed out ({type(exc).__name__})", "timed out") from exc
    except httpx.TransportError as exc:
        raise TransportFailure(
            CONNECTION_ERROR,
            f"{type(exc).__name__}: {str(exc) or 'connection failed'}",
            failure_reason(exc, client.base_url.host or None),
        ) from exc


class _KeyFileAuth(httpx.Auth):
    """httpx's view of a :class:`KeyFile`: the key as read for each request."""

    def __init__(self, key_file: KeyFile) -> None:
        self.key_file = key_file

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.key_file.key()}"
        yield request


def make_client(
    base_url: str,
    *,
    headers: Mapping[str, str],
    key_file: KeyFile | None,
    timeout_s: float,
    max_connections: int,
    transport: httpx.AsyncBaseTransport | None,
) -> httpx.AsyncClient:
    """An httpx client with the chat client's base URL, credentials, time-outs and pool."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers=dict(headers),
        auth=_KeyFileAuth(key_file) if key_file is not None else None,
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0), pool=None),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        transport=transport,
    )


class HttpxBackend:
    """An httpx client as the transport (tests hand in an ``httpx.MockTransport``)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def request(
        self, method: str, path: str, body: bytes | None, headers: Headers = None
    ) -> Reply:
        sent = {
            **({"Content-Type": "application/json"} if body is not None else {}),
            **(headers or {}),
        }
        with _httpx_failures(self.client):
            response = await self.client.request(method, path, content=body, headers=sent or None)
        return Reply(response.status_code, response.headers, response.content)

    async def stream(
        self, path: str, body: bytes, feed: Feed, headers: Headers = None
    ) -> Reply | None:
        """As the aiohttp backend's ``stream``."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        with _httpx_failures(self.client):
            async with self.client.stream("POST", path, content=body, headers=sent) as reply:
                if reply.status_code != 200 or not is_event_stream(
                    reply.headers.get("content-type", "")
                ):
                    return Reply(reply.status_code, reply.headers, await reply.aread())
                async for chunk in reply.aiter_bytes():
                    feed(chunk)
                return None

    async def aclose(self) -> None:
        await self.client.aclose()
