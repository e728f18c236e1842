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
import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from kyai.stats import ALPHA, Comparison, Interval, compare, holm, score_interval

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
    baseline: Sequence[float], candidate: Sequence[float], *, margin: float | None = None
) -> Comparison:
    """:func:`kyai.stats.compare` of ``candidate`` with ``baseline`` (alpha 0.05)."""
    key = ("compare", digest(baseline), digest(candidate), margin)
    return _MEMO.get(key, lambda: compare(baseline, candidate, non_inferiority=margin))


def tie_aware_ranks(vectors: Sequence[Sequence[float]]) -> list[int]:
    """:func:`kyai.stats.ranks` of ``vectors`` (same definition, alpha 0.05).

    Every pair compared (remembered), Holm–Bonferroni over all pairs (a pair no test can be
    made of counts as p = 1), ``rank = 1 +`` the runs significantly better. Raises
    :class:`kyai.stats.StatsError` as ``ranks`` does.
    """
    pairs = list(itertools.combinations(range(len(vectors)), 2))
    if not pairs:
        for vector in vectors:
            interval(vector)  # the same refusals as stats.ranks (fewer than 2, outside [0, 1])
        return [1] * len(vectors)
    results = [comparison(vectors[i], vectors[j]) for i, j in pairs]
    rejected = holm([result.rank_p_value for result in results], alpha=ALPHA)
    better_than = [0] * len(vectors)
    for (i, j), result, significant in zip(pairs, results, rejected, strict=True):
        if significant and result.mean_difference != 0:
            # compare(i, j) looks at j - i: a positive difference means j is better.
            better_than[i if result.mean_difference > 0 else j] += 1
    return [1 + better for better in better_than]


def forget() -> None:
    """Forget every remembered result (tests, benchmarks)."""
    _MEMO.clear()
