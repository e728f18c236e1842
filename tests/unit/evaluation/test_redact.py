"""Redaction of held secrets, raw and base64, from what the engine stores and prints."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kyai.evaluation._redact import (
    REDACTED,
    RedactingFilter,
    forget_secrets,
    redact,
    register_secret,
)
from kyai.evaluation._store import JsonlLog, write_json

KEY = "sk-live-7f3a9Q+/c0ffee=="


@pytest.fixture(autouse=True)
def secret() -> Iterator[None]:
    forget_secrets()
    register_secret(KEY)
    yield
    forget_secrets()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "form",
    [
        KEY,
        f"Bearer {KEY}",
        b64(KEY),
        b64url(KEY),
        b64(f"Bearer {KEY}"),
        b64url(f"Bearer {KEY}"),
        b64(f"Authorization: Bearer {KEY}"),
        b64(f"user:{KEY}"),
        b64(f"xy{KEY}z"),
    ],
)
def test_every_form_of_the_key_is_redacted(form: str) -> None:
    text = f"gateway says: {form} (echo)"
    cleaned = redact(text)
    assert KEY not in cleaned
    assert b64(KEY).rstrip("=")[:-2] not in cleaned
    # Decoding what is left cannot give the key back.
    for token in cleaned.split():
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                assert KEY.encode() not in decode(token + "===")
            except ValueError:
                pass
    assert REDACTED in cleaned


def test_ordinary_text_is_left_alone() -> None:
    assert redact("nothing secret here: sk-other") == "nothing secret here: sk-other"


def test_short_values_are_not_treated_as_secrets() -> None:
    register_secret("abc")
    assert redact("abc abc") == "abc abc"


def test_store_and_logs_never_hold_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = JsonlLog(tmp_path / "g.jsonl")
    log.append({"row_index": 0, "error": {"message": f"HTTP 500: Bearer {KEY}"}})
    log.close()
    write_json(tmp_path / "run.json", {"echo": b64(f"Bearer {KEY}")})
    for path in tmp_path.iterdir():
        text = path.read_text(encoding="utf-8")
        assert KEY not in text and b64(KEY)[:-4] not in text, path
        json.loads(text.splitlines()[0] if path.suffix == ".jsonl" else text)
    logger = logging.getLogger("kyai.test.redact")
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.WARNING, logger="kyai.test.redact"):
        logger.warning("server said %s", f"Bearer {KEY}")
    assert KEY not in caplog.text
    assert REDACTED in caplog.text
