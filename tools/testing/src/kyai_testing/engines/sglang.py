"""The SGLang stand-in: ``python3 -m sglang.launch_server --model-path M --host H --port P ...``.

Read from SGLang 0.5.3 (the default image ``lmsysorg/sglang:v0.5.3-cu129``):

- ``sglang/launch_server.py`` / ``srt/server_args.py`` ``prepare_server_args``: a plain
  ``argparse.ArgumentParser()`` (so its program name is ``launch_server.py`` and unambiguous
  prefixes of long flags are accepted) with ``ServerArgs.add_cli_args``: the flag set
  (``flags/sglang.json``). ``--model-path`` (alias ``--model``) is required; ``--host``
  defaults to 127.0.0.1 and ``--port`` to 30000; the deprecated MoE flags raise ``ValueError``
  with their help text. ``served_model_name`` defaults to the model path.
- ``srt/entrypoints/http_server.py``: ``/health`` and ``/health_generate`` are one handler,
  503 while the server is starting and 200 with an empty body once up; ``/v1/models`` lists
  one card with ``id`` and ``root`` the served name, ``owned_by: sglang`` and
  ``max_model_len`` the context length (``--context-length`` or the model's config.json);
  ``/get_model_info`` gives the model path.
- ``srt/managers/tokenizer_manager.py``: the context-length 400s (``sglang`` style of
  :mod:`kyai_testing`), unless ``--allow-auto-truncate`` shrinks ``max_new_tokens``.
- ``srt/utils/common.py`` ``add_api_key_middleware``: with ``--api-key`` every route but
  ``/health*`` and ``/metrics*`` needs ``Authorization: Bearer KEY`` (else 401
  ``{"error": "Unauthorized"}``).
- ``--reasoning-parser``: the answer carries ``reasoning_content``.
- ``--enable-metrics``: ``/metrics`` serves the ``TokenizerMetricsCollector``'s histograms
  (``srt/metrics/collector.py``; :mod:`kyai_testing._metrics`); without it there is no
  such route.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from kyai.engines import FlagTable
from kyai_testing.engines._common import (
    EngineStandin,
    ServeConfig,
    add_table_flags,
    flag_table,
    resolve_window,
    run_argparse,
)

#: ``python -m sglang.launch_server`` runs this file: argparse names itself after it.
PROG = "launch_server.py"


def matches(argv: Sequence[str]) -> bool:
    """``python[3] -m sglang.launch_server ...``."""
    return (
        len(argv) >= 3
        and PurePath(argv[0]).name.startswith("python")
        and argv[1] == "-m"
        and argv[2] == "sglang.launch_server"
    )


def _parser(table: FlagTable) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG)
    add_table_flags(parser, table, {"port": int, "context_length": int})
    return parser


def _first(parsed: argparse.Namespace, *dests: str) -> Any:
    """The value of an option under whichever of its names the table made its dest.

    SGLang 0.5.3 lists ``--tensor-parallel-size`` first, 0.5.23 ``--tp-size``.
    """
    for dest in dests:
        value = getattr(parsed, dest, None)
        if value is not None:
            return value
    return None


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> ServeConfig:
    """Parse the launch_server command line as the SGLang version imitated does."""
    table = flag_table("sglang", environ)
    parsed = run_argparse(_parser(table), argv[3:])
    model: str = parsed.model_path
    served = parsed.served_model_name or model
    window, source = resolve_window(parsed.context_length, "--context-length", model, environ)
    return ServeConfig(
        engine="sglang",
        model=model,
        served_names=(served,),
        host=parsed.host if parsed.host is not None else "127.0.0.1",
        port=parsed.port if parsed.port is not None else 30000,
        max_model_len=window,
        window_source=source,
        reasoning_parser=parsed.reasoning_parser or None,
        api_keys=(parsed.api_key,) if parsed.api_key else (),
        version=table.version,
        clamp_max_tokens=bool(parsed.allow_auto_truncate),
        settings={
            "enable_metrics": bool(parsed.enable_metrics),
            "tp_size": int(_first(parsed, "tp_size", "tensor_parallel_size") or 1),
            "pp_size": int(_first(parsed, "pp_size", "pipeline_parallel_size") or 1),
            "nnodes": int(parsed.nnodes or 1),
            "node_rank": int(parsed.node_rank or 0),
            "dist_init_addr": parsed.dist_init_addr,
        },
    )


def model_cards(config: ServeConfig, created: int) -> list[dict[str, Any]]:
    """SGLang's one card: ``id`` and ``root`` the served name, with ``max_model_len``."""
    return [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "sglang",
            "root": name,
            "max_model_len": config.max_model_len,
        }
        for name in config.served_names
    ]


def _extra_routes(config: ServeConfig) -> dict[str, Any]:
    return {
        "/get_model_info": {
            "model_path": config.model,
            "tokenizer_path": config.model,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        }
    }


def _auth_exempt(path: str) -> bool:
    """SGLang's api-key middleware lets only ``/health*`` and ``/metrics*`` through."""
    return path.startswith(("/health", "/metrics"))


STANDIN = EngineStandin(
    name="sglang",
    auth_exempt=_auth_exempt,
    matches=matches,
    parse=parse,
    model_cards=model_cards,
    overflow_style="sglang",
    health_paths=("/health", "/health_generate"),
    extra_routes=_extra_routes,
    metrics=lambda config: "sglang" if config.settings.get("enable_metrics") else None,
)
