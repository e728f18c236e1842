"""scripts/engine_flags: what an engine's parser declares becomes a table entry.

The extractors run inside the engines' own venvs (``make engine-flags``); here they read small
parsers of the same kinds: argparse's actions (vLLM, SGLang) and click's options read from
source (TensorRT-LLM).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "engine_flags"
sys.path.insert(0, str(SCRIPTS))

import _argparse  # noqa: E402
import _trtllm  # noqa: E402


class EnableDisable(argparse.BooleanOptionalAction):
    """vLLM 0.34's EnableDisableAction: --enable-x / --disable-x, --no-enable-x hidden."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        inverse = [o.replace("--enable-", "--disable-") for o in option_strings]
        self.negative_option_strings = {*self.option_strings[1:], *inverse}
        self.option_strings = [*option_strings, *inverse]


def entries(*arguments: tuple[tuple[str, ...], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser()
    for names, kwargs in arguments:
        parser.add_argument(*names, **kwargs)
    return {item["option"]: item for item in _argparse.parser_entries(parser)}


def test_argparse_actions_become_their_kinds() -> None:
    found = entries(
        (("--enable-prefix-caching",), {"action": argparse.BooleanOptionalAction}),
        (("--enable-chunked-prefill",), {"action": EnableDisable, "default": None}),
        (("--headless",), {"action": "store_true"}),
        (("--keep",), {"action": "store_false"}),
        (("--dtype",), {"choices": ["auto", "half"], "default": "auto"}),
        (("--tensor-parallel-size", "-tp"), {"type": int, "default": 1}),
        (("--served-model-name",), {"nargs": "+"}),
        (("--middleware",), {"action": "append", "default": []}),
        (("--hf-overrides",), {"type": json.loads, "default": {}}),
    )
    assert found["--enable-prefix-caching"] == {
        "option": "--enable-prefix-caching", "aliases": [], "kind": "boolean",
        "negative": "--no-enable-prefix-caching", "set": True, "default": None,
    }  # fmt: skip
    chunked = found["--enable-chunked-prefill"]
    assert chunked["negative"] == "--disable-chunked-prefill"
    assert chunked["negative_aliases"] == ["--no-enable-chunked-prefill"]
    assert chunked["aliases"] == []
    assert found["--headless"]["kind"] == "boolean" and found["--headless"]["negative"] is None
    assert (found["--keep"]["set"], found["--keep"]["default"]) == (False, True)
    assert found["--dtype"] == {
        "option": "--dtype", "aliases": [], "kind": "choice", "default": "auto", "type": "str",
        "choices": ["auto", "half"],
    }  # fmt: skip
    assert found["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert found["--tensor-parallel-size"]["type"] == "int"
    assert found["--served-model-name"]["kind"] == "list"
    assert found["--middleware"]["kind"] == "append"
    assert found["--hf-overrides"]["type"] == "json"


def test_an_action_that_refuses_itself_is_deprecated_with_its_words() -> None:
    class Refuse(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
            super().__init__(option_strings, dest, nargs=0, **kwargs)

    parser = argparse.ArgumentParser()
    parser.add_argument("--enable-ep-moe", action=Refuse, help="use --ep-size instead")
    (item,) = _argparse.parser_entries(parser, refusing=frozenset({"Refuse"}))
    assert (item["kind"], item["message"]) == ("deprecated", "use --ep-size instead")
    (kept,) = _argparse.parser_entries(parser)  # an action that only warns is what it stores
    assert kept["kind"] == "boolean"


SERVE_PY = """
import click

DEFAULT_PORT = 8000

@click.command("serve")
@click.argument("model", type=str)
@click.option("--port", type=int, default=DEFAULT_PORT)
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--backend", type=click.Choice(["pytorch", "tensorrt"]), default="pytorch")
@click.option("--trust_remote_code", is_flag=True, default=False)
@click.option("--stream/--no-stream", default=True)
@click.option("--custom_module_dirs", multiple=True)
@click.option("--log_level", type=click.Choice(severity_map.keys()), default="info")
def serve(**kwargs):
    pass
"""


def test_click_options_are_read_from_source(tmp_path: Path) -> None:
    path = tmp_path / "serve.py"
    path.write_text(SERVE_PY, encoding="utf-8")
    found, notes = _trtllm.options(path)
    by_option = {item["option"]: item for item in found}
    assert list(by_option) == [
        "--port", "--tensor_parallel_size", "--backend", "--trust_remote_code", "--stream",
        "--custom_module_dirs", "--log_level",
    ]  # fmt: skip
    assert by_option["--port"]["default"] == 8000 and by_option["--port"]["type"] == "int"
    assert by_option["--tensor_parallel_size"]["aliases"] == ["--tp_size"]
    assert by_option["--backend"]["choices"] == ["pytorch", "tensorrt"]
    assert by_option["--trust_remote_code"]["negative"] is None
    assert by_option["--stream"]["negative"] == "--no-stream"
    assert by_option["--custom_module_dirs"]["kind"] == "append"
    assert by_option["--log_level"]["kind"] == "value"
    assert any("--log_level" in note for note in notes)


@pytest.mark.parametrize("name", ["_argparse", "_trtllm", "_static", "_table", "_vllm", "_sglang"])
def test_the_extractors_import_nothing_of_the_product(name: str) -> None:
    # They run inside the engines' venvs, where kyai is not installed.
    source = (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")
    assert "import kyai" not in source and "from kyai" not in source
