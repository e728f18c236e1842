"""The endpoints runs call, checked by the operator before their Jobs: one check shared by all.

A run's judge is checked before its generation Job is made (:class:`~kyai.controllers.runkind.
EndpointCheck`), as ``kyai run`` checks it (:func:`kyai.evaluation.check_server`). Runs created
together against one judge (a sweep's cells, a batch from Argo CD) share one check: a check in
flight is awaited by every run asking the same, and a passed check is reused for
:data:`REUSE_SECONDS`. A failed check is not kept: the next run asks again (the judge may be
back). The cache is keyed by the SHA-256 of the key, never the key itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from kyai.evaluation import check_server

#: Seconds a passed check is reused by other runs asking the same endpoint.
REUSE_SECONDS = 30.0

#: Say a line about a failed attempt (the run's status carries it).
Say = Callable[[str], Awaitable[None] | None]


class Problem(Protocol):
    """What a failed check reports (:class:`kyai.evaluation._preflight.Problem`)."""

    @property
    def text(self) -> str: ...

    @property
    def reason(self) -> str | None: ...


class Checker(Protocol):
    """:func:`kyai.evaluation.check_server`'s signature."""

    def __call__(
        self,
        side: str,
        where: str,
        url: str,
        models: Sequence[tuple[str, str]],
        *,
        key: str | None,
        key_source: str,
        say: Say | None = None,
    ) -> Awaitable[Sequence[Problem]]: ...


_Key = tuple[str, str, str, tuple[tuple[str, str], ...], str, str]


class EndpointChecks:
    """Endpoint checks shared between runs (see the module's docstring)."""

    def __init__(self, check: Checker = check_server, *, reuse_seconds: float = REUSE_SECONDS):
        self._check = check
        self.reuse_seconds = reuse_seconds
        self._passed: dict[_Key, float] = {}
        self._flying: dict[_Key, asyncio.Future[Sequence[Problem]]] = {}

    async def check(
        self,
        side: str,
        where: str,
        url: str,
        models: Sequence[tuple[str, str]],
        *,
        key: str | None,
        key_source: str,
        say: Say | None = None,
    ) -> Sequence[Problem]:
        """The endpoint's problems (none: it answers, serves the models and takes the key)."""
        digest = hashlib.sha256(key.encode()).hexdigest() if key is not None else ""
        cache_key: _Key = (side, where, url, tuple(models), digest, key_source)
        now = time.monotonic()
        passed = self._passed.get(cache_key)
        if passed is not None and now - passed < self.reuse_seconds:
            return ()
        flying = self._flying.get(cache_key)
        if flying is not None:
            return await asyncio.shield(flying)
        future: asyncio.Future[Sequence[Problem]] = asyncio.get_running_loop().create_future()
        self._flying[cache_key] = future
        try:
            problems = await self._check(
                side, where, url, models, key=key, key_source=key_source, say=say
            )
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            self._flying.pop(cache_key, None)
        future.set_result(problems)
        if not problems:
            self._passed[cache_key] = time.monotonic()
            self._forget_old()
        return problems

    def _forget_old(self) -> None:
        now = time.monotonic()
        for cache_key, when in list(self._passed.items()):
            if now - when >= self.reuse_seconds:
                del self._passed[cache_key]
