"""EvaluationRun: the run engine's public face.

:func:`reconcile_run` takes one step of a run as last seen, :func:`resync_run` one from a
fresh read when the operator is idle enough; both return when the run wants to be looked at
again. The state machine is :mod:`kyai.controllers._engine`; the kinds of run are
:mod:`kyai.controllers.kinds`; when runs are looked at is :mod:`kyai.controllers.scheduling`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from kyai.api import EvaluationRunSpec
from kyai.controllers._baseline import baseline_references
from kyai.controllers._engine import SPEC_CHANGED, TERMINAL, RunEngine
from kyai.controllers._kube import KubeError
from kyai.controllers._references import KIND
from kyai.controllers._result import DONE, Result
from kyai.controllers._services import NORMAL, Services
from kyai.controllers.kinds import kind_of
from kyai.controllers.runkind import Reference

__all__ = [
    "KIND",
    "SPEC_CHANGED",
    "TERMINAL",
    "RunEngine",
    "reconcile_run",
    "resync_run",
    "run_references",
]


async def reconcile_run(
    svc: Services,
    namespace: str,
    name: str,
    *,
    job: Mapping[str, Any] | None = None,
    priority: int = NORMAL,
) -> Result:
    """Take one step of the run as last seen; nothing to do when it is gone.

    ``job`` is one of its Jobs as a watch event delivered it (the step does not read it
    again); ``priority`` orders the steps waiting for a reconcile slot.
    """
    async with svc.locked(KIND, namespace, name, priority=priority):
        run = await svc.cached(KIND, namespace, name)
        if run is None:
            return DONE
        return await _step(RunEngine(svc, run, () if job is None else (job,)))


async def _step(engine: RunEngine) -> Result:
    """One reconcile; a 403 from the API server is also said on the run, then re-raised."""
    try:
        result = await engine.reconcile()
    except KubeError as error:
        if error.status == 403:
            with contextlib.suppress(KubeError):
                await engine.report_forbidden(error)
        raise
    await engine.clear_forbidden()
    return result


async def resync_run(
    svc: Services, namespace: str, name: str, *, jobs: Iterable[Mapping[str, Any]] = ()
) -> Result | None:
    """The periodic look at a run: only when the operator is idle enough to take it at once.

    At 1,000 runs, resyncs queued behind each other delayed the reconciles that Job events
    ask for by minutes; a skipped resync is taken at the next tick (None: skipped). The run
    is read afresh (the resync is what catches an event the watch lost); ``jobs`` are its
    Jobs as the resync just listed them.
    """
    async with svc.locked_if_idle(KIND, namespace, name) as idle:
        if not idle:
            return None
        run = await svc.kube.get(KIND, namespace, name)
        if run is None:
            return DONE
        return await _step(RunEngine(svc, run, jobs))


def run_references(svc: Services, run: Mapping[str, Any]) -> list[Reference]:
    """What a waiting run waits for (none when its spec cannot be read).

    What its kind names, and the baseline of its non-inferiority gate.
    """
    meta = run.get("metadata") or {}
    uid = meta.get("uid")
    key = f"references@{meta.get('generation')}"

    def read() -> list[Reference]:
        try:
            spec = EvaluationRunSpec.model_validate(run.get("spec") or {})
        except ValidationError:
            return []
        return [*kind_of(spec).references(spec), *baseline_references(spec)]

    return svc.parsed(uid, key, read)
