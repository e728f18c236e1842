"""Flag values of ``kyai generate``, ``judge`` and ``run``: usage errors, files, secrets."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kyai.evaluation._keyfile import KeyFile

__all__ = ["HF_TOKEN_ENV", "UsageError", "judge_api_key", "secret", "text_or_file"]

#: Environment variable of the HuggingFace token (datasets downloads); redacted like API keys.
HF_TOKEN_ENV = "HF_TOKEN"


class UsageError(Exception):
    """A flag's value cannot be used; the message names the flag."""


def text_or_file(flag: str, value: str | None) -> str | None:
    """A prompt flag's text, or the contents of the file after ``@``."""
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:])
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc}") from exc


def secret(flag: str, variable: str | None) -> str | None:
    """The API key in the environment variable a flag names."""
    if variable is None:
        return None
    from kyai.evaluation._redact import register_secret

    value = os.environ.get(variable)
    if not value:
        raise UsageError(f"{flag}: the environment variable {variable} is not set or is empty")
    register_secret(value)
    return value


def judge_api_key(args: argparse.Namespace) -> str | KeyFile | None:
    """The judge's key: ``--judge-api-key-env``'s variable, or ``--judge-api-key-file``'s file.

    The file is read once here, so that one that cannot be read is a usage error before any
    row is judged; later it is read again at each request it changed for.
    """
    path = getattr(args, "judge_api_key_file", None)
    if path is None:
        return secret("--judge-api-key-env", args.judge_api_key_env)
    from kyai.evaluation._keyfile import KeyFile, KeyFileError

    key_file = KeyFile(path, flag="--judge-api-key-file")
    try:
        key_file.key()
    except KeyFileError as exc:
        raise UsageError(str(exc)) from None
    return key_file
