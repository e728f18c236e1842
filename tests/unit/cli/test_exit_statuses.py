"""Each command's ``--help`` lists its own exit statuses, and its own gates only."""

from __future__ import annotations

import argparse

from kyai._exitcodes import COMMAND_CODES, EXIT_GATE_FAILED, GATES, exit_codes_epilog
from kyai.cli import build_parser

#: Every gate flag of any command.
ALL_GATES = {flag for flags in GATES.values() for flag in flags}


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_a_gated_command_names_its_own_gates_and_no_others() -> None:
    found = commands()
    gated = {name for name, codes in COMMAND_CODES.items() if EXIT_GATE_FAILED in codes}
    assert set(GATES) == gated  # every command that exits 4 names its gates
    assert set(GATES) <= set(found)
    for name, flags in GATES.items():
        command = found[name]
        options = {option for action in command._actions for option in action.option_strings}
        assert set(flags) <= options, name  # a gate the command really has
        (line,) = [ln for ln in command.format_help().splitlines() if ln.startswith("  4 ")]
        assert line.endswith(f"a quality gate failed ({', '.join(flags)})"), (name, line)
        for other in ALL_GATES - set(flags):
            assert other not in line, (name, other)


def test_kyai_compare_help_lists_only_the_non_inferiority_gate() -> None:
    text = commands()["compare"].format_help()
    assert "--fail-under" not in text and "--threshold" not in text
    assert "--max-error-rate" not in text
    assert "\n  4    a quality gate failed (--non-inferiority)\n" in text


def test_each_epilog_names_its_commands_gates_only() -> None:
    assert "\n  4    a quality gate failed (--non-inferiority)" in exit_codes_epilog("compare")
    assert "--threshold" not in exit_codes_epilog("compare")
    assert "(--fail-under, --max-error-rate)\n" in exit_codes_epilog("run")
    assert "\n  4    a quality gate failed (--threshold)\n" in exit_codes_epilog("lm-eval")
    assert "\n  4 " not in exit_codes_epilog("generate")  # no gate, no 4
