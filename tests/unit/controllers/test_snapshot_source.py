"""Bad rows are reported by the field or ConfigMap key they came from; inline rows are bounded."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import SnapshotSpec
from kyai.api.snapshot import MAX_INLINE_CHARACTERS, MAX_INLINE_ROWS
from kyai.controllers._services import Services
from kyai.controllers.snapshot import resolve
from kyai.datasets import DatasetError
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings

PROMPTS = {"generation": "Answer.", "judge": "Score."}


class ConfigMaps:
    def __init__(self, data: dict[str, str]) -> None:
        self.data = data

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "ConfigMap"
        return {"metadata": {"name": name}, "data": self.data} if name == "rows" else None


def svc(data: dict[str, str] | None = None) -> Services:
    return Services(ConfigMaps(data or {}), OperatorSettings(), RunMetrics())  # type: ignore[arg-type]


async def test_a_bad_config_map_line_names_the_config_map_and_key() -> None:
    spec = SnapshotSpec.model_validate(
        {"source": {"configMapRef": {"name": "rows", "key": "q.jsonl"}}, "prompts": PROMPTS}
    )
    good = '{"instruction": "a", "ground_truth_response": "b"}\n'
    with pytest.raises(DatasetError) as caught:
        await resolve(svc({"q.jsonl": good + "not json\n"}), "n", "snap", spec)
    message = str(caught.value)
    assert message.startswith("ConfigMap rows key q.jsonl (spec.source.configMapRef), line 2")
    assert "/tmp" not in message and "kyai-snapshot-" not in message


async def test_a_bad_inline_row_names_its_index_and_camel_case_field() -> None:
    rows = [
        {"instruction": "fine", "groundTruthResponse": "yes", "externalRowId": "q1"},
        {"instruction": "again", "groundTruthResponse": "no", "externalRowId": "q1"},
    ]
    spec = SnapshotSpec.model_validate({"source": {"rows": rows}, "prompts": PROMPTS})
    with pytest.raises(DatasetError) as caught:
        await resolve(svc(), "n", "snap", spec)
    message = str(caught.value)
    assert message.startswith("spec.source.rows[1]"), message
    assert "'externalRowId'" in message and "/tmp" not in message


def test_inline_rows_are_bounded_with_a_message_naming_the_way_out() -> None:
    row = {"instruction": "q", "groundTruthResponse": "a"}
    SnapshotSpec.model_validate({"source": {"rows": [row] * MAX_INLINE_ROWS}, "prompts": PROMPTS})
    with pytest.raises(ValidationError) as many:
        SnapshotSpec.model_validate(
            {"source": {"rows": [row] * (MAX_INLINE_ROWS + 1)}, "prompts": PROMPTS}
        )
    assert many.value.errors()[0]["loc"] == ("source", "rows")
    long_row = {"instruction": "q" * 1000, "groundTruthResponse": "a"}
    count = MAX_INLINE_CHARACTERS // 1001 + 1
    with pytest.raises(ValidationError) as large:
        SnapshotSpec.model_validate({"source": {"rows": [long_row] * count}, "prompts": PROMPTS})
    text = str(large.value)
    assert "spec.source.rows" in text and "spec.source.url" in text
    assert "spec.source.configMapRef" in text and str(MAX_INLINE_CHARACTERS) in text
