"""The chat client's default transport: aiohttp, whose pool keeps up at concurrency 256."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import aiohttp

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
def _aiohttp_failures(host: str | None, timeout_s: float | None) -> Iterator[None]:
    """Map aiohttp's time-outs and connection errors (a cut body too) to TransportFailure."""
    try:
        yield
    except TimeoutError as exc:
        raise TransportFailure(
            TIMEOUT,
            f"timed out ({type(exc).__name__})",
            f"no answer within {timeout_s:g} s" if timeout_s else "timed out",
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        if isinstance(exc, aiohttp.ServerDisconnectedError):
            reason: str | None = "the server closed the connection"
        else:
            reason = failure_reason(exc, host)
        raise TransportFailure(
            CONNECTION_ERROR, f"{type(exc).__name__}: {str(exc) or 'connection failed'}", reason
        ) from exc


class AiohttpBackend:
    """aiohttp as the transport (:class:`kyai.evaluation._transport.Backend`)."""

    def __init__(
        self, base_url: str, headers: Mapping[str, str], timeout_s: float, max_connections: int
    ) -> None:
        self._base = base_url
        self._host = urlsplit(base_url).hostname
        self._headers = {**headers, "Content-Type": "application/json"}
        self._timeout = aiohttp.ClientTimeout(
            total=timeout_s, connect=min(timeout_s, 30.0), sock_connect=min(timeout_s, 30.0)
        )
        self._limit = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, limit_per_host=0),
                headers=self._headers,
                timeout=self._timeout,
                # Proxy variables are honoured when set (as httpx did); otherwise aiohttp is
                # spared a look-up in a thread for every request.
                trust_env=_proxy_configured(),
            )
        return self._session

    async def request(
        self, method: str, path: str, body: bytes | None, headers: Headers = None
    ) -> Reply:
        session = self._open()
        with _aiohttp_failures(self._host, self._timeout.total):
            async with session.request(
                method, self._base + path, data=body, headers=headers, allow_redirects=False
            ) as response:
                content = await response.read()
                return Reply(response.status, response.headers, content)

    async def stream(
        self, path: str, body: bytes, feed: Feed, headers: Headers = None
    ) -> Reply | None:
        """POST ``body``: an event stream goes to ``feed`` as it arrives (then None).

        Any other answer (an error, plain JSON) is read whole and returned. The body is read
        as ``vllm bench serve`` reads it: ``iter_any()``, whatever has arrived at each read.
        """
        session = self._open()
        url = self._base + path
        with _aiohttp_failures(self._host, self._timeout.total):
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as reply:
                if reply.status != 200 or not is_event_stream(
                    reply.headers.get("Content-Type", "")
                ):
                    return Reply(reply.status, reply.headers, await reply.read())
                async for chunk in reply.content.iter_any():
                    feed(chunk)
                return None

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _proxy_configured() -> bool:
    names = ("http_proxy", "https_proxy", "all_proxy")
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in names)
