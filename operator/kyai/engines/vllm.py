"""vLLM: ``vllm serve <model> --host 0.0.0.0 --port 8000 --served-model-name <name> ...``.

Checked against:

- vllm-project/vllm ``docs/cli/README.md`` and ``docs/cli/serve.md`` (https://docs.vllm.ai/en/
  latest/cli/serve.html): ``vllm serve`` takes the model as its first positional argument;
  ``--host``, ``--port`` (default 8000) and ``--served-model-name``. Its argument parser
  (``FlexibleArgumentParser``) accepts ``--max_model_len`` as well as ``--max-model-len``,
  so users' spellings are kept as written.
- vllm-project/vllm ``vllm/entrypoints/serve/instrumentator/health.py``: ``GET /health``
  answers 200 once the engine is up and 503 when it is dead.
- https://docs.vllm.ai/en/stable/features/reasoning_outputs/: ``--reasoning-parser``
  (e.g. ``deepseek_r1``, ``qwen3``) fills the ``reasoning`` / ``reasoning_content`` field.
- https://docs.vllm.ai/en/stable/deployment/k8s.html: the engine pod mounts a memory-backed
  ``emptyDir`` at ``/dev/shm`` (PyTorch's tensor-parallel workers share memory there).
- https://docs.vllm.ai/en/stable/configuration/env_vars/: every ``VLLM_*`` variable is a vLLM
  setting, and Kubernetes injects ``<SERVICE>_PORT=tcp://...`` variables for each Service of
  the namespace (a Service named ``vllm`` sets ``VLLM_PORT``, vLLM's internal port): engine
  pods therefore run with ``enableServiceLinks: false``.
- https://docs.vllm.ai/en/stable/usage/metrics.html and ``vllm/v1/metrics/loggers.py``: the
  OpenAI server always serves Prometheus metrics on ``/metrics`` (its API port, no API key),
  among them the ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``
  and ``vllm:e2e_request_latency_seconds`` histograms a run reads around its generation.

The ``vllm/vllm-openai`` image's entrypoint is replaced by the ``command`` below.

On several nodes (``spec.nodes`` > 1), as kubernetes-sigs/lws ``docs/examples/vllm/GPU/
lws.yaml`` and https://docs.vllm.ai/en/stable/serving/parallelism_scaling.html show: vLLM on
Ray, with the image's ``examples/online_serving/multi-node-serving.sh``. The leader starts the
Ray head and waits until ``$(LWS_GROUP_SIZE)`` nodes have joined, then runs ``vllm serve``
(which uses the Ray cluster when tensor-parallel-size × pipeline-parallel-size exceeds the
node's GPUs); each worker joins the head at ``$(LWS_LEADER_ADDRESS)`` and blocks.
"""

from __future__ import annotations

import shlex

from kyai.engines._common import Engine, EngineCommand, MultiNode, listen_args
from kyai.engines._flags import NegativeForm
from kyai.engines._specs import WorkloadLike


def _model_args(workload: WorkloadLike) -> list[str]:
    return [workload.model, *listen_args(), "--served-model-name", workload.served_name]


#: vLLM's multi-node launcher as the vllm/vllm-openai image ships it.
MULTI_NODE_SCRIPT = "/vllm-workspace/examples/online_serving/multi-node-serving.sh"


def _leader(single: EngineCommand) -> EngineCommand:
    script = (
        f"bash {MULTI_NODE_SCRIPT} leader --ray_cluster_size=$(LWS_GROUP_SIZE); "
        f"exec {shlex.join(single.argv)}"
    )
    return EngineCommand(command=["sh", "-c"], args=[script])


def _worker(_: EngineCommand) -> EngineCommand:
    script = f"bash {MULTI_NODE_SCRIPT} worker --ray_address=$(LWS_LEADER_ADDRESS)"
    return EngineCommand(command=["sh", "-c"], args=[script])


MULTI_NODE = MultiNode(
    parallel_flags=(("tensor-parallel-size", "tp"), ("pipeline-parallel-size", "pp")),
    # vLLM's own multi-node launch (not Ray): the operator launches on Ray.
    owned_flags=frozenset({"nnodes", "node-rank", "master-addr", "master-port", "headless"}),
    leader=_leader,
    worker=_worker,
)

ENGINE = Engine(
    framework="vllm",
    executable=("vllm", "serve"),
    default_image="vllm/vllm-openai:v0.34.0",
    owned_flags=frozenset({"host", "port", "model", "served-model-name"}),
    model_args=_model_args,
    health_path="/health",
    served_model_name_flag="--served-model-name",
    reasoning_parser_flag="--reasoning-parser",
    context_length_flag="--max-model-len",
    tensor_parallel_flag="--tensor-parallel-size",
    metrics_path="/metrics",
    multinode=MULTI_NODE,
    # Every switch of vllm serve is argparse.BooleanOptionalAction (--X / --no-X): the
    # flag tables record the exceptions (store_true switches such as --headless).
    negative_form=NegativeForm("--no-{name}"),
    # An argparse parser with allow_abbrev (the default): `--tp` means `--tp-size`.
    abbreviations=True,
    references=(
        "https://docs.vllm.ai/en/latest/cli/serve.html",
        "vllm-project/vllm docs/cli/README.md",
        "vllm-project/vllm vllm/entrypoints/serve/instrumentator/health.py",
        "https://docs.vllm.ai/en/stable/features/reasoning_outputs/",
        "https://docs.vllm.ai/en/stable/configuration/env_vars/",
        "https://docs.vllm.ai/en/stable/usage/metrics.html",
        "https://docs.vllm.ai/en/stable/serving/parallelism_scaling.html",
        "kubernetes-sigs/lws docs/examples/vllm/GPU/lws.yaml",
    ),
)
