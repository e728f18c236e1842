"""TensorRT-LLM: ``trtllm-serve <model> --host 0.0.0.0 --port 8000 ...``.

Checked against:

- NVIDIA/TensorRT-LLM ``docs/source/commands/trtllm-serve/trtllm-serve.rst``
  (https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html): the
  model is the positional argument, ``--host`` defaults to ``localhost`` (so ``0.0.0.0`` is
  required in a pod) and ``--port`` to 8000; the server answers ``/health``, ``/v1/models``,
  ``/metrics``, ``/version``. Its ``/metrics`` is a JSON list of the executor's iteration
  statistics, not Prometheus histograms: a run of a TensorRT-LLM Workload has no engine-side
  serving figures (``metrics_path`` None).
- NVIDIA/TensorRT-LLM ``tensorrt_llm/commands/serve.py``: the options are underscored
  (``--tp_size`` / ``--tensor_parallel_size``, ``--max_seq_len``, ``--max_batch_size``,
  ``--kv_cache_free_gpu_memory_fraction``, ``--reasoning_parser``, ``--extra_llm_api_options``),
  so users write them that way and the operator keeps their spelling.
- NVIDIA/TensorRT-LLM ``tensorrt_llm/serve/openai_server.py``: ``OpenAIServer`` names the
  model after the ``model`` argument, or after the directory's base name when the argument is
  a local directory; ``GET /health`` answers 200 when the executor is healthy.
- NVIDIA/TensorRT-LLM pull request 11711 (merged 2026-02): ``--served-model-name`` was added
  to ``trtllm-serve`` long after 1.0. The default image (release 1.0.0) has no such option,
  so the operator passes none and refuses a ``spec.servedModelName`` that differs from the name
  the server will report.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from kyai.engines._common import Engine, listen_args
from kyai.engines._specs import WorkloadLike


def _served_name(workload: WorkloadLike) -> str:
    # openai_server.py: a local directory is served under its base name, anything else (a
    # HuggingFace id) under the argument itself. An absolute path is taken to be a directory.
    if workload.model.startswith("/"):
        return PurePosixPath(workload.model).name or workload.model
    return workload.model


def _model_args(workload: WorkloadLike) -> list[str]:
    return [workload.model, *listen_args()]


ENGINE = Engine(
    framework="trtllm",
    executable=("trtllm-serve",),
    default_image="nvcr.io/nvidia/tensorrt-llm/release:1.2.1",
    owned_flags=frozenset({"host", "port", "model", "served-model-name"}),
    model_args=_model_args,
    health_path="/health",
    served_model_name_flag=None,
    reasoning_parser_flag="--reasoning_parser",
    context_length_flag="--max_seq_len",
    tensor_parallel_flag="--tp_size",
    references=(
        "https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/trtllm-serve.html",
        "NVIDIA/TensorRT-LLM docs/source/commands/trtllm-serve/trtllm-serve.rst",
        "NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py",
        "NVIDIA/TensorRT-LLM tensorrt_llm/serve/openai_server.py",
        "https://github.com/NVIDIA/TensorRT-LLM/pull/11711",
    ),
    served_name_of=_served_name,
)
