"""``python -m kyai_testing.engines <engine command line>``: run the engine's stand-in.

Multi-node launches (``sh -c`` scripts, vLLM's ``multi-node-serving.sh`` and ``ray start``,
SGLang with ``--nnodes`` > 1) run in :mod:`kyai_testing.engines._multinode`. Exits 0 on
SIGTERM or SIGINT, with the engine's own status (2 for argparse and click usage
errors, 1 for its ValueErrors) when the command line is refused.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from kyai_testing._model import DoubleConfigError
from kyai_testing.engines import StandinServer, StandinUsageError, _multinode
from kyai_testing.engines._build import build


async def _serve(server: StandinServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await server.start()
    config = server.config
    print(
        f"kyai stand-in for {config.engine} {config.version}: serving {config.model!r} as "
        f"{', '.join(config.served_names)} on {server.url} (context window "
        f"{config.max_model_len} from {config.window_source}; loading for "
        f"{server.load_seconds:g} s)",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await server.stop()
    print(f"kyai stand-in for {config.engine}: stopped", flush=True)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the stand-in of the engine command line ``argv`` until SIGTERM or SIGINT."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if environ is None else environ
    if _multinode.handles(args):
        return _multinode.main(args, env)
    try:
        server = build(args, env)
    except StandinUsageError as exc:
        sys.stderr.write(exc.output)
        return exc.exit_code
    except DoubleConfigError as exc:
        print(f"kyai_testing.engines: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(server))
    except OSError as exc:
        print(
            f"kyai_testing.engines: cannot listen on {server.host}:{server.config.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
