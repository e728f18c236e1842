"""SGLang: ``python3 -m sglang.launch_server --model-path <model> --host 0.0.0.0 --port 8000 ...``.

Checked against:

- sgl-project/sglang ``docs/backend/server_arguments.md`` (https://docs.sglang.ai/backend/
  server_arguments.html): the server listens on ``host="127.0.0.1"`` and ``port=30000`` by
  default, so ``--host 0.0.0.0 --port 8000`` are required in a pod; for Kubernetes the
  ``/dev/shm`` size must be raised (a memory-backed ``emptyDir``).
- sgl-project/sglang ``python/sglang/srt/server_args.py``: ``--model-path`` (alias
  ``--model``), ``--served-model-name``, ``--context-length``, ``--tp-size`` (alias
  ``--tensor-parallel-size``), ``--reasoning-parser``. Flags are dashed; the dataclass fields
  behind them are underscored.
- sgl-project/sglang ``docs/basic_usage/native_api.ipynb``
  (https://docs.sglang.ai/basic_usage/native_api.html): ``GET /health`` (and
  ``/health_generate``, which runs a generation) on the same port as the OpenAI API.
- https://docs.sglang.io/docs/advanced_features/separate_reasoning: ``--reasoning-parser``
  (e.g. ``deepseek-r1``, ``qwen3``) fills ``reasoning_content``.
- https://docs.sglang.ai/references/production_metrics.html and
  ``python/sglang/srt/metrics/collector.py``: with ``--enable-metrics`` the server serves
  Prometheus metrics on ``/metrics`` (its API port; the API key middleware lets it through),
  among them ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds``
  and ``sglang:e2e_request_latency_seconds``; without the flag there is no such route.
- On several nodes (``spec.nodes`` > 1), kubernetes-sigs/lws ``docs/examples/sglang/lws.yaml``
  and https://docs.sglang.ai/references/multi_node_deployment/multi_node.html: every pod runs
  the server with ``--dist-init-addr $(LWS_LEADER_ADDRESS):20000 --nnodes $(LWS_GROUP_SIZE)
  --node-rank $(LWS_WORKER_INDEX)``; rank 0 (the leader) serves HTTP, the other ranks join
  it. ``--tp-size`` (× ``--pp-size``) is the whole group's GPUs.
"""

from __future__ import annotations

from kyai.engines._common import Engine, EngineCommand, MultiNode, listen_args
from kyai.engines._specs import WorkloadLike


def _model_args(workload: WorkloadLike) -> list[str]:
    return [
        "--model-path",
        workload.model,
        *listen_args(),
        "--served-model-name",
        workload.served_name,
    ]


#: The port of rank 0's rendezvous (``--dist-init-addr``), as in LWS's example.
DIST_INIT_PORT = 20000


def _group_member(single: EngineCommand) -> EngineCommand:
    return EngineCommand(
        command=list(single.command),
        args=[
            *single.args,
            "--dist-init-addr",
            f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}",
            "--nnodes",
            "$(LWS_GROUP_SIZE)",
            "--node-rank",
            "$(LWS_WORKER_INDEX)",
        ],
    )


MULTI_NODE = MultiNode(
    parallel_flags=(
        ("tp-size", "tp", "tensor-parallel-size"),
        ("pp-size", "pp", "pipeline-parallel-size"),
    ),
    owned_flags=frozenset({"nnodes", "node-rank", "dist-init-addr", "nccl-init-addr"}),
    leader=_group_member,
    worker=_group_member,
)

ENGINE = Engine(
    framework="sglang",
    executable=("python3", "-m", "sglang.launch_server"),
    default_image="lmsysorg/sglang:v0.5.23-cu129",
    owned_flags=frozenset({"host", "port", "model-path", "model", "served-model-name"}),
    model_args=_model_args,
    health_path="/health",
    served_model_name_flag="--served-model-name",
    reasoning_parser_flag="--reasoning-parser",
    context_length_flag="--context-length",
    tensor_parallel_flag="--tp-size",
    metrics_path="/metrics",
    metrics_flag="--enable-metrics",
    multinode=MULTI_NODE,
    # An argparse parser with allow_abbrev (the default): `--tp` means `--tp-size`.
    abbreviations=True,
    references=(
        "https://docs.sglang.ai/backend/server_arguments.html",
        "sgl-project/sglang docs/backend/server_arguments.md",
        "sgl-project/sglang python/sglang/srt/server_args.py",
        "sgl-project/sglang docs/basic_usage/native_api.ipynb",
        "https://docs.sglang.io/docs/advanced_features/separate_reasoning",
        "https://docs.sglang.ai/references/production_metrics.html",
        "https://docs.sglang.ai/references/multi_node_deployment/multi_node.html",
        "kubernetes-sigs/lws docs/examples/sglang/lws.yaml",
    ),
)
