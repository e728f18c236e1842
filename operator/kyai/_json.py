"""JSON on hot paths (request bodies, answers, stored records, dataset rows) through orjson.

One row costs a request body to encode, an answer to parse and a record to store; with the
standard library's ``json`` those took about a third of kyai's own CPU per row (aiohttp's
apart). orjson does the same work several times faster. Whatever orjson refuses falls back to
``json``, so that whatever the engine handled before it still handles, alike but for this:

- :func:`loads` accepts what ``json.loads`` accepts (``NaN``/``Infinity`` literals, UTF-16
  and UTF-32 text), raising the same exceptions (``json.JSONDecodeError`` or
  ``UnicodeDecodeError``) on what it does not; it reads an integer beyond 64 bits (which no
  chat server sends) as a float, where ``json`` keeps it exact;
- :func:`record_line` writes the UTF-8 bytes of ``json.dumps(value, ensure_ascii=False,
  sort_keys=True, separators=(",", ":"))`` and a line feed (keys sorted by code point, no
  ASCII escaping, the same escapes of control characters). Both write a float in its
  shortest round-trip form; they spell some floats below 1e-4 differently (``1e-05`` and
  ``0.00001``: the same number when read back), and orjson writes a non-finite float
  (which JSON cannot hold) as ``null`` where ``json`` writes ``NaN``.
"""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar, cast

import orjson

_SORTED_LINE = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE
_T = TypeVar("_T")


def loads(data: bytes | str) -> Any:
    """Parse JSON text; ``json.loads`` semantics and exceptions."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # NaN/Infinity literals, huge integers, invalid UTF-8 or no JSON at all: the standard
        # library decides, and raises what callers expect.
        return json.loads(data)


def dumps_body(value: Any) -> bytes:
    """A request body: compact JSON in UTF-8 (no key order is required)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: a type or an integer orjson does not take
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def record_line(value: Any) -> bytes:
    """One stored record: compact, key-sorted JSON without ASCII escaping, newline-ended."""
    try:
        return orjson.dumps(value, option=_SORTED_LINE)
    except TypeError:  # non-string keys, integers beyond 64 bits, lone surrogates...
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return (text + "\n").encode("utf-8")


def clone(value: _T) -> _T:
    """A deep copy of a JSON tree (dicts, lists, strings, numbers, booleans, None).

    Through orjson, about six times faster than ``copy.deepcopy`` for a Kubernetes object
    (a copy is what JSON would read back: tuples come back as lists, a non-finite float as
    None); a tree orjson does not encode (bytes, non-string keys, integers beyond 64 bits)
    is deep-copied instead.
    """
    try:
        return cast(_T, orjson.loads(orjson.dumps(value)))
    except TypeError:  # orjson.JSONEncodeError
        return copy.deepcopy(value)
