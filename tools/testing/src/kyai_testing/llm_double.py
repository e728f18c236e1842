"""An OpenAI-compatible LLM test double, in-process or as a command.

In tests::

    async with LLMDouble(models=[ModelSpec("candidate", max_model_len=2048)],
                         rules=[Rule(match="capital of France", content="Paris")]) as double:
        ...  # point the client at double.base_url

    with LLMDouble(...).start_in_thread() as double:   # for subprocesses / sync code
        ...

As a command (serves until SIGINT or SIGTERM; prints its URL first)::

    python -m kyai_testing.llm_double --port 8000 --model candidate --judge-model judge \
        --max-model-len 4096 --latency 0.2 --rules rules.json \
        --fault-rate 0.2 --fault-kinds 429,503,close,cut_json --fault-seed 1 \
        --ttft-ms 300 --token-ms 20 --stream-mode stream

Streaming: a request with ``"stream": true`` is answered with server-sent events, one chunk
per token of the double's tokenizer (4 characters), the first ``--ttft-ms`` after the answer
is ready and one every ``--token-ms`` after it (whole answers take as long); ``--stream-mode
refuse`` answers such a request with a 400 naming ``stream``, ``--stream-mode ignore`` with
plain JSON. ``GET /metrics`` serves vLLM's serving histograms (SGLang's with
``--overflow-style sglang``).

Fault injection (:class:`Faults`): a seeded share of chat requests answered 429, 500 or 503,
closed or reset without an answer, stalled, sent with a body shorter than its Content-Length,
or sent whole with their JSON cut; and, asked for by name (``STREAM_FAULT_KINDS``), streams
that end early as real servers and proxies end them: ``done_early`` (``[DONE]`` after half the
tokens and no ``finish_reason``), ``eof_early`` (the body ends cleanly after half the
tokens), ``no_finish`` (every token, no ``finish_reason``) and ``abort`` (vLLM's
``finish_reason: "abort"`` after half the tokens). ``echo_headers`` makes error bodies repeat
the request's Authorization header (raw and base64), as some gateways do.

``--interrupt-requests`` serves one chat request at a time and ends a stream with
``data: [DONE]`` and no ``finish_reason`` as soon as a newer request waits, as
llama-cpp-python's server does by default (``interrupt_requests``), often before the first
token.

A rules file is a JSON list of objects with :class:`Rule`'s fields (string ``match`` and
``content`` only); ``"judge": true`` answers with :func:`substring_judge`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from kyai_testing._double import (
    STREAM_MODES,
    STREAMING_NOT_SUPPORTED,
    DoubleNotRunningError,
    LLMDouble,
)
from kyai_testing._faults import ALL_FAULT_KINDS, FAULT_KINDS, STREAM_FAULT_KINDS, Faults
from kyai_testing._judge import substring_judge
from kyai_testing._model import (
    DEFAULT_CONTENT,
    ChatRequest,
    DoubleConfigError,
    ModelSpec,
    RecordedRequest,
    Rule,
    count_prompt_tokens,
    count_text_tokens,
)
from kyai_testing._servers import OVERFLOW_STYLES, OverflowStyle

__all__ = [
    "ALL_FAULT_KINDS",
    "DEFAULT_CONTENT",
    "FAULT_KINDS",
    "OVERFLOW_STYLES",
    "STREAMING_NOT_SUPPORTED",
    "STREAM_FAULT_KINDS",
    "STREAM_MODES",
    "ChatRequest",
    "DoubleConfigError",
    "DoubleNotRunningError",
    "Faults",
    "LLMDouble",
    "ModelSpec",
    "OverflowStyle",
    "RecordedRequest",
    "Rule",
    "count_prompt_tokens",
    "count_text_tokens",
    "main",
    "rules_from_json",
    "substring_judge",
]

_RULE_FIELDS = {f.name for f in fields(Rule) if f.init}


def rules_from_json(data: Any) -> list[Rule]:
    """Rules from parsed JSON: a list of objects with :class:`Rule`'s fields.

    ``"judge": true`` makes the rule answer with :func:`substring_judge`.
    """
    if not isinstance(data, list):
        raise DoubleConfigError("A rules file must hold a JSON list of rule objects.")
    rules = []
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise DoubleConfigError(f"Rule #{position} is not a JSON object.")
        options = dict(item)
        judge = bool(options.pop("judge", False))
        unknown = sorted(set(options) - _RULE_FIELDS)
        if unknown:
            raise DoubleConfigError(f"Rule #{position} has unknown fields {unknown}.")
        rule = Rule(**options)
        if judge:
            rule.content = substring_judge
        rules.append(rule)
    return rules


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kyai_testing.llm_double",
        description="Serve an OpenAI-compatible LLM test double on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="a served candidate model (repeatable; default: candidate)",
    )
    parser.add_argument(
        "--judge-model",
        action="append",
        default=[],
        help="a served model answered by the substring judge (repeatable)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=4096,
        help="context window of every model; 0 for unlimited (4096)",
    )
    parser.add_argument(
        "--no-report-max-model-len",
        action="store_true",
        help="leave max_model_len off the /v1/models cards (like TRT-LLM, llama.cpp)",
    )
    parser.add_argument("--overflow-style", choices=OVERFLOW_STYLES, default="vllm")
    parser.add_argument(
        "--clamp-max-tokens",
        action="store_true",
        help="silently clamp an oversized max_tokens (like llama.cpp)",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per chat answer")
    parser.add_argument(
        "--ttft-ms",
        type=float,
        default=0.0,
        help="milliseconds from an answer being ready to its first token (0)",
    )
    parser.add_argument(
        "--token-ms", type=float, default=0.0, help="milliseconds between tokens (0)"
    )
    parser.add_argument(
        "--stream-mode",
        choices=STREAM_MODES,
        default="stream",
        help="answer stream=true with server-sent events, a 400 naming stream, or plain JSON",
    )
    parser.add_argument(
        "--interrupt-requests",
        action="store_true",
        help="one chat request at a time; a stream ends with [DONE] and no finish_reason as "
        "soon as a newer request waits (llama-cpp-python's default)",
    )
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    parser.add_argument(
        "--answer", default=DEFAULT_CONTENT, help="answer when no rule matches (OK)"
    )
    parser.add_argument("--rules", type=Path, default=None, help="JSON file of rules")
    parser.add_argument(
        "--ready-file", type=Path, default=None, help="write the URL here once listening"
    )
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="share of chat requests that fail (seeded; see --fault-kinds) (0)",
    )
    parser.add_argument(
        "--fault-kinds",
        default=",".join(FAULT_KINDS),
        help=f"comma-separated fault kinds (default {','.join(FAULT_KINDS)}; streamed "
        f"answers only: {','.join(STREAM_FAULT_KINDS)})",
    )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the faults (0)")
    parser.add_argument(
        "--stall", type=float, default=3.0, help="seconds a 'stall' fault waits (3)"
    )
    parser.add_argument(
        "--echo-headers",
        action="store_true",
        help="echo the request's Authorization header in error bodies (like some gateways)",
    )
    return parser


def build_double(args: argparse.Namespace) -> LLMDouble:
    """The double a parsed command line describes."""
    window = args.max_model_len if args.max_model_len > 0 else None

    def spec(name: str) -> ModelSpec:
        return ModelSpec(
            name,
            max_model_len=window,
            report_max_model_len=not args.no_report_max_model_len,
            overflow_style=args.overflow_style,
            clamp_max_tokens=args.clamp_max_tokens,
        )

    # A name given both ways is a judge (``--model judge --judge-model judge``).
    candidates = [name for name in args.model if name not in args.judge_model]
    candidates = candidates or ([] if args.judge_model else ["candidate"])
    models = [spec(name) for name in [*candidates, *args.judge_model]]
    rules: list[Rule] = []
    if args.rules is not None:
        rules.extend(rules_from_json(json.loads(args.rules.read_text(encoding="utf-8"))))
    rules.extend(Rule(model=name, content=substring_judge) for name in args.judge_model)
    rules.append(Rule(content=args.answer))
    faults = None
    if args.fault_rate > 0:
        kinds = tuple(kind.strip() for kind in args.fault_kinds.split(",") if kind.strip())
        faults = Faults(rate=args.fault_rate, kinds=kinds, seed=args.fault_seed, stall_s=args.stall)
    return LLMDouble(
        models=models,
        rules=rules,
        latency_s=args.latency,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        faults=faults,
        echo_headers=args.echo_headers,
        ttft_s=args.ttft_ms / 1000.0,
        token_s=args.token_ms / 1000.0,
        stream_mode=args.stream_mode,
        interrupt_requests=args.interrupt_requests,
    )


async def _serve(double: LLMDouble, ready_file: Path | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with double:
        print(
            f"LLM double listening on {double.url} (models: {', '.join(double.models)})",
            flush=True,
        )
        if ready_file is not None:
            ready_file.write_text(double.url + "\n", encoding="utf-8")
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the double from the command line until SIGINT or SIGTERM."""
    args = _parser().parse_args(argv)
    try:
        double = build_double(args)
    except (DoubleConfigError, OSError, ValueError, TypeError) as exc:
        print(f"llm_double: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(double, args.ready_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
