"""The vLLM stand-in: ``vllm serve MODEL --host H --port P --served-model-name N ...``.

The options are those of the flag table of the version imitated (``kyai.engines``' tables:
0.11.0, 0.32.0, 0.34.0, read from those releases' own ``vllm serve`` parsers). Read from
vLLM 0.11.0 and 0.32.0 (where the releases differ, the newer behaviour holds from the first
release after 0.11 that has a table):

- ``vllm/entrypoints/cli/main.py``: a ``vllm`` parser with subcommands; ``serve`` uses the
  usage ``vllm serve [model_tag] [options]``, so an unknown flag is reported by the top-level
  parser: ``vllm: error: unrecognized arguments: --foo`` with exit status 2.
- ``FlexibleArgumentParser.parse_args`` (``vllm/utils/__init__.py`` in 0.11,
  ``vllm/utils/argparse_utils.py`` in 0.32): underscores in flag names become dashes
  (``--max_model_len``); dotted flags (``--compilation-config.level 3``) are gathered into
  one JSON value. 0.11 refuses ``--model`` with ``vllm serve`` and reads ``-O3`` as
  ``-O.level=3``; 0.32 moves ``--model M`` to the positional model (with a warning) and reads
  ``-O3`` as ``--optimization-level 3``.
- ``vllm/engine/arg_utils.py`` / the OpenAI server's ``cli_args.py``: the flag set (the
  flag table); ``--max-model-len`` takes "human readable" integers (``32k``, ``1M``).
- ``entrypoints/openai/serving_models.py`` / ``protocol.py``: one ``/v1/models`` card per
  served name with ``owned_by: vllm``, ``root`` the model path, ``parent: null``,
  ``max_model_len`` and one ``model_permission``.
- ``entrypoints/openai/api_server.py``: ``GET /health`` is 200 with an empty body (503 when
  the engine is dead; the real server does not listen before it has loaded), ``/version``.
- ``entrypoints/openai/api_server.py`` ``AuthenticationMiddleware``: with ``--api-key`` (one or
  more; else ``VLLM_API_KEY``) only paths under ``/v1`` need ``Authorization: Bearer KEY``.
- Context overflow: 0.11 refuses a request that does not fit in the 0.6-0.11 wording
  (``kyai_testing``'s ``vllm_v0_10`` style); 0.32 answers a prompt plus ``max_tokens`` over the
  window and clamps ``max_tokens``, and refuses ``max_tokens`` alone or the prompt alone over
  the window (``vllm/renderers/params.py``; the ``vllm`` style).
- ``--reasoning-parser``: the answer carries ``reasoning_content`` (0.11) or ``reasoning``
  (0.32: ``entrypoints/openai/chat_completion/protocol.py`` renames the deprecated field).
- ``/metrics`` (always served, outside ``/v1`` so without the API key): the serving
  histograms of ``vllm/v1/metrics/loggers.py`` (:mod:`kyai_testing._metrics`).
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from kyai.engines import FlagTable
from kyai.engines._flags import release_of
from kyai_testing.engines._common import (
    EngineStandin,
    ServeConfig,
    add_table_flags,
    fail,
    flag_table,
    resolve_window,
    run_argparse,
)

#: The first release with a table after 0.11 (0.32): its parser and answers differ.
NEWER = (0, 12, 0)

_SUBCOMMANDS = ("chat", "complete", "serve", "bench", "collect-env", "run-batch")
_KEY = re.compile(r"(?<=--)[^.]*")
_SUFFIXES = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def matches(argv: Sequence[str]) -> bool:
    """``vllm serve ...`` (any path to the ``vllm`` executable)."""
    return len(argv) >= 1 and PurePath(argv[0]).name == "vllm"


def human_readable_int(text: str) -> int:
    """Parse like vLLM's ``human_readable_int``: ``1k`` = 1000, ``1K`` = 1024 (also m, g)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG])", text.strip())
    if match is None:
        return int(text.strip())
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * _SUFFIXES[suffix])
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
            f"{number}{suffix.lower()} instead?"
        )
    return int(number) * _BINARY[suffix]


def newer(table: FlagTable) -> bool:
    """Whether the version imitated behaves as 0.32 does (else as 0.11)."""
    return (release_of(table.version) or (0, 0, 0)) >= NEWER


def _move_model(args: list[str]) -> list[str]:
    """0.32: ``vllm serve ... --model M ...`` becomes ``vllm serve M ...``."""
    for index, arg in enumerate(args):
        if re.match(r"^--model(=.+|$)", arg):
            if arg == "--model" and index + 1 < len(args):
                model, rest = args[index + 1], index + 2
            else:
                model, rest = arg.removeprefix("--model="), index + 1
            return ["serve", model, *args[1:index], *args[rest:]]
    return args


def _preprocess(args: Sequence[str], table: FlagTable) -> list[str]:
    """FlexibleArgumentParser's rewriting: dashes in names, ``-O3``, dotted JSON flags."""
    processed: list[str] = []
    optimization = ["--optimization-level"] if newer(table) else ["-O.level"]
    for index, arg in enumerate(args):
        if arg.startswith("--"):
            name, sep, rest = arg.partition("=")
            name = _KEY.sub(lambda found: found.group(0).replace("_", "-"), name, count=1)
            processed.append(f"{name}{sep}{rest}")
        elif arg.startswith("-O") and arg != "-O" and arg[2] != ".":
            level = arg[3:] if arg[2] == "=" else arg[2:]
            if newer(table):
                processed += [*optimization, level]
            else:
                processed.append(f"-O.level={level}")
        elif arg == "-O" and index + 1 < len(args) and args[index + 1] in {"0", "1", "2", "3"}:
            processed += optimization
        else:
            processed.append(arg)
    dotted: dict[str, dict[str, Any]] = {}
    kept: list[str] = []
    skip = False
    for index, arg in enumerate(processed):
        if skip:
            skip = False
            continue
        if arg.startswith("-") and "." in arg.split("=", 1)[0]:
            if "=" in arg:
                name, raw = arg.split("=", 1)
            elif index + 1 < len(processed):
                name, raw, skip = arg, processed[index + 1], True
            else:
                kept.append(arg)
                continue
            if name.endswith("+"):
                name, raw = name[:-1], json.dumps(raw.split(","))
            flag, *keys = name.split(".")
            try:
                value: Any = json.loads(raw)
            except ValueError:
                value = raw
            target = dotted.setdefault(flag, {})
            for part in keys[:-1]:
                target = target.setdefault(part, {})
            target[keys[-1]] = value
            continue
        kept.append(arg)
    for flag, nested in dotted.items():
        kept += [flag, json.dumps(nested)]
    return kept


def _parser(table: FlagTable) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="vllm", description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version=table.version)
    subparsers = top.add_subparsers(required=False, dest="subparser")
    for name in _SUBCOMMANDS:
        if name != "serve":
            sub = subparsers.add_parser(name)
            sub.add_argument("rest", nargs=argparse.REMAINDER)
            continue
        serve = subparsers.add_parser(name, usage="vllm serve [model_tag] [options]")
        serve.add_argument("model_tag", nargs="?")
        add_table_flags(serve, table, {"port": int, "max_model_len": human_readable_int})
    return top


def parse(argv: Sequence[str], environ: Mapping[str, str]) -> ServeConfig:
    """Parse ``vllm serve ...`` as the vLLM version imitated does."""
    table = flag_table("vllm", environ)
    args = list(argv[1:])
    if args and args[0] == "serve" and any(re.match(r"^--model(=.+|$)", a) for a in args):
        if not newer(table):
            fail(
                "ValueError: With `vllm serve`, you should provide the model as a positional "
                "argument or in a config file instead of via the `--model` option."
            )
        args = _move_model(args)
    parsed = run_argparse(_parser(table), _preprocess(args, table))
    if parsed.subparser != "serve":
        fail(f"kyai_testing.engines: only `vllm serve` is imitated, not {args[:1]}.", 2)
    model = parsed.model_tag or parsed.model
    if not model:
        fail("ValueError: No model given: pass it as `vllm serve MODEL`.")
    served = tuple(parsed.served_model_name or (model,))
    window, source = resolve_window(parsed.max_model_len, "--max-model-len", model, environ)
    api_keys = parsed.api_key or ([environ["VLLM_API_KEY"]] if environ.get("VLLM_API_KEY") else [])
    return ServeConfig(
        engine="vllm",
        model=model,
        served_names=served,
        host=parsed.host if parsed.host is not None else "0.0.0.0",
        port=parsed.port if parsed.port is not None else 8000,
        max_model_len=window,
        window_source=source,
        reasoning_parser=parsed.reasoning_parser or None,
        api_keys=tuple(api_keys),
        version=table.version,
        clamp_max_tokens=newer(table),
        settings={
            "tensor_parallel_size": int(parsed.tensor_parallel_size or 1),
            "pipeline_parallel_size": int(parsed.pipeline_parallel_size or 1),
            "distributed_executor_backend": parsed.distributed_executor_backend,
            "reasoning_field": "reasoning" if newer(table) else "reasoning_content",
            # 0.32's renderer (vllm/renderers/params.py): a prompt plus max_tokens over the
            # window is answered and clamped; max_tokens alone or the prompt alone over it is
            # a 400 in the current wording. 0.11 refuses all three in its own.
            "overflow_style": "vllm" if newer(table) else "vllm_v0_10",
        },
    )


def model_cards(config: ServeConfig, created: int) -> list[dict[str, Any]]:
    """The cards vLLM lists: one per served name, ``root`` the model, with ``max_model_len``."""
    return [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": config.model,
            "parent": None,
            "max_model_len": config.max_model_len,
            "permission": [
                {
                    "id": f"modelperm-{uuid.uuid4().hex}",
                    "object": "model_permission",
                    "created": created,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        for name in config.served_names
    ]


def _extra_routes(config: ServeConfig) -> dict[str, Any]:
    return {"/version": {"version": config.version}}


STANDIN = EngineStandin(
    name="vllm",
    matches=matches,
    parse=parse,
    model_cards=model_cards,
    overflow_style="vllm_v0_10",
    extra_routes=_extra_routes,
    metrics=lambda config: "vllm",
)
