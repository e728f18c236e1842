"""kyai_testing.kubectl_watch: the documents of ``kubectl get --watch -o json``, as they come."""

from __future__ import annotations

import json
from collections.abc import Iterator

from kyai_testing.kubectl_watch import json_documents


def test_documents_over_many_lines_and_several_on_one_line_come_out_whole_and_in_order() -> None:
    first = {"type": "ADDED", "object": {"metadata": {"name": "a"}, "spec": {"n": [1, 2]}}}
    second = {"type": "MODIFIED", "object": {"metadata": {"name": "a"}}}
    text = json.dumps(first, indent=4) + "\n" + json.dumps(second) + json.dumps({"x": 1}) + "\n"
    assert list(json_documents(text.splitlines(keepends=True))) == [first, second, {"x": 1}]


def test_a_document_is_yielded_only_once_its_last_line_arrived() -> None:
    lines = json.dumps({"metadata": {"name": "late"}}, indent=2).splitlines(keepends=True)
    assert len(lines) > 3
    read: list[str] = []

    def kubectl() -> Iterator[str]:
        for line in lines:
            read.append(line)
            yield line

    assert next(json_documents(kubectl())) == {"metadata": {"name": "late"}}
    assert read == lines  # not before its closing brace
    # An unfinished document at the end of the stream (kubectl killed) is never yielded.
    assert list(json_documents(lines[:-1])) == []
