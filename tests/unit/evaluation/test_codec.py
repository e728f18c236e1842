"""The hot path's JSON (orjson with a json fallback): the same values, bytes and errors as json."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kyai._json import dumps_body, loads, record_line
from kyai.datasets import Row, read_rows_jsonl, write_rows_jsonl
from kyai.datasets._store import _row_line
from kyai.evaluation._redact import (
    REDACTED,
    forget_secrets,
    redact,
    redact_bytes,
    register_secret,
)
from kyai.evaluation._store import dumps, line


def reference_line(value: Any) -> bytes:
    return (dumps(value) + "\n").encode("utf-8")


RECORDS: list[Any] = [
    {
        "row_index": 7,
        "row_id": "q00007",
        "started_at": "2026-12-01T06:00:00.123Z",
        "content": "Adding 1000 and 20000 gives 21000. The answer is 21000.",
        "reasoning_content": None,
        "usage": {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60},
        "latency_ms": 1.234,
        "elapsed_ms": 0.0,
        "error": None,
        "nested": [{"b": 1, "a": [True, False, None]}, [], {}],
    },
    {"z": 1, "a": 2, "é": 3, "Z": 4, "ä": 5, "\U0001f600": 6, "\u2028": 7, "_": 8},
    {"text": 'quotes " and \\ backslash, control \x00\x01\x1f\x7f tab\t newline\n cr\r'},
    {"unicode": "日本語 ünïcödé \u2028\u2029 \U0001f600 \ufeff"},
    {"floats": [0.1, 1.5, 1e16, 1e22, 123456.789, -0.0, 2.5e-300, 1.7976931348623157e308]},
    {"ints": [0, -1, 2**63 - 1, -(2**63)]},
]


@pytest.mark.parametrize("value", RECORDS)
def test_a_record_line_is_byte_equal_to_sorted_compact_json(value: Any) -> None:
    assert record_line(value) == reference_line(value)
    assert json.loads(record_line(value)) == value


def test_what_orjson_refuses_takes_the_json_way() -> None:
    huge = {"n": 2**70, "a": 1}
    assert record_line(huge) == reference_line(huge)
    assert dumps_body(huge) == b'{"n":1180591620717411303424,"a":1}'
    with pytest.raises(TypeError):  # mixed key types cannot be sorted: json's own error
        record_line({1: "a", "b": 2})


def test_small_floats_read_back_the_same() -> None:
    value = {"x": 1e-05, "y": 1e-07, "z": 0.000123}
    assert json.loads(record_line(value)) == value


def test_loads_accepts_what_json_accepts() -> None:
    assert loads(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert loads('{"a": 1}') == {"a": 1}
    nan = loads(b'{"x": NaN, "y": -Infinity}')
    assert math.isnan(nan["x"]) and nan["y"] == -math.inf
    # Beyond 64 bits orjson reads a float (documented in kyai._json).
    assert loads(b'{"n": 123456789012345678901234567890}') == {"n": 1.2345678901234568e29}
    assert loads('{"a": "é"}'.encode("utf-16")) == {"a": "é"}  # json detects UTF-16


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b'{"choices": [{"message": {"content": "cut', json.JSONDecodeError),
        (b"<html>502 Bad Gateway</html>", json.JSONDecodeError),
        (b"", json.JSONDecodeError),
        (b'{"a": "\xff\xfe"}', UnicodeDecodeError),
    ],
)
def test_loads_raises_what_json_raises(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        json.loads(data)
    with pytest.raises(error):
        loads(data)


def test_a_body_is_compact_utf8_json() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "naïve 日本"}], "max_tokens": 9}
    assert json.loads(dumps_body(body)) == body
    assert "naïve 日本".encode() in dumps_body(body)


@pytest.fixture
def secret() -> Iterator[str]:
    key = "sk-live-7f3a9Q+/c0ffee=="
    forget_secrets()
    register_secret(key)
    yield key
    forget_secrets()


def test_redacting_bytes_matches_redacting_text(secret: str) -> None:
    texts = [
        f"Authorization: Bearer {secret}",
        base64.b64encode(f"user:{secret}".encode()).decode(),
        base64.urlsafe_b64encode(f"xx{secret}".encode()).decode(),
        f"é{secret}日本{secret}",
        "nothing to hide",
    ]
    for text in texts:
        assert redact_bytes(text.encode()) == redact(text).encode()
    assert secret.encode() not in redact_bytes(texts[0].encode())
    assert REDACTED.encode() in redact_bytes(texts[0].encode())


def test_a_stored_line_is_redacted(secret: str) -> None:
    record = {"row_index": 1, "error": {"message": f"HTTP 500: echoed Bearer {secret}"}}
    stored = line(record)
    assert secret.encode() not in stored
    assert stored == redact(dumps(record)).encode() + b"\n"


def test_dataset_jsonl_bytes_are_the_sorted_compact_json_of_each_row(tmp_path: Path) -> None:
    rows = [
        Row(0, "a", "What is 1 + 1?", "2"),
        Row(1, "é日本", 'quote " tab\t nl\n', "\U0001f600", {"z": [1.5, None], "a": {"k": True}}),
        Row(2, "x", "control \x01 \u2028", "", {"big": 2**70, "small": 1e-3}),
    ]
    path = tmp_path / "dataset.jsonl"
    write_rows_jsonl(path, rows)
    assert path.read_bytes() == "".join(_row_line(row) + "\n" for row in rows).encode("utf-8")
    assert read_rows_jsonl(path) == tuple(rows)
