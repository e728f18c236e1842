"""What the engine stand-ins share: the parsed command line, flag tables, settings from env.

A stand-in parses an engine container's command line with the real engine's flag set, read
from a JSON table in ``flags/`` (see ``scripts/extract_engine_flags.py`` for where each table
comes from), and turns it into a :class:`ServeConfig`: where to listen, what to call the model,
its context window and whether ``/v1/models`` reports it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from kyai_testing._metrics import MetricsFamily
from kyai_testing._servers import OverflowStyle

#: Seconds a stand-in answers 503 on its health route before it is "loaded".
ENV_LOAD_SECONDS = "KYAI_STANDIN_LOAD_SECONDS"
DEFAULT_LOAD_SECONDS = 1.0

#: The pod's own address in the devcluster: bound instead of 0.0.0.0 / :: when set.
ENV_POD_IP = "KYAI_DEVCLUSTER_POD_IP"

#: Context window when neither a flag nor the model's config.json gives one.
ENV_DEFAULT_WINDOW = "KYAI_STANDIN_MAX_MODEL_LEN"
DEFAULT_WINDOW = 4096

#: A JSON rules file (kyai_testing.llm_double's format) scripting the answers.
ENV_RULES = "KYAI_STANDIN_RULES"

#: The answer when no rule matches.
ENV_ANSWER = "KYAI_STANDIN_ANSWER"

#: The thinking text returned as reasoning when a reasoning-parser flag is given.
ENV_REASONING = "KYAI_STANDIN_REASONING"
DEFAULT_REASONING = "Let me think about this briefly."

#: Milliseconds from an answer being ready to its first token, and between tokens.
ENV_TTFT_MS = "KYAI_STANDIN_TTFT_MS"
ENV_TOKEN_MS = "KYAI_STANDIN_TOKEN_MS"

#: Keys of a HuggingFace config.json holding the context length, in the engines' order.
CONFIG_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")

#: Addresses meaning "every interface".
ANY_ADDRESSES = frozenset({"0.0.0.0", "::", ""})


class StandinUsageError(Exception):
    """The command line is refused the way the engine refuses it.

    ``output`` is printed to stderr verbatim and the process exits with ``exit_code``.
    """

    def __init__(self, output: str, exit_code: int) -> None:
        super().__init__(output)
        self.output = output
        self.exit_code = exit_code


@dataclass(frozen=True)
class ServeConfig:
    """An engine server as its command line describes it."""

    engine: str
    """vllm, sglang or trtllm."""
    model: str
    """The model argument (HuggingFace id or path)."""
    served_names: tuple[str, ...]
    """The names ``/v1/models`` lists (the first is the one answered by default)."""
    host: str
    """The address given on the command line."""
    port: int
    """The port given on the command line (or the engine's default)."""
    max_model_len: int
    """The context window the server enforces."""
    window_source: str
    """Where the window came from: the flag's name, ``config.json`` or ``default``."""
    reasoning_parser: str | None = None
    """The reasoning parser's name when one is enabled."""
    api_keys: tuple[str, ...] = ()
    """The API keys the server accepts (none: no key needed)."""
    version: str = ""
    """The engine version the flag table is from."""
    clamp_max_tokens: bool = False
    """Shrink an oversized ``max_tokens`` instead of refusing it (SGLang's
    ``--allow-auto-truncate``, TensorRT-LLM's PyTorch backend)."""
    enforce_window: bool = True
    """Whether the double enforces (or clamps to) the window; False when the stand-in's own
    ``refusal`` is the only check (TensorRT-LLM's TensorRT backend)."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Engine-specific settings the stand-in imitates (e.g. TensorRT-LLM's backend)."""

    def bind_host(self, environ: Mapping[str, str] | None = None) -> str:
        """The address to bind: the pod's IP when the command line says "all interfaces"."""
        env = os.environ if environ is None else environ
        pod_ip = env.get(ENV_POD_IP, "").strip()
        if self.host in ANY_ADDRESSES and pod_ip:
            return pod_ip
        return self.host


# -- flag tables ---------------------------------------------------------------------------


@cache
def flag_table(engine: str) -> dict[str, Any]:
    """The JSON flag table of ``engine`` (``flags/<engine>.json``)."""
    text = (
        resources.files("kyai_testing.engines")
        .joinpath(f"flags/{engine}.json")
        .read_text(encoding="utf-8")
    )
    table: dict[str, Any] = json.loads(text)
    return table


class _Refuse(argparse.Action):
    """A flag the engine rejects when used (SGLang's ``DeprecatedAction``: a ValueError)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        raise StandinUsageError(f"ValueError: {self.help}\n", 1)


def add_table_flags(
    parser: argparse.ArgumentParser,
    engine: str,
    types: Mapping[str, Callable[[str], Any]] | None = None,
) -> None:
    """Add every flag of ``engine``'s table to ``parser``; ``types`` maps a dest to a type."""
    types = types or {}
    for entry in flag_table(engine)["flags"]:
        options: list[str] = entry["options"]
        kind: str = entry["kind"]
        kwargs: dict[str, Any] = {}
        if kind == "flag":
            kwargs["action"] = "store_true"
        elif kind == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "list":
            kwargs["nargs"] = "+"
        elif kind == "optional":
            kwargs["nargs"] = "?"
        elif kind == "any":
            kwargs["nargs"] = "*"
        elif kind == "append":
            kwargs["action"] = "append"
        elif kind == "deprecated":
            kwargs["action"] = _Refuse
            kwargs["help"] = entry.get("message") or f"{options[0]} is deprecated."
        if entry.get("required"):
            kwargs["required"] = True
        action = parser.add_argument(*options, **kwargs)
        if action.dest in types and kind in ("value", "optional"):
            action.type = types[action.dest]


def run_argparse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, turning argparse's exit into :class:`StandinUsageError`."""
    stderr = _Capture()
    real_stderr, sys.stderr = sys.stderr, stderr
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
        raise StandinUsageError(stderr.text(), code) from None
    finally:
        sys.stderr = real_stderr


class _Capture:
    """A write-only text stream collecting what argparse prints."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        """Nothing to flush."""

    def text(self) -> str:
        return "".join(self._parts)


def fail(output: str, exit_code: int = 1) -> NoReturn:
    """Refuse the command line with ``output`` and ``exit_code``."""
    raise StandinUsageError(output if output.endswith("\n") else output + "\n", exit_code)


# -- context window ------------------------------------------------------------------------


def window_from_config(model: str) -> int | None:
    """The context length in ``<model>/config.json`` when the model is a local directory."""
    path = Path(model) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for key in CONFIG_WINDOW_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def resolve_window(
    flag_value: int | None, flag_name: str, model: str, environ: Mapping[str, str]
) -> tuple[int, str]:
    """The window and its source: the flag, the model's config.json, else the default."""
    if flag_value is not None:
        return flag_value, flag_name
    from_config = window_from_config(model)
    if from_config is not None:
        return from_config, "config.json"
    raw = environ.get(ENV_DEFAULT_WINDOW, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            fail(f"{ENV_DEFAULT_WINDOW}={raw!r} is not an integer.", 2)
        if value <= 0:
            fail(f"{ENV_DEFAULT_WINDOW}={raw!r} must be positive.", 2)
        return value, "default"
    return DEFAULT_WINDOW, "default"


def load_seconds(environ: Mapping[str, str]) -> float:
    """The simulated loading time from :data:`ENV_LOAD_SECONDS` (default one second)."""
    raw = environ.get(ENV_LOAD_SECONDS, "").strip()
    if not raw:
        return DEFAULT_LOAD_SECONDS
    try:
        value = float(raw)
    except ValueError:
        fail(f"{ENV_LOAD_SECONDS}={raw!r} is not a number of seconds.", 2)
    if not math.isfinite(value) or value < 0:
        fail(f"{ENV_LOAD_SECONDS}={raw!r} must be a non-negative number of seconds.", 2)
    return value


def pacing(environ: Mapping[str, str]) -> tuple[float, float]:
    """Seconds to the first token and between tokens (:data:`ENV_TTFT_MS`, :data:`ENV_TOKEN_MS`).

    Each defaults to 0; a bad value refuses the command line naming the variable.
    """
    values = []
    for name in (ENV_TTFT_MS, ENV_TOKEN_MS):
        raw = environ.get(name, "").strip()
        try:
            value = float(raw) if raw else 0.0
        except ValueError:
            fail(f"{name}={raw!r} is not a number of milliseconds.", 2)
        if not math.isfinite(value) or value < 0:
            fail(f"{name}={raw!r} must be a non-negative number of milliseconds.", 2)
        values.append(value / 1000.0)
    return values[0], values[1]


def positive_int(text: str) -> int:
    """An argparse type: a positive integer."""
    value = int(text)
    if value <= 0:
        raise ValueError(text)
    return value


@dataclass(frozen=True)
class EngineStandin:
    """One engine's stand-in: how to recognise, parse and imitate it."""

    name: str
    """vllm, sglang or trtllm."""
    matches: Callable[[Sequence[str]], bool]
    """Whether a command line starts this engine."""
    parse: Callable[[Sequence[str], Mapping[str, str]], ServeConfig]
    """The command line (and environment) as a :class:`ServeConfig`; raises
    :class:`StandinUsageError` as the engine would."""
    model_cards: Callable[[ServeConfig, int], list[dict[str, Any]]]
    """The ``data`` of ``/v1/models`` at a creation time."""
    overflow_style: OverflowStyle
    """The double's wording and error shape (for TensorRT-LLM: the flat ``sglang`` one, as its
    ``ErrorResponse`` has the same fields)."""
    refusal: Callable[[ServeConfig, int, int | None], str | None] | None = None
    """For engines the double does not know: the 400 message refusing a request of so many
    prompt tokens and ``max_tokens``, or None to let the double answer."""
    auth_exempt: Callable[[str], bool] = lambda path: not path.startswith("/v1")
    """Paths served without the API key (vLLM's middleware guards only ``/v1``)."""
    health_paths: tuple[str, ...] = ("/health",)
    """Routes answering 503 while loading, then 200 with an empty body."""
    extra_routes: Callable[[ServeConfig], dict[str, Any]] | None = None
    """More GET routes: path to a JSON body."""
    metrics: Callable[[ServeConfig], MetricsFamily | None] = lambda config: None
    """Whose serving metrics ``GET /metrics`` serves (None: no such route)."""
