"""What every serving engine shares: flag rendering, owned-flag checks, environment, profiles.

An :class:`Engine` describes one framework's server: the executable, the arguments the operator
owns (model, host, port, served model name), its health route and the flag names users look
for. :meth:`Engine.command` turns a Workload's spec and an optional EngineArgsSet's spec into
the container's ``command`` and ``args``, checking the flags against the flag table of the
engine version the image runs (:mod:`kyai.engines._flags`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kyai.constants import ENGINE_PORT
from kyai.engines._flags import (
    FlagPlan,
    NegativeForm,
    TableChoice,
    canonical_flag,
    image_version,
    plan_flags,
    table_for,
)
from kyai.engines._specs import EngineArgsLike, WorkloadLike

#: Every engine listens on all interfaces of its pod (the pod's network is the boundary).
LISTEN_HOST = "0.0.0.0"

#: Environment variables the operator sets itself on engine containers.
ENV_HF_HOME = "HF_HOME"
ENV_HF_TOKEN = "HF_TOKEN"


class EngineArgsError(ValueError):
    """An EngineArgsSet (or the Workload using it) cannot be turned into a command line."""


@dataclass(frozen=True)
class EngineCommand:
    """The engine container's ``command`` and ``args``."""

    command: list[str]
    """The executable (the container's ``command``; it replaces the image's entrypoint)."""
    args: list[str]
    """The arguments (the container's ``args``)."""

    @property
    def argv(self) -> list[str]:
        """The whole command line, as a shell would run it."""
        return [*self.command, *self.args]


class ParallelismError(EngineArgsError):
    """The engine's parallel sizes do not use exactly the GPUs of a multi-node group."""


@dataclass(frozen=True, kw_only=True)
class MultiNode:
    """How an engine serves one model over several nodes: a LeaderWorkerSet group.

    The leader's and workers' command lines derive from the single-node one; the LWS
    controller gives each pod ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and
    ``LWS_WORKER_INDEX``, which the kubelet expands in ``$(NAME)`` references.
    """

    parallel_flags: tuple[tuple[str, ...], ...]
    """The parallel sizes whose product is the GPUs one replica uses, each as the canonical
    spellings of its flag (the first one named in messages); an unset size is 1."""
    owned_flags: frozenset[str]
    """Flags the operator sets itself on several nodes (canonical, dashed)."""
    leader: Callable[[EngineCommand], EngineCommand]
    """The leader's command, from the single-node command line."""
    worker: Callable[[EngineCommand], EngineCommand]
    """A worker's command, from the single-node command line."""


def _plain_served_name(workload: WorkloadLike) -> str:
    return workload.served_name


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One serving framework: how its server is started and what it calls things."""

    framework: str
    """The framework's name in the API (``spec.framework``; the CRD's enum lists them)."""
    executable: tuple[str, ...]
    """The container ``command`` starting the OpenAI-compatible server."""
    default_image: str
    """The pinned image Workloads of this framework run (settings and the chart override)."""
    owned_flags: frozenset[str]
    """Flags the operator sets itself (canonical, dashed): an EngineArgsSet may not."""
    model_args: Callable[[WorkloadLike], list[str]]
    """The arguments the operator owns: model, host, port and (where it exists) served name."""
    health_path: str
    """The HTTP route answering 200 once the model is loaded (probes use it)."""
    served_model_name_flag: str | None
    """The flag naming the model on ``/v1/models`` (None: the server has no such flag)."""
    reasoning_parser_flag: str
    """The flag enabling the reasoning parser (``reasoning_content`` / ``reasoning`` fields)."""
    context_length_flag: str
    """The flag capping the context window (what ``/v1/models`` reports as max_model_len)."""
    tensor_parallel_flag: str
    """The flag splitting the model over several GPUs."""
    references: tuple[str, ...]
    """The documentation and source the command line was checked against."""
    served_name_of: Callable[[WorkloadLike], str] = field(default=_plain_served_name)
    """The model name the server reports for a Workload."""
    metrics_path: str | None = None
    """The route serving the engine's Prometheus serving histograms (TTFT, ITL, E2E), on the
    API's port; None: the engine has none in Prometheus form."""
    metrics_flag: str | None = None
    """The flag the engine needs to serve them (None: always served)."""
    multinode: MultiNode | None = None
    """How the engine serves over several nodes (``spec.nodes`` > 1); None: it does not."""
    negative_form: NegativeForm = field(default_factory=lambda: NegativeForm(None))
    """How the engine turns off a switch no flag table knows (vLLM: ``--no-{name}``)."""
    abbreviations: bool = False
    """Whether the engine's parser takes an unambiguous prefix of a long option (argparse's
    ``allow_abbrev``, on in vLLM's and SGLang's parsers; click, TensorRT-LLM's, has none)."""

    def image_of(self, workload: WorkloadLike, default_image: str | None = None) -> str:
        """The image a Workload runs: its ``spec.image``, else the operator's default."""
        return workload.image or default_image or self.default_image

    def table(self, image: str | None = None) -> TableChoice:
        """The flag table of the engine version ``image`` runs (default: the default image).

        The version is the image tag's release (``v0.32.0``); a version without a table of
        its own, or a tag naming none, gets the newest table, whose findings only warn.
        """
        return table_for(self.framework, image_version(image or self.default_image))

    def plan(self, engine_args: EngineArgsLike, image: str | None = None) -> FlagPlan:
        """``engine_args``' flags checked against the version's table and rendered."""
        return plan_flags(
            engine_args.args,
            self.table(image),
            self.negative_form,
            abbreviations=self.abbreviations,
        )

    def served_model_name(self, workload: WorkloadLike) -> str:
        """The name clients must send as ``model`` (what ``/v1/models`` lists)."""
        return self.served_name_of(workload)

    def serves_metrics(self, engine_args: EngineArgsLike | None = None) -> bool:
        """Whether the engine, started with ``engine_args``, serves Prometheus metrics."""
        if self.metrics_path is None:
            return False
        if self.metrics_flag is None:
            return True
        wanted = canonical_flag(self.metrics_flag)
        if engine_args is None:
            return False
        for name, value in engine_args.args.items():
            if canonical_flag(name) == wanted and value not in (False, None, "false", "False"):
                return True
        return any(
            arg.startswith("-") and canonical_flag(arg.split("=", 1)[0]) == wanted
            for arg in engine_args.extra_args
        )

    def command(
        self,
        workload: WorkloadLike,
        engine_args: EngineArgsLike | None = None,
        *,
        image: str | None = None,
    ) -> EngineCommand:
        """The container command line serving ``workload`` with ``engine_args``' flags.

        ``image`` is the image the container runs (default: the Workload's ``spec.image``,
        else the engine's default image): its version picks the flag table.

        Raises :class:`EngineArgsError` when the Workload launches no engine (it has an
        endpoint), when frameworks disagree, when the EngineArgsSet sets a flag the operator
        owns, names a flag twice, names a flag the version does not have or a value it does
        not take, or when the engine cannot serve the requested name.
        """
        if workload.endpoint is not None:
            raise EngineArgsError(
                "The Workload has spec.endpoint: it is served elsewhere and launches no engine."
            )
        if workload.framework != self.framework:
            raise EngineArgsError(
                f"The Workload's framework is {workload.framework}, not {self.framework}."
            )
        if self.served_model_name_flag is None and workload.served_model_name is not None:
            served = self.served_model_name(workload)
            if workload.served_model_name != served:
                raise EngineArgsError(
                    f"{self.framework} has no served-model-name option: it serves this model as "
                    f"{served!r}. Remove spec.servedModelName or set it to {served!r}."
                )
        args = self.model_args(workload)
        if engine_args is not None:
            if engine_args.framework != workload.framework:
                raise EngineArgsError(
                    f"The EngineArgsSet is for {engine_args.framework} but the Workload uses "
                    f"{workload.framework}: use an EngineArgsSet of the same framework."
                )
            check_engine_args(engine_args, self.owned_flags)
            plan = self.plan(engine_args, image or self.image_of(workload))
            if plan.errors:
                raise EngineArgsError(flag_errors_message(plan))
            args += plan.argv
            args += list(engine_args.extra_args)
        return EngineCommand(command=list(self.executable), args=args)


def flag_errors_message(plan: FlagPlan) -> str:
    """The refusals of a flag plan as one message (spec.args named)."""
    return "spec.args: " + "; ".join(plan.errors)


def owned_flags_used(engine_args: EngineArgsLike, owned: frozenset[str]) -> list[str]:
    """The flags in ``args`` or ``extra_args`` that the operator sets itself (``owned``)."""
    used = [name for name in engine_args.args if canonical_flag(name) in owned]
    for arg in engine_args.extra_args:
        if arg.startswith("-") and canonical_flag(arg.split("=", 1)[0]) in owned:
            used.append(arg.split("=", 1)[0])
    return used


def check_engine_args(engine_args: EngineArgsLike, owned_flags: frozenset[str]) -> None:
    """Refuse flags the operator owns (any spelling) and flags given twice in ``args``.

    Raises :class:`EngineArgsError` naming the offending flags.
    """
    owned = owned_flags_used(engine_args, owned_flags)
    if owned:
        names = ", ".join(repr(name) for name in owned)
        raise EngineArgsError(
            f"The EngineArgsSet sets {names}, which the operator owns (host, port, model and "
            "served model name): remove them and use the Workload's spec.model and "
            "spec.servedModelName instead."
        )
    seen: dict[str, str] = {}
    for name in engine_args.args:
        canonical = canonical_flag(name)
        if canonical in seen:
            raise EngineArgsError(
                f"The EngineArgsSet names the flag {canonical!r} twice in args "
                f"({seen[canonical]!r} and {name!r}): keep one."
            )
        seen[canonical] = name


def flag_name(name: str) -> str:
    """The flag as written by the user, with ``--`` added when it has no leading dash."""
    return name if name.startswith("-") else f"--{name}"


def engine_env(
    workload: WorkloadLike, engine_args: EngineArgsLike | None = None
) -> list[dict[str, Any]]:
    """The engine container's environment (core/v1 EnvVar objects).

    ``HF_HOME`` points at the model cache mount when there is one (every framework downloads
    weights through ``huggingface_hub``, which caches under ``HF_HOME``), ``HF_TOKEN`` comes
    from the Workload's Secret key, then the EngineArgsSet's variables follow. The
    EngineArgsSet may not set a variable the operator sets.
    """
    env: list[dict[str, Any]] = []
    if workload.model_cache is not None:
        env.append({"name": ENV_HF_HOME, "value": workload.model_cache.mount_path})
    if workload.hf_token_secret_ref is not None:
        env.append(
            {
                "name": ENV_HF_TOKEN,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": workload.hf_token_secret_ref.name,
                        "key": workload.hf_token_secret_ref.key,
                    }
                },
            }
        )
    if engine_args is not None:
        owned = {item["name"] for item in env}
        clashes = sorted({var.name for var in engine_args.env} & owned)
        if clashes:
            raise EngineArgsError(
                f"The EngineArgsSet's env sets {', '.join(clashes)}, which the operator sets from "
                "the Workload (spec.modelCache for HF_HOME, spec.hfTokenSecretRef for HF_TOKEN): "
                "remove them from the EngineArgsSet."
            )
        env.extend({"name": var.name, "value": var.value} for var in engine_args.env)
    return env


def listen_args() -> list[str]:
    """``--host 0.0.0.0 --port 8000``: every framework spells these the same way."""
    return ["--host", LISTEN_HOST, "--port", str(ENGINE_PORT)]
