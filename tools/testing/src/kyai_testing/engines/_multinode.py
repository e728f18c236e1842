"""Multi-node launches of the stand-ins: vLLM on Ray, SGLang's ``--nnodes``, shell scripts.

What a LeaderWorkerSet pod of an engine image runs (its ``LWS_*`` variables expanded by the
kubelet), as the engines' docs and LWS's examples (``docs/examples/vllm``, ``sglang``) show:

- ``sh -c "<script>"`` / ``bash -c``: the script's commands run one after the other (``;``,
  ``&&``, ``||``, newlines; ``exec``, ``echo``, ``sleep``, ``true``, ``false``; ``$VAR``
  expanded), each of them one of the commands below; another command is "not found" (127).
- vLLM's ``examples/online_serving/multi-node-serving.sh`` (any path, run by ``bash``/``sh`` or
  directly) ``leader --ray_cluster_size=N [--ray_port=P] [--ray_init_timeout=T] [ray args]``
  and ``worker --ray_address=HOST [--ray_port=P] [--ray_init_timeout=T] [ray args]``, as the
  script does it: the leader starts a Ray head and returns once exactly N nodes are alive (1
  on timeout, after "Waiting for all ray workers to be active timed out."); the worker runs
  ``ray start --address=HOST:P --block`` and retries every 5 s until the timeout (default 300).
- ``ray start --head [--port=6379] [--num-gpus=G] [--block]`` and ``ray start
  --address=HOST:PORT [--num-gpus=G] [--block]``: the stand-in "Ray" is a TCP server in the
  head's process; a node joins by connecting and stays alive while the connection is open
  (``--block`` returns 1 when the head goes). Its GPUs: ``--num-gpus``, else the devices of
  ``NVIDIA_VISIBLE_DEVICES`` (which the devcluster's kubelet sets from ``nvidia.com/gpu``, as
  the NVIDIA device plugin does), else unknown (then no GPU check is made). ``ray status``
  prints the nodes.
- ``vllm serve ...`` after a Ray head: with ``tensor-parallel-size × pipeline-parallel-size``
  more than the node's GPUs (or ``--distributed-executor-backend ray``) the engine runs on the
  Ray cluster as vLLM 0.11 does (``vllm/executor/ray_utils.py`` ``initialize_ray_cluster``):
  no GPU on the head node is a ValueError; fewer GPUs in the cluster than the world size logs
  "The number of required GPUs exceeds the total number of available GPUs in the placement
  group." and waits for the placement group (serving nothing) for 1800 s, then fails with
  "Cannot provide a placement group of placement_group_specs=... within 1800 seconds...". A
  Ray node leaving a serving engine kills it (exit 1), as a dead Ray worker actor does.
- ``python3 -m sglang.launch_server ... --nnodes N --node-rank R --dist-init-addr HOST:PORT``
  (SGLang 0.5.3, ``srt/server_args.py``, ``srt/entrypoints/engine.py``): ``tp × pp`` must be
  divisible by N ("AssertionError: tp_size must be divisible by number of nodes"); rank 0 hosts
  the rendezvous on PORT and serves HTTP only once the N-1 other ranks joined; a rank ≥ 1
  joins HOST:PORT (retrying while it is not up), then serves the dummy health server of
  ``launch_dummy_health_check_server`` (``/health``, ``/health_generate``: 200) on its
  ``--host``/``--port`` and blocks. A rank leaving ends rank 0 (exit 1) and vice versa, as
  a broken NCCL group does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import sys
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from aiohttp import web

from kyai_testing.engines import sglang, vllm
from kyai_testing.engines._build import build
from kyai_testing.engines._common import ENV_POD_IP, StandinUsageError

SHELLS = frozenset({"sh", "bash", "dash"})
SCRIPT = "multi-node-serving.sh"
GPU_VARIABLE = "NVIDIA_VISIBLE_DEVICES"
RAY_PORT = 6379
#: vllm/executor/ray_utils.py PG_WAIT_TIMEOUT.
PG_WAIT_TIMEOUT = 1800
#: How long ``ray start --address`` keeps trying to reach the head before failing.
RAY_CONNECT_SECONDS = 15.0
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")


def say(text: str, *, error: bool = False) -> None:
    print(text, file=sys.stderr if error else sys.stdout, flush=True)


def _sglang_nnodes(argv: Sequence[str]) -> int:
    for index, arg in enumerate(argv):
        value = None
        if arg == "--nnodes" and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith("--nnodes="):
            value = arg.split("=", 1)[1]
        if value is not None:
            with contextlib.suppress(ValueError):
                return int(value)
    return 1


def handles(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is a multi-node launch this module runs (else: a plain engine)."""
    if not argv:
        return False
    name = PurePath(argv[0]).name
    if name in SHELLS or name == "ray" or name == SCRIPT:
        return True
    return sglang.matches(argv) and _sglang_nnodes(argv) > 1


def node_gpus(params: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """A Ray node's GPUs: ``--num-gpus``, else ``NVIDIA_VISIBLE_DEVICES``, else unknown."""
    for index, arg in enumerate(params):
        if arg.startswith("--num-gpus="):
            return int(arg.split("=", 1)[1])
        if arg == "--num-gpus" and index + 1 < len(params):
            return int(params[index + 1])
    return local_gpus(environ)


def local_gpus(environ: Mapping[str, str]) -> int | None:
    """The GPUs ``NVIDIA_VISIBLE_DEVICES`` gives this container (None: not set or ``all``)."""
    raw = environ.get(GPU_VARIABLE)
    if raw is None or raw.strip() == "all":
        return None
    if raw.strip() in ("", "void", "none"):
        return 0
    return len([part for part in raw.split(",") if part.strip()])


def bind_address(environ: Mapping[str, str]) -> str:
    """Where a server on "all interfaces" binds: the pod's IP in the devcluster."""
    return environ.get(ENV_POD_IP, "").strip() or "0.0.0.0"


# -- the Ray stand-in ------------------------------------------------------------------------


@dataclass
class RayCluster:
    """The Ray head of this process and the nodes connected to it."""

    head_gpus: int | None = None
    nodes: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.AbstractServer | None = None
    address: str = ""

    def alive(self) -> int:
        return 1 + len(self.nodes)

    def gpus(self) -> int | None:
        """The cluster's GPUs (None when a node's are unknown)."""
        counts = [self.head_gpus, *(gpus for _, gpus in self.nodes.values())]
        if any(count is None for count in counts):
            return None
        return sum(count for count in counts if count is not None)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def serve(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._join, host, port)
        self.address = f"{host}:{port}"

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = id(writer)
        try:
            line = await reader.readline()
            hello = json.loads(line or b"{}")
            self.nodes[key] = (str(hello.get("node", "?")), hello.get("gpus"))
            writer.write(b'{"ok": true}\n')
            await writer.drain()
            self.notify()
            while await reader.read(1024):
                pass
        except (OSError, ValueError):
            pass
        finally:
            if self.nodes.pop(key, None) is not None:
                self.notify()
            writer.close()


@dataclass
class Session:
    """What one stand-in process holds across a script's commands."""

    environ: Mapping[str, str]
    stop: asyncio.Event
    ray: RayCluster | None = None
    #: Connections of ``ray start --address`` without ``--block`` (kept open).
    links: list[asyncio.StreamWriter] = field(default_factory=list)


async def _wait(
    session: Session, awaitable: Coroutine[Any, Any, object] | None, seconds: float
) -> bool:
    """Wait for ``awaitable`` (or ``seconds``); False when the stop event came first."""
    stop: asyncio.Future[object] = asyncio.ensure_future(session.stop.wait())
    waiting = {stop}
    if awaitable is not None:
        waiting.add(asyncio.ensure_future(awaitable))
    done, pending = await asyncio.wait(waiting, timeout=seconds, return_when="FIRST_COMPLETED")
    for task in pending:
        task.cancel()
    return stop not in done


def _ray_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray start", add_help=False)
    parser.add_argument("--head", action="store_true")
    parser.add_argument("--address")
    parser.add_argument("--port", type=int)
    parser.add_argument("--block", action="store_true")
    parser.add_argument("--num-gpus", type=int)
    return parser


async def ray_command(session: Session, args: Sequence[str]) -> int:
    """``ray start ...`` / ``ray status``."""
    if args[:1] == ["status"]:
        cluster = session.ray
        if cluster is None:
            say("ConnectionError: Could not find any running Ray instance.", error=True)
            return 1
        say(f"======== Autoscaler status ========\nActive:\n {cluster.alive()} node(s)")
        say(f"Resources\n {cluster.gpus()} GPU" if cluster.gpus() is not None else "Resources")
        return 0
    if args[:1] != ["start"]:
        say(f"Usage: ray [OPTIONS] COMMAND [ARGS]...\nError: No such command '{args[:1]}'.")
        return 2
    parsed, _ = _ray_parser().parse_known_args(list(args[1:]))
    gpus = parsed.num_gpus if parsed.num_gpus is not None else local_gpus(session.environ)
    if parsed.head:
        cluster = session.ray = session.ray or RayCluster()
        cluster.head_gpus = gpus
        port = parsed.port or RAY_PORT
        try:
            await cluster.serve(bind_address(session.environ), port)
        except OSError as exc:
            say(f"ray start --head: cannot listen on port {port}: {exc}", error=True)
            return 1
        say("Ray runtime started.")
        say(
            "To add another node to this Ray cluster, run\n"
            f"  ray start --address='{cluster.address}'"
        )
        if parsed.block:
            await session.stop.wait()
        return 0
    if not parsed.address:
        say("ray start: either --head or --address is needed.", error=True)
        return 1
    host, _, port_text = str(parsed.address).rpartition(":")
    port = int(port_text) if port_text.isdigit() else RAY_PORT
    host = host or str(parsed.address)
    deadline = time.monotonic() + RAY_CONNECT_SECONDS
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            hello = {"node": socket.gethostname(), "gpus": gpus}
            writer.write(json.dumps(hello).encode() + b"\n")
            await writer.drain()
            if not await reader.readline():
                raise ConnectionError("the head closed the connection")
            break
        except (OSError, ConnectionError):
            if time.monotonic() > deadline:
                say(
                    f"ConnectionError: ray client connection timeout: unable to connect to GCS "
                    f"at {host}:{port}",
                    error=True,
                )
                return 1
            if not await _wait(session, None, 0.2):
                return 0
    say("Ray runtime started.")
    if not parsed.block:
        session.links.append(writer)
        return 0
    say("--block\n  This command will now block forever until terminated by a signal.")

    async def until_closed() -> None:
        while await reader.read(1024):
            pass

    if not await _wait(session, until_closed(), float("inf")):
        writer.close()
        return 0
    say("Some Ray subprocesses exited unexpectedly:\n  gcs_server [exit code=1]", error=True)
    return 1


async def script_command(session: Session, args: Sequence[str]) -> int:
    """VLLM's ``multi-node-serving.sh leader|worker ...``, as the script does it."""
    subcommand, rest = (args[0], list(args[1:])) if args else ("", [])
    ray_port, timeout, start_params = RAY_PORT, 300, []
    size = address = ""
    for arg in rest:
        name, _, value = arg.partition("=")
        if name == "--ray_port":
            ray_port = int(value)
        elif name == "--ray_init_timeout":
            timeout = int(value)
        elif name == "--ray_cluster_size" and subcommand == "leader":
            size = value
        elif name == "--ray_address" and subcommand == "worker":
            address = value
        else:
            start_params.append(arg)
    if subcommand == "worker":
        if not address:
            say("Error: Missing argument --ray_address")
            return 1
        for _ in range(0, timeout, 5):
            start = ["start", f"--address={address}:{ray_port}", "--block", *start_params]
            if await ray_command(session, start) == 0:
                say(f"Worker: Ray runtime started with head address {address}:{ray_port}")
                return 0
            say("Waiting until the ray worker is active...")
            if not await _wait(session, None, 5):
                return 0
        say(f"Ray worker starts timeout, head address: {address}:{ray_port}")
        return 1
    if subcommand == "leader":
        if not size:
            say("Error: Missing argument --ray_cluster_size")
            return 1
        await ray_command(session, ["start", "--head", f"--port={ray_port}", *start_params])
        cluster = session.ray
        if cluster is None:
            return 1
        deadline = time.monotonic() + timeout
        said = 0.0
        while time.monotonic() < deadline:
            if str(cluster.alive()) == size.strip():
                say("All ray workers are active and the ray cluster is initialized successfully.")
                return 0
            if time.monotonic() - said >= 5:
                said = time.monotonic()
                say(f"Wait for all ray workers to be active. {cluster.alive()}/{size} is active")
            if not await _wait(session, cluster.changed.wait(), 1.0):
                return 0
        say("Waiting for all ray workers to be active timed out.")
        return 1
    say(f"unknown subcommand: {subcommand}")
    return 1


# -- engines ---------------------------------------------------------------------------------


async def _serve_until(session: Session, argv: Sequence[str], broken: asyncio.Event | None) -> int:
    """Serve the engine of ``argv`` until SIGTERM (0) or until ``broken`` is set (1)."""
    server = build(argv, session.environ)
    try:
        await server.start()
    except OSError as exc:
        say(f"kyai_testing.engines: cannot listen on {server.host}:{server.config.port}: {exc}")
        return 1
    config = server.config
    say(
        f"kyai stand-in for {config.engine} {config.version}: serving {config.model!r} as "
        f"{', '.join(config.served_names)} on {server.url}"
    )
    try:
        if broken is None:
            await session.stop.wait()
            return 0
        if await _wait(session, broken.wait(), float("inf")):
            return 1
        return 0
    finally:
        await server.stop()


async def vllm_command(session: Session, argv: Sequence[str]) -> int:
    """``vllm serve ...``: on the Ray cluster when the node's GPUs are too few."""
    config = vllm.parse(argv, session.environ)
    settings = config.settings
    world = int(settings["tensor_parallel_size"]) * int(settings["pipeline_parallel_size"])
    mine = local_gpus(session.environ)
    backend = settings.get("distributed_executor_backend")
    on_ray = backend == "ray" or (
        backend is None and world > 1 and (mine < world if mine is not None else bool(session.ray))
    )
    if not on_ray:
        return await _serve_until(session, argv, None)
    cluster = session.ray
    if cluster is None:  # ray.init() starts a one-node Ray instance of this node
        cluster = session.ray = RayCluster(head_gpus=mine)
    if cluster.head_gpus == 0:
        say(
            "ValueError: Current node has no GPU available. current_node_resource={'CPU': 1.0}. "
            "vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available "
            f"in a node current_node_id=... current_ip={bind_address(session.environ)}.",
            error=True,
        )
        return 1
    specs = [{"GPU": 1.0} for _ in range(world)]
    total = cluster.gpus()
    if total is not None and world > total:
        say(
            "WARNING ray_utils.py: The number of required GPUs exceeds the total number of "
            "available GPUs in the placement group.",
            error=True,
        )
    deadline = time.monotonic() + PG_WAIT_TIMEOUT
    while (total := cluster.gpus()) is not None and world > total:
        if time.monotonic() > deadline:
            say(
                f"ValueError: Cannot provide a placement group of placement_group_specs={specs} "
                f"within {PG_WAIT_TIMEOUT} seconds. See `ray status` and `ray list nodes` to make "
                "sure the cluster has enough resources.",
                error=True,
            )
            return 1
        if not await _wait(session, cluster.changed.wait(), 10.0):
            return 0
    broken = asyncio.Event()
    nodes = set(cluster.nodes)

    async def watch() -> None:
        while set(cluster.nodes) >= nodes:
            await cluster.changed.wait()
        say(
            "ERROR: a Ray node of the engine died (RayWorkerWrapper actor died); "
            "the engine is dead."
        )
        broken.set()

    watcher = asyncio.ensure_future(watch())
    try:
        return await _serve_until(session, argv, broken)
    finally:
        watcher.cancel()


async def _dummy_health(host: str, port: int) -> web.AppRunner:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(status=200)

    app = web.Application()
    app.router.add_get("/health", ok)
    app.router.add_get("/health_generate", ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def sglang_command(session: Session, argv: Sequence[str]) -> int:
    """``python3 -m sglang.launch_server ... --nnodes N --node-rank R --dist-init-addr A``."""
    config = sglang.parse(argv, session.environ)
    settings = config.settings
    nnodes, rank = int(settings["nnodes"]), int(settings["node_rank"])
    if nnodes <= 1:
        return await _serve_until(session, argv, None)
    world = int(settings["tp_size"]) * int(settings["pp_size"])
    if world % nnodes:
        say("AssertionError: tp_size must be divisible by number of nodes", error=True)
        return 1
    mine = local_gpus(session.environ)
    if mine is not None and mine < world // nnodes:
        say("RuntimeError: CUDA error: invalid device ordinal", error=True)
        return 1
    address = settings.get("dist_init_addr")
    if not address:
        say(
            "kyai stand-in for sglang: --nnodes > 1 without --dist-init-addr: the ranks cannot "
            "meet (SGLang would wait on 127.0.0.1).",
            error=True,
        )
        return 1
    host, _, port_text = str(address).rpartition(":")
    port = int(port_text)
    if rank == 0:
        joined: dict[int, asyncio.StreamWriter] = {}
        changed = asyncio.Event()
        left = asyncio.Event()

        async def join(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                other = int(json.loads(await reader.readline() or b"{}").get("rank", -1))
                if not 0 < other < nnodes or other in joined:
                    writer.close()
                    return
                joined[other] = writer
                writer.write(b'{"ok": true}\n')
                await writer.drain()
                changed.set()
                while await reader.read(1024):
                    pass
                left.set()
            except (OSError, ValueError):
                left.set()

        server = await asyncio.start_server(join, bind_address(session.environ), port)
        try:
            say(f"Waiting for {nnodes - 1} other node(s) at {address} (node rank 0)")
            while len(joined) < nnodes - 1:
                changed.clear()
                if not await _wait(session, changed.wait(), float("inf")):
                    return 0
            code = await _serve_until(session, argv, left)
            if code:
                say(
                    "RuntimeError: NCCL communicator was aborted: a node left the group.",
                    error=True,
                )
            return code
        finally:
            server.close()
            for writer in joined.values():
                writer.close()
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(json.dumps({"rank": rank}).encode() + b"\n")
            await writer.drain()
            if await reader.readline():
                break
            writer.close()
        except OSError:
            pass
        if not await _wait(session, None, 0.2):
            return 0
    health_host = config.host
    pod_ip = session.environ.get(ENV_POD_IP, "").strip()
    if pod_ip and health_host in ("0.0.0.0", "::", "", "127.0.0.1", "localhost"):
        health_host = pod_ip  # a pod's own loopback is private on a node, shared here
    runner = await _dummy_health(health_host, config.port)
    say(f"kyai stand-in for sglang: node rank {rank} of {nnodes} joined {address}")

    async def until_closed() -> None:
        while await reader.read(1024):
            pass

    try:
        if await _wait(session, until_closed(), float("inf")):
            say("RuntimeError: NCCL communicator was aborted: node rank 0 left.", error=True)
            return 1
        return 0
    finally:
        writer.close()
        await runner.cleanup()


# -- shell -----------------------------------------------------------------------------------


def _expand(token: str, environ: Mapping[str, str]) -> str:
    return _VAR.sub(lambda m: environ.get(m.group(1) or m.group(2), ""), token)


def split_script(script: str, environ: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """``[(connector, argv)]``: the commands of a script with ``;``/``&&``/``||`` before each."""
    lexer = shlex.shlex(script.replace("\n", ";"), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[tuple[str, list[str]]] = []
    connector, current = ";", list[str]()
    for token in lexer:
        if token in (";", "&&", "||"):
            if current:
                commands.append((connector, current))
            connector, current = token, []
        else:
            current.append(_expand(token, environ))
    if current:
        commands.append((connector, current))
    return commands


async def command(session: Session, argv: list[str]) -> int:
    """Run one command of a script (or the container's whole command line)."""
    while argv and argv[0] == "exec":
        argv = argv[1:]
    if not argv:
        return 0
    name = PurePath(argv[0]).name
    try:
        if name in SHELLS:
            if len(argv) >= 3 and argv[1] == "-c":
                return await run_script(session, argv[2])
            if len(argv) >= 2:
                return await command(session, argv[1:])
            return 0
        if name == SCRIPT:
            return await script_command(session, argv[1:])
        if name == "ray":
            return await ray_command(session, argv[1:])
        if vllm.matches(argv):
            return await vllm_command(session, argv)
        if sglang.matches(argv):
            return await sglang_command(session, argv)
    except StandinUsageError as exc:
        sys.stderr.write(exc.output)
        return exc.exit_code
    if name == "echo":
        say(" ".join(argv[1:]))
        return 0
    if name == "sleep":
        seconds = float(argv[1].rstrip("s")) if len(argv) > 1 else 0.0
        await _wait(session, None, seconds)
        return 0
    if name in ("true", ":"):
        return 0
    if name == "false":
        return 1
    say(f"sh: 1: {argv[0]}: not found", error=True)
    return 127


async def run_script(session: Session, script: str) -> int:
    """``sh -c SCRIPT``: the commands in order, ``&&``/``||`` short-circuiting."""
    status = 0
    for connector, argv in split_script(script, session.environ):
        if session.stop.is_set():
            return 0
        if (connector == "&&" and status != 0) or (connector == "||" and status == 0):
            continue
        status = await command(session, argv)
    return status


async def _main(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    session = Session(environ=environ, stop=stop)
    try:
        return await command(session, list(argv))
    finally:
        for link in session.links:
            link.close()
        if session.ray is not None and session.ray.server is not None:
            session.ray.server.close()


def main(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Run a multi-node launch (see the module docstring) until it ends or SIGTERM."""
    return asyncio.run(_main(argv, os.environ if environ is None else environ))
