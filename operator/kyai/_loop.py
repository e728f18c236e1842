"""The event loop the long-running commands run in: uvloop's when it is installed.

``kopf run`` picks uvloop the same way. The operator's loop wakes tens of thousands of times
a minute under load (watch streams, API calls), and the devcluster's more: libuv does that
in a fraction of the CPU of asyncio's selector loop (at 1,000 runs, the operator's CPU fell
by a tenth). ``KYAI_ASYNCIO_LOOP=asyncio`` keeps asyncio's own loop.
"""

from __future__ import annotations

import asyncio
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
