"""Reading ``kubectl get --watch -o json``: one JSON document after another, not one per line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any


def json_documents(lines: Iterable[str]) -> Iterator[Any]:
    """Each JSON document of ``lines`` as soon as it is complete.

    kubectl prints each watched object (or event) as indented JSON over many lines, one after
    the other with no separator: a document is decoded once all of its lines have arrived.
    """
    decoder = json.JSONDecoder()
    buffer = ""
    for line in lines:
        buffer += line
        while buffer.strip():
            try:
                document, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                break  # the rest of this document is still to come
            buffer = buffer.lstrip()[end:]
            yield document
