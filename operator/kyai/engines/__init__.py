"""Serving engines: the vLLM, SGLang and TensorRT-LLM command lines and their quirks.

:func:`engine_command` builds an engine container's ``command`` and ``args`` from a Workload
and its EngineArgsSet; :func:`engine_env` its environment; :func:`engine_for` gives a
framework's :class:`Engine` profile (health route, flag names, the documents checked).
:func:`check_flags` checks an EngineArgsSet's flags against the flag table of an engine
version (``flags/<engine>/<version>.json``, written by ``make engine-flags`` from the
engines' own parsers); :func:`engine_tables` lists the tables shipped.

The engines sit below the API models and never import them: they read a Workload and an
EngineArgsSet through the protocols of :mod:`kyai.engines._specs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kyai.engines import sglang, trtllm, vllm
from kyai.engines._common import (
    Engine,
    EngineArgsError,
    EngineCommand,
    MultiNode,
    ParallelismError,
    check_engine_args,
    engine_env,
    flag_errors_message,
    flag_name,
    owned_flags_used,
)
from kyai.engines._flags import (
    Flag,
    FlagPlan,
    FlagTable,
    TableChoice,
    canonical_flag,
    engine_tables,
    image_version,
    table_for,
)
from kyai.engines._multinode import GroupCommands, check_parallelism, group_commands
from kyai.engines._specs import EngineArgsLike, WorkloadLike

#: The registry: every supported framework's profile, by its name in the API. Adding an
#: engine is one module beside these plus one entry here (then ``make crds``).
ENGINES: Mapping[str, Engine] = MappingProxyType(
    {engine.framework: engine for engine in (vllm.ENGINE, sglang.ENGINE, trtllm.ENGINE)}
)


def framework_list() -> str:
    """The frameworks in prose for messages and descriptions: ``vllm, sglang or trtllm``."""
    names = list(ENGINES)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def engine_for(framework: str) -> Engine:
    """The profile of ``framework`` (vllm, sglang or trtllm)."""
    try:
        return ENGINES[framework]
    except KeyError:
        raise EngineArgsError(
            f"Unknown framework {framework!r}: expected one of {', '.join(ENGINES)}."
        ) from None


def engine_command(
    workload: WorkloadLike, engine_args: EngineArgsLike | None = None, *, image: str | None = None
) -> EngineCommand:
    """The container command line serving ``workload`` (see :meth:`Engine.command`).

    ``image`` is the image the engine container runs (its tag's version picks the flag
    table); default: the Workload's ``spec.image``, else the engine's default image.
    """
    return engine_for(workload.engine).command(workload, engine_args, image=image)


def engine_group_commands(
    workload: WorkloadLike, engine_args: EngineArgsLike | None = None, *, image: str | None = None
) -> GroupCommands:
    """The leader's and workers' command lines on ``spec.nodes`` nodes (a LWS group)."""
    return group_commands(engine_for(workload.engine), workload, engine_args, image=image)


def check_flags(engine_args: EngineArgsLike, image: str | None = None) -> FlagPlan:
    """``engine_args``' flags checked against the table of the version ``image`` runs.

    The plan's ``errors`` refuse the flags (unknown flags, values the version does not take,
    a ``false`` the engine cannot honour); ``warnings`` are the same findings against the
    newest table when the version has none of its own; ``notes`` say what was not passed
    because it is the engine's default. Owned flags and flags named twice are refused too.
    """
    engine = engine_for(engine_args.framework)
    plan = engine.plan(engine_args, image)
    try:
        check_engine_args(engine_args, engine.owned_flags)
    except EngineArgsError as exc:
        plan.errors.insert(0, str(exc))
    return plan


def served_model_name(workload: WorkloadLike) -> str:
    """The model name the Workload's engine will report on ``/v1/models``."""
    if workload.endpoint is not None:
        return workload.served_name
    return engine_for(workload.engine).served_model_name(workload)


__all__ = [
    "ENGINES",
    "Engine",
    "EngineArgsError",
    "EngineArgsLike",
    "EngineCommand",
    "Flag",
    "FlagPlan",
    "FlagTable",
    "GroupCommands",
    "MultiNode",
    "ParallelismError",
    "TableChoice",
    "WorkloadLike",
    "canonical_flag",
    "check_engine_args",
    "check_flags",
    "check_parallelism",
    "engine_command",
    "engine_env",
    "engine_for",
    "engine_group_commands",
    "engine_tables",
    "flag_errors_message",
    "flag_name",
    "framework_list",
    "image_version",
    "owned_flags_used",
    "served_model_name",
    "table_for",
]
