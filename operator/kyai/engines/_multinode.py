"""One model over several nodes: the parallel-size check and the group's command lines.

A Workload with ``spec.nodes`` N > 1 is served by LeaderWorkerSet groups of N pods, each with
``spec.resources.gpus`` GPUs. Before anything starts, the engine's parallel sizes (vLLM:
tensor-parallel-size × pipeline-parallel-size; SGLang: tp-size × pp-size) must use exactly
the group's N × GPUs: too few leaves GPUs idle that the queue counted, too many never starts
(vLLM waits half an hour for a Ray placement group; SGLang asserts). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kyai.engines._common import (
    Engine,
    EngineArgsError,
    EngineCommand,
    ParallelismError,
    canonical_flag,
)

if TYPE_CHECKING:
    from kyai.api.engineargsset import EngineArgsSetSpec
    from kyai.api.workload import WorkloadSpec


@dataclass(frozen=True)
class GroupCommands:
    """The command lines of a LeaderWorkerSet group's leader and workers."""

    leader: EngineCommand
    """The leader's: it serves the OpenAI API (probes and the Service reach it only)."""
    worker: EngineCommand
    """Every worker's (``LWS_WORKER_INDEX`` 1 … N-1)."""


def _from_extra_args(
    extra_args: Sequence[str], spellings: frozenset[str]
) -> tuple[str, str] | None:
    for index, arg in enumerate(extra_args):
        if not arg.startswith("-"):
            continue
        name, equals, value = arg.partition("=")
        if canonical_flag(name) not in spellings:
            continue
        if equals:
            return name, value
        if index + 1 < len(extra_args):
            return name, extra_args[index + 1]
        return name, ""
    return None


def flag_value(
    engine_args: EngineArgsSetSpec | None, spellings: Sequence[str]
) -> tuple[str, str] | None:
    """(the flag as written, its value) of the first of ``spellings`` the EngineArgsSet sets.

    ``spellings`` are canonical (:func:`canonical_flag`); ``args`` are read before
    ``extraArgs`` (``--flag value`` or ``--flag=value``). None: the flag is not set.
    """
    if engine_args is None:
        return None
    wanted = frozenset(spellings)
    for name, value in engine_args.args.items():
        if canonical_flag(name) in wanted and value is not None and value is not False:
            return name, str(value)
    return _from_extra_args(engine_args.extra_args, wanted)


def parallel_sizes(engine: Engine, engine_args: EngineArgsSetSpec | None) -> list[tuple[str, int]]:
    """(flag, size) of each of the engine's parallel sizes; 1 for a size not set.

    Raises :class:`ParallelismError` for a size that is not a whole number ≥ 1.
    """
    if engine.multinode is None:
        return []
    sizes: list[tuple[str, int]] = []
    for spellings in engine.multinode.parallel_flags:
        found = flag_value(engine_args, spellings)
        if found is None:
            sizes.append((f"--{spellings[0]}", 1))
            continue
        name, raw = found
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            raise ParallelismError(
                f"The EngineArgsSet sets {name} to {raw!r}: it must be a whole number of at "
                "least 1."
            )
        sizes.append((name if name.startswith("-") else f"--{name}", size))
    return sizes


def check_parallelism(
    engine: Engine, workload: WorkloadSpec, engine_args: EngineArgsSetSpec | None
) -> None:
    """Refuse parallel sizes whose product is not the group's GPUs (nodes × GPUs per node).

    Raises :class:`ParallelismError` naming the flags, their values and both products.
    """
    sizes = parallel_sizes(engine, engine_args)
    if not sizes:
        return
    nodes, gpus = workload.nodes, workload.resources.gpus
    wanted = nodes * gpus
    product = math.prod(size for _, size in sizes)
    if product == wanted:
        return
    flags = " × ".join(name for name, _ in sizes)
    values = " × ".join(f"{name} {size}" for name, size in sizes)
    raise ParallelismError(
        f"{engine.framework} on spec.nodes {nodes} × spec.resources.gpus {gpus} = {wanted} "
        f"GPUs per replica needs {flags} = {wanted}, but the EngineArgsSet gives {values} = "
        f"{product}: set the parallel sizes (or spec.nodes, spec.resources.gpus) so that they "
        "match"
    )


def group_commands(
    engine: Engine, workload: WorkloadSpec, engine_args: EngineArgsSetSpec | None
) -> GroupCommands:
    """The leader's and workers' command lines serving ``workload`` on ``spec.nodes`` nodes.

    Raises :class:`EngineArgsError` when the engine has no multi-node launch (naming
    ``spec.nodes``) or the EngineArgsSet sets a flag the operator owns on several nodes, and
    :class:`ParallelismError` when the parallel sizes do not use the group's GPUs.
    """
    multinode = engine.multinode
    if multinode is None:
        raise EngineArgsError(
            f"spec.nodes is {workload.nodes}, but {engine.framework} is served on one node "
            "only: set spec.nodes to 1."
        )
    single = engine.command(workload, engine_args)
    if engine_args is not None:
        named = [*engine_args.args, *(a for a in engine_args.extra_args if a.startswith("-"))]
        used = sorted(
            {canonical_flag(name.partition("=")[0]) for name in named} & multinode.owned_flags
        )
        if used:
            raise EngineArgsError(
                f"The EngineArgsSet sets {', '.join(used)}, which the operator sets itself on "
                f"several nodes (spec.nodes {workload.nodes}): remove them."
            )
    check_parallelism(engine, workload, engine_args)
    return GroupCommands(leader=multinode.leader(single), worker=multinode.worker(single))


__all__ = [
    "GroupCommands",
    "check_parallelism",
    "flag_value",
    "group_commands",
    "parallel_sizes",
]
