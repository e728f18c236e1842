"""One model over several nodes: the parallel-size check and the group's command lines.

A Workload with ``spec.nodes`` N > 1 is served by LeaderWorkerSet groups of N pods, each with
``spec.resources.gpus`` GPUs. Before anything starts, the engine's parallel sizes (vLLM:
tensor-parallel-size × pipeline-parallel-size; SGLang: tp-size × pp-size; each × the
data-parallel size where the engine multiplies by it, :data:`DATA_PARALLEL`) must use exactly
the group's N × GPUs: too few leaves GPUs idle that the queue counted, too many never starts
(vLLM waits half an hour for a Ray placement group; SGLang asserts). Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kyai.engines._common import (
    Engine,
    EngineArgsError,
    EngineCommand,
    ParallelismError,
    flag_name,
)
from kyai.engines._flags import canonical_flag
from kyai.engines._specs import EngineArgsLike, WorkloadLike


@dataclass(frozen=True, kw_only=True)
class DataParallel:
    """An engine's data-parallel size: copies of the model inside one server.

    Each data-parallel rank has its own tensor × pipeline GPUs, so the size multiplies the
    GPUs a replica uses (vLLM's ``ParallelConfig.world_size_across_dp`` is TP × PP × DP;
    SGLang's ``DataParallelController`` gives each DP rank ``tp_size × pp_size`` GPUs) —
    unless ``shared_by`` is set: then the ranks split the tensor-parallel GPUs instead
    (SGLang's ``--enable-dp-attention``: ``attn_tp_size = tp_size // dp_size``, and the server
    asserts ``tp_size % dp_size == 0``).
    """

    spellings: tuple[str, ...]
    """The size's flag, canonical spellings (the first one named in messages)."""
    shared_by: str | None = None
    """A boolean flag (canonical) with which the ranks share the tensor-parallel GPUs."""
    tensor: str | None = None
    """The canonical tensor-parallel flag the size must divide when ``shared_by`` is set."""


#: Data-parallel sizes by framework (vLLM 0.11 ``--data-parallel-size``/``-dp``; SGLang 0.5
#: ``--dp-size``/``--data-parallel-size``, ``--dp`` being argparse's abbreviation of it).
DATA_PARALLEL: dict[str, DataParallel] = {
    "vllm": DataParallel(spellings=("data-parallel-size", "dp")),
    "sglang": DataParallel(
        spellings=("dp-size", "dp", "data-parallel-size"),
        shared_by="enable-dp-attention",
        tensor="tp-size",
    ),
}


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
    engine_args: EngineArgsLike | None, spellings: Sequence[str]
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


def parallel_sizes(engine: Engine, engine_args: EngineArgsLike | None) -> list[tuple[str, int]]:
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
        sizes.append((flag_name(name), _size(name, raw)))
    return sizes


def _size(name: str, raw: str) -> int:
    try:
        size = int(raw)
    except ValueError:
        size = 0
    if size < 1:
        raise ParallelismError(
            f"The EngineArgsSet sets {name} to {raw!r}: it must be a whole number of at least 1."
        )
    return size


def data_parallel_size(
    engine: Engine, engine_args: EngineArgsLike | None
) -> tuple[str, int, str | None] | None:
    """(flag, size, the flag sharing the tensor-parallel GPUs if set) of the data-parallel size.

    None when the engine has none or the EngineArgsSet does not set it. Raises
    :class:`ParallelismError` for a size that is not a whole number ≥ 1.
    """
    rule = DATA_PARALLEL.get(engine.framework)
    if rule is None:
        return None
    found = flag_value(engine_args, rule.spellings)
    if found is None:
        return None
    name, raw = found
    shared = flag_value(engine_args, (rule.shared_by,)) if rule.shared_by else None
    sharing = None if shared is None or shared[1].lower() == "false" else flag_name(shared[0])
    return flag_name(name), _size(name, raw), sharing


def check_parallelism(
    engine: Engine, workload: WorkloadLike, engine_args: EngineArgsLike | None
) -> None:
    """Refuse parallel sizes whose product is not the group's GPUs (nodes × GPUs per node).

    The data-parallel size, when set, multiplies the product, or (SGLang's
    ``--enable-dp-attention``) must divide the tensor-parallel size and adds no GPU.
    Raises :class:`ParallelismError` naming the flags, their values and both products.
    """
    sizes = parallel_sizes(engine, engine_args)
    if not sizes:
        return
    nodes, gpus = workload.nodes, workload.resources.gpus
    wanted = nodes * gpus
    data_parallel = data_parallel_size(engine, engine_args)
    note = ""
    if data_parallel is not None:
        name, size, shared = data_parallel
        if shared is None:
            sizes.append((name, size))
        else:
            note = _shared_note(engine, sizes, name, size, shared)
    product = math.prod(size for _, size in sizes)
    if product == wanted:
        return
    flags = " × ".join(name for name, _ in sizes)
    values = " × ".join(f"{name} {size}" for name, size in sizes)
    raise ParallelismError(
        f"{engine.framework} on spec.nodes {nodes} × spec.resources.gpus {gpus} = {wanted} "
        f"GPUs per replica needs {flags} = {wanted}, but the EngineArgsSet gives {values} = "
        f"{product}{note}: set the parallel sizes (or spec.nodes, spec.resources.gpus) so "
        "that they match"
    )


def _shared_note(
    engine: Engine, sizes: list[tuple[str, int]], name: str, size: int, shared: str
) -> str:
    """Why a data-parallel size that shares the tensor-parallel GPUs is not in the product.

    Raises :class:`ParallelismError` when it does not divide the tensor-parallel size.
    """
    rule = DATA_PARALLEL[engine.framework]
    assert engine.multinode is not None and rule.tensor is not None
    index = next(i for i, spellings in enumerate(engine.multinode.parallel_flags)
                 if rule.tensor in spellings)  # fmt: skip
    tensor_name, tensor = sizes[index]
    if tensor % size:
        raise ParallelismError(
            f"{engine.framework} with {shared} splits {tensor_name} among the data-parallel "
            f"ranks, so {name} must divide it, but the EngineArgsSet gives {tensor_name} "
            f"{tensor} and {name} {size}: set {name} to a divisor of {tensor_name}"
        )
    return f" ({name} {size} with {shared} splits {tensor_name}, adding no GPU)"


def group_commands(
    engine: Engine,
    workload: WorkloadLike,
    engine_args: EngineArgsLike | None,
    *,
    image: str | None = None,
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
    single = engine.command(workload, engine_args, image=image)
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
    "DATA_PARALLEL",
    "DataParallel",
    "GroupCommands",
    "check_parallelism",
    "data_parallel_size",
    "flag_value",
    "group_commands",
    "parallel_sizes",
]
