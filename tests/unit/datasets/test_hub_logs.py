"""huggingface_hub's warnings (its retries) are printed once, through the process's handlers."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from kyai.datasets import route_hub_logs


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """A root handler writing to a string, and stderr's replacement for hub's own handler."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    hub = logging.getLogger("huggingface_hub")
    saved = list(hub.handlers)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        for kept in saved:
            if kept not in hub.handlers:
                hub.addHandler(kept)


def test_a_hub_retry_warning_is_printed_once(
    stream: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    from huggingface_hub.utils import logging as hub_logging

    hub_logging._reset_library_root_logger()
    hub_logging._configure_library_root_logger()  # as at import: a handler of its own
    logger = hub_logging.get_logger("huggingface_hub.utils._http")
    route_hub_logs()
    logger.warning("Retrying in 1s [Retry 1/5].")
    assert stream.getvalue().count("Retrying in 1s") == 1
    assert logging.getLogger("huggingface_hub").handlers == []
    assert "Retrying" not in capsys.readouterr().err  # no second, plain copy on stderr
