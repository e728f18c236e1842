"""The TensorRT-LLM stand-in: ``trtllm-serve MODEL --host H --port P ...``.

Read from TensorRT-LLM (default image ``nvcr.io/nvidia/tensorrt-llm/release:1.0.0``):

- ``tensorrt_llm/commands/serve.py``: ``trtllm-serve`` is a click group whose unknown first
  word falls through to the ``serve`` command (``DefaultGroup``); ``serve`` takes ``MODEL``
  and underscored options (``flags/trtllm.json``; ``--host`` defaults to ``localhost``,
  ``--port`` to 8000). Click refuses an unknown option with ``Usage: trtllm-serve serve
  [OPTIONS] MODEL`` / ``Error: No such option: --foo`` and exit status 2.
- ``tensorrt_llm/serve/openai_server.py``: the model is served under the ``MODEL`` argument,
  or its base name when it is a local directory (the stand-in, which cannot see the engine
  container's files, takes any absolute path for one); ``GET /health`` is 200 with an empty
  body (503 while the executor is not healthy), ``/version``.
- ``tensorrt_llm/serve/openai_protocol.py``: a ``/v1/models`` card is ``id``, ``object``,
  ``created`` and ``owned_by: tensorrt_llm``, with no context length.
- ``tensorrt_llm/llmapi/llm.py`` ``_check_arguments`` (read at a commit newer than 1.0; the
  wording has changed between releases): with the default PyTorch backend, unless
  ``--enable_chunked_prefill``, a prompt longer than ``--max_num_tokens`` (default 8192) is
  refused ("The sum of prompt length (P), query length (0) should not exceed max_num_tokens
  (N)"; P is printed as a float, divided by the context-parallel size) and ``max_tokens`` is
  not checked: generation stops at ``--max_seq_len`` (else the model's config.json), which the
  stand-in imitates by clamping. With ``--backend tensorrt`` prompt plus ``max_tokens`` over
  ``max_seq_len`` is refused ("The sum of prompt length (P) and query length (0) max_tokens (M)
  should not exceed max_seq_len (N)"). Refusals are 400s in the flat ``ErrorResponse`` shape.
  A prompt that alone fills ``max_seq_len`` on the PyTorch backend is refused with the
  ``max_seq_len`` wording too (an approximation: the real server fails it in the executor).
- ``--reasoning_parser``: the answer carries ``reasoning_content``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath, PurePosixPath
from typing import Any

import click

from kyai.engines import Flag, FlagTable
from kyai_testing.engines._common import (
    EngineStandin,
    ServeConfig,
    StandinUsageError,
    flag_table,
    resolve_window,
)

PROG = "trtllm-serve"
_SUBCOMMANDS = ("serve", "grpc", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve")


def matches(argv: Sequence[str]) -> bool:
    """``trtllm-serve ...`` (any path to the executable)."""
    return len(argv) >= 1 and PurePath(argv[0]).name == PROG


class _DefaultGroup(click.Group):
    """An unknown first word runs ``serve`` (TensorRT-LLM's ``DefaultGroup``)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands:
            return "serve", self.commands["serve"], args
        return super().resolve_command(ctx, args)


_TYPES: dict[str, Any] = {"int": int, "float": float}


def _option(flag: Flag) -> click.Option:
    """The click option of one table entry (the engine's own kind, choices, type)."""
    names = list(flag.spellings)
    name = flag.option.lstrip("-")
    if flag.kind == "boolean":
        if flag.negative is not None:  # click's "--x/--no-x" pair
            return click.Option([f"{flag.option}/{flag.negative}", name], default=None)
        return click.Option([*names, name], is_flag=True, default=False)
    converter: Any = _TYPES.get(flag.type or "", str)
    if flag.choices is not None:
        converter = click.Choice([str(choice) for choice in flag.choices])
    if flag.kind == "append":
        return click.Option([*names, name], multiple=True, type=converter)
    return click.Option([*names, name], type=converter, default=None)


def _serve_command(table: FlagTable) -> click.Command:
    params: list[click.Parameter] = [click.Argument(["model"], type=str)]
    params += [_option(flag) for flag in table.flags]
    return click.Command("serve", params=params, callback=lambda **kwargs: kwargs)


def _group(table: FlagTable) -> click.Group:
    group = _DefaultGroup(PROG)
    group.add_command(_serve_command(table))
    for name in _SUBCOMMANDS[1:]:
        group.add_command(click.Command(name, callback=lambda: None))
    return group


def _served_name(model: str) -> str:
    if model.startswith("/"):
        return PurePosixPath(model).name or model
    return model


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> ServeConfig:
    """Parse ``trtllm-serve ...`` as TensorRT-LLM's click command does."""
    table = flag_table("trtllm", environ)
    try:
        values = _group(table).main(list(argv[1:]), prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        output = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f"Try '{exc.ctx.command_path} {exc.ctx.help_option_names[0]}' for help."
            output = f"{exc.ctx.get_usage()}\n{hint}\n\n"
        raise StandinUsageError(f"{output}Error: {exc.format_message()}\n", exc.exit_code) from None
    if not isinstance(values, dict):
        raise StandinUsageError(
            f"kyai_testing.engines: only `{PROG} serve` is imitated, not {list(argv[1:2])}.\n", 2
        )
    model: str = values["model"]
    max_seq_len = values.get("max_seq_len")
    window, source = resolve_window(
        int(max_seq_len) if max_seq_len is not None else None, "--max_seq_len", model, environ
    )
    backend = {"trt": "tensorrt"}.get(
        values.get("backend") or "pytorch", values.get("backend") or "pytorch"
    )
    max_num_tokens = values.get("max_num_tokens")
    settings = {
        "backend": backend,
        "max_num_tokens": int(max_num_tokens) if max_num_tokens is not None else 8192,
        "chunked_prefill": bool(values.get("enable_chunked_prefill")),
    }
    served = values.get("served_model_name") or _served_name(model)
    return ServeConfig(
        engine="trtllm",
        model=model,
        served_names=(served,),
        host=values["host"] if values.get("host") is not None else "localhost",
        port=int(values["port"]) if values.get("port") is not None else 8000,
        max_model_len=window,
        window_source=source,
        reasoning_parser=values.get("reasoning_parser") or None,
        version=table.version,
        clamp_max_tokens=backend != "tensorrt",
        enforce_window=backend != "tensorrt",
        settings=settings,
    )


def model_cards(config: ServeConfig, created: int) -> list[dict[str, Any]]:
    """TensorRT-LLM's card: no root, no parent, no context length."""
    return [
        {"id": name, "object": "model", "created": created, "owned_by": "tensorrt_llm"}
        for name in config.served_names
    ]


def refusal(config: ServeConfig, prompt_tokens: int, max_tokens: int | None) -> str | None:
    """The LLM API's refusal of a request too long for the server, or None."""
    settings = config.settings
    window = config.max_model_len
    prompt = float(prompt_tokens)  # prompt_len / cp_size: a float in the message
    over_window = (
        f"The sum of prompt length ({prompt}) and query length (0) max_tokens ({max_tokens}) "
        f"should not exceed max_seq_len ({window})"
    )
    chunked = bool(settings.get("chunked_prefill"))
    if settings.get("backend") == "tensorrt":
        return over_window if not chunked and prompt_tokens + (max_tokens or 0) > window else None
    limit = settings.get("max_num_tokens")
    if settings.get("backend") == "pytorch" and not chunked and limit and prompt_tokens > limit:
        return (
            f"The sum of prompt length ({prompt}), query length (0) should not exceed "
            f"max_num_tokens ({limit})"
        )
    return over_window if prompt_tokens >= window else None


def _extra_routes(config: ServeConfig) -> dict[str, Any]:
    return {"/version": {"version": config.version}}


STANDIN = EngineStandin(
    name="trtllm",
    matches=matches,
    parse=parse,
    model_cards=model_cards,
    overflow_style="sglang",  # ErrorResponse: the flat object/message/type/param/code body
    refusal=refusal,
    extra_routes=_extra_routes,
)
