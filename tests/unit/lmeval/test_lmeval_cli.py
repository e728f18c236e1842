"""kyai lm-eval's --help: plain text, every exit status it can return."""

from __future__ import annotations

import pytest


def test_help_is_plain_text_and_lists_every_exit_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kyai.cli import main

    with pytest.raises(SystemExit):
        main(["lm-eval", "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:" not in text
    statuses = text.split("exit status:")[1]
    for code in ("0", "1", "2", "3", "4", "130"):
        assert f"\n  {code} " in statuses, statuses
