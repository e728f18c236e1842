"""Serving engines: the vLLM, SGLang and TensorRT-LLM command lines and their quirks.

:func:`engine_command` builds an engine container's ``command`` and ``args`` from a Workload
and its EngineArgsSet; :func:`engine_env` its environment; :func:`engine_for` gives a
framework's :class:`Engine` profile (health route, flag names, the documents checked).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from kyai.engines import sglang, trtllm, vllm
from kyai.engines._common import (
    Engine,
    EngineArgsError,
    EngineCommand,
    MultiNode,
    ParallelismError,
    canonical_flag,
    check_engine_args,
    engine_env,
    flag_name,
    render_flags,
)
from kyai.engines._multinode import GroupCommands, check_parallelism, group_commands

if TYPE_CHECKING:  # api/ derives its framework enum from ENGINES: types only from there
    from kyai.api.engineargsset import EngineArgsSetSpec
    from kyai.api.workload import WorkloadSpec

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
    workload: WorkloadSpec, engine_args: EngineArgsSetSpec | None = None
) -> EngineCommand:
    """The container command line serving ``workload`` (see :meth:`Engine.command`)."""
    return engine_for(workload.engine).command(workload, engine_args)


def engine_group_commands(
    workload: WorkloadSpec, engine_args: EngineArgsSetSpec | None = None
) -> GroupCommands:
    """The leader's and workers' command lines on ``spec.nodes`` nodes (a LWS group)."""
    return group_commands(engine_for(workload.engine), workload, engine_args)


def served_model_name(workload: WorkloadSpec) -> str:
    """The model name the Workload's engine will report on ``/v1/models``."""
    if workload.endpoint is not None:
        return workload.served_name
    return engine_for(workload.engine).served_model_name(workload)


__all__ = [
    "ENGINES",
    "Engine",
    "EngineArgsError",
    "EngineCommand",
    "GroupCommands",
    "MultiNode",
    "ParallelismError",
    "canonical_flag",
    "check_engine_args",
    "check_parallelism",
    "engine_command",
    "engine_env",
    "engine_for",
    "engine_group_commands",
    "flag_name",
    "framework_list",
    "render_flags",
    "served_model_name",
]
