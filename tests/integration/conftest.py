"""Fixtures for integration tests: the OpenAI-compatible LLM double on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from kyai_testing import LLMDouble

DoubleFactory = Callable[..., Awaitable[LLMDouble]]
ThreadDoubleFactory = Callable[..., LLMDouble]


@pytest.fixture
async def llm_double() -> AsyncIterator[DoubleFactory]:
    """Start an :class:`LLMDouble` in the test's event loop: ``await llm_double(**kwargs)``.

    Every double started through the factory is stopped at teardown.
    """
    started: list[LLMDouble] = []

    async def start(**kwargs: Any) -> LLMDouble:
        double = LLMDouble(**kwargs)
        await double.start()
        started.append(double)
        return double

    yield start
    for double in reversed(started):
        await double.stop()


@pytest.fixture
def llm_double_thread() -> Iterator[ThreadDoubleFactory]:
    """Start an :class:`LLMDouble` in a background thread: ``llm_double_thread(**kwargs)``.

    For tests that run synchronous code or a ``kyai`` subprocess against the double; every
    double is stopped (and its thread joined) at teardown.
    """
    with ExitStack() as stack:

        def start(**kwargs: Any) -> LLMDouble:
            return stack.enter_context(LLMDouble(**kwargs).start_in_thread())

        yield start
