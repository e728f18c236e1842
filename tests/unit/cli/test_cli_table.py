"""The ``kyai`` command table: each command imported on use, tools found by entry point."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import pytest

from kyai import cli
from kyai.cli import COMMANDS, PLUGIN_GROUP, build_parser, main

#: What ``kyai generate --help`` must not load: HTTP clients, graders, the tools.
HEAVY = ("aiohttp", "httpx", "kyai.graders", "kyai_devcluster", "kyai_testing", "kopf")


def modules_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after parsing ``argv`` as ``kyai`` does."""
    script = (
        "import json, sys\n"
        "from kyai.cli import build_parser\n"
        f"argv = {argv!r}\n"
        "try:\n"
        "    build_parser(argv).parse_args(argv)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], name: str) -> bool:
    return any(module == name or module.startswith(name + ".") for module in modules)


def choice_helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """Each sub-command's line in ``--help``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help for choice in action._choices_actions}
    raise AssertionError("no sub-commands")


def test_parsing_generate_help_loads_no_client_grader_or_tool() -> None:
    modules = modules_after(["generate", "--help"])
    assert "kyai.evaluation.cli" in modules  # the command's own parser did load
    assert [name for name in HEAVY if loaded(modules, name)] == []


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_no_command(argv: list[str]) -> None:
    modules = modules_after(argv)
    commands = {command.module for command in COMMANDS.values()}
    assert sorted(commands & modules) == []
    assert [name for name in HEAVY if name != "kyai_devcluster" and loaded(modules, name)] == []
    # --help lists the devcluster plugin: its parser module only, never the server.
    listed = {"kyai_devcluster", "kyai_devcluster.cli", "kyai_devcluster._images"}
    tool = {m for m in modules if loaded({m}, "kyai_devcluster")}
    assert tool == (listed if argv == ["--help"] else set())


def test_each_table_line_is_what_its_module_registers() -> None:
    for name, command in COMMANDS.items():
        helps = choice_helps(build_parser([name]))
        assert helps[name] == command.help, name


def test_help_lists_every_command_and_the_devcluster_plugin_last() -> None:
    helps = choice_helps(build_parser(["--help"]))
    assert list(helps)[: len(COMMANDS)] == list(COMMANDS)
    assert list(helps)[len(COMMANDS) :] == ["devcluster"]


def test_version_reads_no_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: Any) -> list[Any]:
        raise AssertionError("entry points read for --version")

    monkeypatch.setattr("importlib.metadata.entry_points", refuse)
    parser = build_parser(["--version"])
    assert "devcluster" not in choice_helps(parser)


def test_a_product_command_wins_over_a_plugin_of_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Entry:
        name = "run"
        group = PLUGIN_GROUP

        def load(self) -> Any:
            raise AssertionError("a plugin named like a product command was loaded")

    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [Entry()])
    assert choice_helps(build_parser(["--help"]))["run"] == COMMANDS["run"].help


def test_a_tool_not_installed_is_named_with_its_distribution(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    with pytest.raises(SystemExit) as exited:
        main(["devcluster", "--port", "0"])
    assert exited.value.code == 2
    assert "kyai devcluster: not installed" in capsys.readouterr().err
    assert "kyai-devcluster" in cli.KNOWN_PLUGINS["devcluster"]


def test_an_unknown_command_is_refused_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "'generate'" in err and "'devcluster'" in err


def test_no_command_prints_the_list_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in [*COMMANDS, "devcluster"])
