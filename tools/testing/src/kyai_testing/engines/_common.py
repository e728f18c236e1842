"""What the engine stand-ins share: the parsed command line, flag tables, settings from env.

A stand-in parses an engine container's command line with the real engine's options, from
the same flag tables the operator checks EngineArgsSets against (``kyai.engines``'
``flags/<engine>/<version>.json``, written by ``make engine-flags`` from the engines' own
parsers), so a stand-in refuses what the real engine of that version refuses. The version is
the one the pod's image names (``KYAI_DEVCLUSTER_IMAGE``, set by the devcluster's kubelet),
else ``KYAI_STANDIN_ENGINE_VERSION``, else the operator's default image's; a version without
a table of its own parses with the newest table. The parsed command line becomes a
:class:`ServeConfig`: where to listen, what to call the model, its context window and
whether ``/v1/models`` reports it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kyai.engines import Flag, FlagTable, engine_for, image_version
from kyai.engines import table_for as _table_for
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


#: The image of the pod's container (the devcluster's kubelet sets it).
ENV_IMAGE = "KYAI_DEVCLUSTER_IMAGE"
#: The engine version to imitate when no image says it.
ENV_ENGINE_VERSION = "KYAI_STANDIN_ENGINE_VERSION"


def engine_version(engine: str, environ: Mapping[str, str]) -> str | None:
    """The version a stand-in imitates: the image's, the variable's, else the default's."""
    image = environ.get(ENV_IMAGE, "").strip()
    if image:
        return image_version(image)
    version = environ.get(ENV_ENGINE_VERSION, "").strip()
    if version:
        return version
    return image_version(engine_for(engine).default_image)


def flag_table(engine: str, environ: Mapping[str, str] | None = None) -> FlagTable:
    """The flag table of the version ``engine``'s stand-in imitates (see the module doc)."""
    choice = _table_for(engine, engine_version(engine, os.environ if environ is None else environ))
    if choice.table is None:
        raise StandinUsageError(f"kyai_testing.engines: no flag table of {engine}.\n", 2)
    return choice.table


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


class _Switch(argparse.Action):
    """A switch with spellings that turn it on and others that turn it off.

    argparse's ``BooleanOptionalAction`` (``--no-X``) and vLLM 0.34's ``EnableDisableAction``
    (``--disable-X``) alike.
    """

    def __init__(
        self, option_strings: Sequence[str], dest: str, negatives: Sequence[str] = (), **kw: Any
    ) -> None:
        self.negatives = frozenset(negatives)
        super().__init__(option_strings, dest, nargs=0, default=None, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, option_string not in self.negatives)


_CONVERTERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float}


def _flag_kwargs(flag: Flag, types: Mapping[str, Callable[[str], Any]]) -> dict[str, Any]:
    """Argparse's keywords for one table entry (the engine's own kind, choices, type)."""
    kwargs: dict[str, Any] = {}
    if flag.kind == "boolean":
        if flag.negative is not None:
            kwargs["action"] = _Switch
            kwargs["negatives"] = (flag.negative, *flag.negative_aliases)
        else:
            kwargs["action"] = "store_true" if flag.sets else "store_false"
        return kwargs
    if flag.kind == "deprecated":
        return {"action": _Refuse, "help": flag.message or f"{flag.option} is deprecated."}
    if flag.kind == "list":
        kwargs["nargs"] = "+"
    elif flag.kind == "any":
        kwargs["nargs"] = "*"
    elif flag.kind == "optional":
        kwargs["nargs"] = "?"
    elif flag.kind == "append":
        kwargs["action"] = "append"
    dest = flag.name.replace("-", "_")
    converter = types.get(dest) or _CONVERTERS.get(flag.type or "")
    if converter is not None:
        kwargs["type"] = converter
    if flag.choices is not None:
        kwargs["choices"] = [
            choice if converter is not None else str(choice) for choice in flag.choices
        ]
    if flag.required:
        kwargs["required"] = True
    return kwargs


def add_table_flags(
    parser: argparse.ArgumentParser,
    table: FlagTable,
    types: Mapping[str, Callable[[str], Any]] | None = None,
) -> None:
    """Add every option of ``table`` to ``parser``; ``types`` maps a dest to a converter."""
    for flag in table.flags:
        spellings = list(flag.spellings)
        kwargs = _flag_kwargs(flag, types or {})
        if kwargs.get("action") is _Switch:
            spellings += [*kwargs["negatives"]]
        parser.add_argument(*spellings, dest=flag.name.replace("-", "_"), **kwargs)


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
