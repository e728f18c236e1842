"""``python scripts/engine_flags ENGINE [ARGS]``: write an engine's flag table.

``make engine-flags`` runs it for every engine (see the Makefile). The tables go to
``operator/kyai/engines/flags/<engine>/<version>.json`` in the format of ``_table.py``; the
operator checks EngineArgsSets against them and the engine stand-ins parse with them.

``vllm``
    From the ``vllm serve`` parser of the vLLM installed in the running Python
    (``_vllm.py``): run it with the engines venv's Python.
``sglang [--wheel PATH] [--static]``
    From the parser ``ServerArgs.add_cli_args`` fills, of the SGLang wheel ``PATH``
    (``pip download --no-deps sglang==X``) or else of the sglang installed in the running
    Python (``_sglang.py``): run it with the Python of a venv holding what
    ``sglang.srt.server_args`` imports on the CPU. Where that import fails (or with
    ``--static``), the options are read from the wheel's ``server_args.py`` with ``ast``.
``trtllm SERVE_PY VERSION SOURCE``
    From the ``@click.option``s of the ``serve`` command in ``SERVE_PY``, a copy of
    TensorRT-LLM's ``tensorrt_llm/commands/serve.py``, read with ``ast`` (``_trtllm.py``;
    the module needs CUDA to import). ``VERSION`` names the table, ``SOURCE`` (the
    repository, path and commit the copy came from) goes into it. Any Python runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _table import write_table


def main(argv: list[str]) -> int:
    """Extract one engine's table."""
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    engine, rest = argv[0], argv[1:]
    if engine == "vllm":
        import _vllm

        version, source, entries = _vllm.options()
        write_table("vllm", version, source, entries)
        return 0
    if engine == "sglang":
        import _sglang

        version, source, entries = _sglang.options(rest)
        write_table("sglang", version, source, entries)
        return 0
    if engine == "trtllm":
        import _trtllm

        if len(rest) != 3:
            print("usage: engine_flags trtllm SERVE_PY VERSION SOURCE", file=sys.stderr)
            return 2
        serve_py, version, source = rest
        entries, notes = _trtllm.options(Path(serve_py))
        if notes:
            source += "; read statically, " + "; ".join(notes)
        write_table("trtllm", version, source, entries)
        return 0
    print(f"unknown engine {engine!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
