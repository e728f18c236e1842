"""The bench's API client retries as client-go does, so that one reset is not the bench's end.

client-go's ``rest.Request`` (k8s.io/client-go/rest/request.go, ``withRetry``) retries a
request at most 10 times:

* an answer 429 (Too Many Requests) or 5xx carrying ``Retry-After``: after that many seconds,
  whatever the verb (API priority and fairness answers 429 with ``Retry-After: 1``);
* a connection reset or an unexpected EOF on a GET, as if the server had answered 500 with
  ``Retry-After: 1`` (writes are not retried there: they are not idempotent);

and Go's HTTP transport sends a request again when its connection failed before any byte of
it was written (a refused or reset connect), whatever the verb. A create that failed on a
reset after it was sent is sent again by the caller above client-go (an Argo CD sync retries
the resources that failed): :meth:`RetryingTransport.handle_async_request` leaves that to
the bench's ``create``, which counts a 409 AlreadyExists after such a retry as created.

Every retry is counted in :data:`RETRIES` (printed with the bench's figures).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

__all__ = ["MAX_RETRIES", "RETRIES", "RetryingTransport", "retry_after"]

#: client-go's default ``maxRetries`` (rest.Request.maxRetries).
MAX_RETRIES = 10
#: The longest ``Retry-After`` honoured, in seconds (client-go takes the server's word).
MAX_WAIT = 10.0
#: Retries by cause ("429", "5xx", "connect", "reset-get"; the bench adds "create-resent"
#: for a create sent again after a reset or a time-out, "watch-reconnect" for watches).
RETRIES: Counter[str] = Counter()


def retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before sending again: a 429, or a 5xx with ``Retry-After``; else None."""
    header = response.headers.get("Retry-After")
    if response.status_code != 429 and not (response.status_code >= 500 and header):
        return None
    try:
        return min(max(float(header or 1), 0.0), MAX_WAIT)
    except ValueError:
        return 1.0


class RetryingTransport(httpx.AsyncBaseTransport):
    """An httpx transport with client-go's retries (see the module docstring)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(MAX_RETRIES + 1):
            last = attempt == MAX_RETRIES
            try:
                response = await self.inner.handle_async_request(request)
            except httpx.ConnectError:
                if last:
                    raise
                RETRIES["connect"] += 1
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError):
                if last or request.method != "GET":
                    raise
                RETRIES["reset-get"] += 1
                await asyncio.sleep(1.0)
                continue
            wait = retry_after(response)
            if wait is None or last:
                return response
            await response.aread()
            await response.aclose()
            RETRIES["429" if response.status_code == 429 else "5xx"] += 1
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        await self.inner.aclose()
