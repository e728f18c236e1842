"""How the long-running commands (``kyai operator``, ``kyai devcluster``) run.

* The event loop: uvloop's when it is installed (``kopf run`` picks it the same way). The
  operator's loop wakes tens of thousands of times a minute under load (watch streams, API
  calls), and the devcluster's more: libuv does that in a fraction of the CPU of asyncio's
  selector loop (at 1,000 runs, the operator's CPU fell by a tenth).
  ``KYAI_ASYNCIO_LOOP=asyncio`` keeps asyncio's own loop.
* The cyclic garbage collector (:func:`tune_collector`): both keep large heaps of parsed
  objects (watch caches, stored objects) that make none of the cycles the collector is for,
  yet at CPython's thresholds it scanned them whole a dozen times in a 1,000-run burst:
  2.8 s of the operator's CPU and 2.0 s of the devcluster's, with pauses of up to 0.3 s.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable

#: The variable that picks asyncio's own loop (value ``asyncio``).
LOOP_VARIABLE = "KYAI_ASYNCIO_LOOP"

#: Set in processes that run under ``kyai devcluster``'s name-resolution shim (pods of the
#: process runtime, and what tests start with its ``network_env``): the shim patches
#: Python's ``socket`` resolver and binds, which uvloop's own (libuv's) do not go through.
SHIM_VARIABLES = ("KYAI_DEVCLUSTER_HOSTS", "KYAI_DEVCLUSTER_POD_IP")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``asyncio.Runner``'s ``loop_factory``: uvloop's, or None for asyncio's default.

    asyncio's own under the devcluster's shim (:data:`SHIM_VARIABLES`) or when
    :data:`LOOP_VARIABLE` asks for it.
    """
    if os.environ.get(LOOP_VARIABLE, "").strip().lower() == "asyncio":
        return None
    if any(os.environ.get(name) for name in SHIM_VARIABLES):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


#: Collection thresholds of a long-running command (CPython's defaults: 700, 10, 10): the
#: youngest generation every 20,000 allocations (as the engine's workers do in a phase),
#: the middle one every 50 of those, the oldest (the whole heap) every 100 of those at the
#: most (and, as always, only once a quarter of it is new).
SERVICE_THRESHOLDS = (20_000, 50, 100)


def tune_collector() -> bool:
    """Set the collector up for a long-running command; whether it was changed.

    What start-up made is frozen out of the scans (``gc.freeze``) and the thresholds are
    :data:`SERVICE_THRESHOLDS`. Nothing changes with ``KYAI_GC_DEFAULTS=1`` (to compare) or
    a collector switched off.
    """
    if os.environ.get("KYAI_GC_DEFAULTS") == "1" or not gc.isenabled():
        return False
    gc.freeze()
    gc.set_threshold(*SERVICE_THRESHOLDS)
    return True
