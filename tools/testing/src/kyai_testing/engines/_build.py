"""The stand-in server an engine command line and the environment describe.

Shared by ``python -m kyai_testing.engines`` (one engine) and the multi-node launches of
:mod:`kyai_testing.engines._multinode` (a group's leader serves the engine once its workers
joined); both import it, it imports neither.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from kyai_testing._model import DEFAULT_CONTENT, Rule
from kyai_testing.engines import (
    ENV_ANSWER,
    ENV_REASONING,
    ENV_RULES,
    StandinServer,
    StandinUsageError,
    load_seconds,
    standin_for,
)
from kyai_testing.engines._common import DEFAULT_REASONING, pacing
from kyai_testing.llm_double import rules_from_json


def _rules(environ: Mapping[str, str]) -> list[Rule]:
    path = environ.get(ENV_RULES, "").strip()
    if not path:
        return []
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return rules_from_json(data)
    except (OSError, ValueError, TypeError) as exc:
        raise StandinUsageError(f"kyai_testing.engines: {ENV_RULES}={path}: {exc}\n", 2) from None


def build(argv: Sequence[str], environ: Mapping[str, str]) -> StandinServer:
    """The stand-in server an engine command line and the environment describe."""
    standin = standin_for(argv)
    config = standin.parse(argv, environ)
    ttft_s, token_s = pacing(environ)
    return StandinServer(
        standin,
        config,
        load_seconds=load_seconds(environ),
        rules=_rules(environ),
        answer=environ.get(ENV_ANSWER) or DEFAULT_CONTENT,
        reasoning=environ.get(ENV_REASONING) or DEFAULT_REASONING,
        host=config.bind_host(environ),
        ttft_s=ttft_s,
        token_s=token_s,
    )
