"""The sweep's statistics, remembered.

A table is rebuilt as each run finishes, from mostly the same score vectors, and scipy's
tests take milliseconds each (an interval tens of them). Every figure is the one
:mod:`kyai.stats` gives; only the work is saved. Vectors are known by a digest of their
values (not kept themselves), so the memory stays small whatever the number of questions.
:func:`tie_aware_ranks` is :func:`kyai.stats.ranks` computed from remembered pairwise
comparisons: when one more run of a group finishes, only its pairs are new (n - 1 tests
instead of n·(n - 1)/2).
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from kyai.stats import ALPHA, Comparison, Interval, compare, ranks, score_interval

T = TypeVar("T")

#: Remembered results, at most (least recently used forgotten first).
MEMO_SIZE = 20_000


class _Memo:
    """A bounded least-recently-used memo shared by the process."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]  # type: ignore[return-value]
        value = compute()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


_MEMO = _Memo(MEMO_SIZE)


def digest(scores: Sequence[float]) -> str:
    """A digest of a score vector's values and order."""
    return hashlib.blake2b(array("d", scores).tobytes(), digest_size=16).hexdigest()


def interval(scores: Sequence[float]) -> Interval:
    """:func:`kyai.stats.score_interval` of ``scores`` (95 %)."""
    return _MEMO.get(("interval", digest(scores)), lambda: score_interval(scores))


def comparison(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    margin: float | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """:func:`kyai.stats.compare` of ``candidate`` with ``baseline`` at ``alpha``."""
    key = ("compare", digest(baseline), digest(candidate), margin, alpha)
    return _MEMO.get(key, lambda: compare(baseline, candidate, alpha=alpha, non_inferiority=margin))


def tie_aware_ranks(vectors: Sequence[Sequence[float]], *, alpha: float = ALPHA) -> list[int]:
    """:func:`kyai.stats.ranks` of ``vectors`` at ``alpha``, its pairs remembered.

    The one definition of the ranks (``stats.ranks`` itself, given this memo's comparison):
    every pair compared, Holm–Bonferroni over all pairs at ``alpha`` (a pair no test can be
    made of counts as p = 1), ``rank = 1 +`` the runs significantly better. Raises
    :class:`kyai.stats.StatsError` as ``ranks`` does.
    """

    def pair(baseline: Sequence[float], candidate: Sequence[float]) -> Comparison:
        return comparison(baseline, candidate, alpha=alpha)

    return ranks(vectors, alpha=alpha, compare_pair=pair)


def forget() -> None:
    """Forget every remembered result (tests, benchmarks)."""
    _MEMO.clear()
