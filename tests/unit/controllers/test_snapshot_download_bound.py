"""A built-in Snapshot says what it does while Resolving, and why it waits within a bound.

The devcluster walk (docs/getting-started/without-a-cluster.md; issue 35): ``humaneval-v1``
without network used to sit in ``Resolving`` ("resolving the rows") for as long as the Hub
client tried. Now its message says it downloads from
HuggingFace and for how long at most; past that bound, ``resolve`` gives up with the reason
(the reconciler then writes Pending/SourceUnavailable and tries again on its schedule).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kyai.api import SnapshotSpec
from kyai.controllers import snapshot
from kyai.controllers._services import Services
from kyai.controllers.snapshot import SourceUnavailable, resolve, resolving_message
from kyai.metrics import RunMetrics
from kyai.settings import OperatorSettings


def services() -> Services:
    return Services(None, OperatorSettings(), RunMetrics())  # type: ignore[arg-type]


def test_the_resolving_message_says_what_and_how_long() -> None:
    builtin = SnapshotSpec.model_validate({"builtin": "humaneval", "version": "v1"})
    message = resolving_message(builtin)
    assert message.startswith("downloading the built-in humaneval from HuggingFace")
    assert f"at most {snapshot.BUILTIN_DOWNLOAD_SECONDS:.0f} s" in message
    assert "Pending, saying why" in message
    custom = SnapshotSpec.model_validate(
        {"source": {"rows": [{"instruction": "q", "groundTruthResponse": "a"}]},
         "prompts": {"generation": "Answer.", "judge": "Score."}}
    )  # fmt: skip
    assert resolving_message(custom) == "resolving the rows"


async def test_a_download_that_hangs_gives_up_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def hanging(*_: Any, **__: Any) -> Any:
        release.wait(10)  # a network that drops packets
        raise AssertionError("not reached within the bound")

    monkeypatch.setattr(snapshot, "load_dataset", hanging)
    monkeypatch.setattr(snapshot, "BUILTIN_DOWNLOAD_SECONDS", 0.2)
    spec = SnapshotSpec.model_validate({"builtin": "humaneval", "version": "v1"})
    try:
        with pytest.raises(SourceUnavailable) as caught:
            await resolve(services(), "n", "humaneval-v1", spec)
    finally:
        release.set()
    message = str(caught.value)
    assert "humaneval could not be downloaded from HuggingFace within 0 s" in message
    assert "tried again on a schedule" in message
