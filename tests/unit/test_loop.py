"""The event loop of ``kyai operator`` and ``kyai devcluster``: uvloop's unless told not to."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from kyai import _loop
from kyai_devcluster._kubelet import POD_IP_VARIABLE
from kyai_devcluster._network import HOSTS_VARIABLE


def loop_class(monkeypatch: pytest.MonkeyPatch, **env: str) -> type:
    for name in (_loop.LOOP_VARIABLE, *_loop.SHIM_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with asyncio.Runner(loop_factory=_loop.loop_factory()) as runner:
        return type(runner.get_loop())


def test_uvloop_by_default_asyncio_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert issubclass(loop_class(monkeypatch), uvloop.Loop)
    asked = loop_class(monkeypatch, KYAI_ASYNCIO_LOOP="asyncio")
    assert not issubclass(asked, uvloop.Loop) and issubclass(asked, asyncio.BaseEventLoop)


def test_asyncio_under_the_devcluster_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    # The names the devcluster really sets (the shim patches Python's socket module only).
    assert set(_loop.SHIM_VARIABLES) == {HOSTS_VARIABLE, POD_IP_VARIABLE}
    for name in _loop.SHIM_VARIABLES:
        assert not issubclass(loop_class(monkeypatch, **{name: "/x"}), uvloop.Loop)


def test_the_collector_is_tuned_unless_asked_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    before = gc.get_threshold()
    try:
        monkeypatch.setenv("KYAI_GC_DEFAULTS", "1")
        assert not _loop.tune_collector() and gc.get_threshold() == before
        monkeypatch.delenv("KYAI_GC_DEFAULTS")
        frozen = gc.get_freeze_count()
        assert _loop.tune_collector()
        assert gc.get_threshold() == _loop.SERVICE_THRESHOLDS
        assert gc.get_freeze_count() >= frozen  # what start-up made is out of the scans
        gc.disable()
        gc.set_threshold(*before)
        assert not _loop.tune_collector() and gc.get_threshold() == before  # off stays off
    finally:
        gc.enable()
        gc.set_threshold(*before)
        gc.unfreeze()
