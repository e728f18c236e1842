"""Workloads on several nodes: the parallel-size check, the group's command lines, the
LeaderWorkerSet and the leaders' Service, GPU accounting and sweeps' derived Workloads."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.builders.multinode import (
    group_set_name,
    workload_leader_service,
    workload_leader_worker_set,
)
from kyai.builders.workload import workload_service
from kyai.controllers._references import served_by
from kyai.engines import EngineArgsError, ParallelismError, engine_group_commands
from kyai.settings import OperatorSettings
from kyai.sweeps import derived_workload
from kyai.sweeps._cells import Variant

OWNER = {
    "apiVersion": "kyai.io/v1alpha1",
    "kind": "Workload",
    "metadata": {
        "name": "big",
        "namespace": "team-a",
        "uid": "u-1",
        "labels": {"kueue.x-k8s.io/queue-name": "gpus", "kueue.x-k8s.io/priority-class": "hi"},
    },
}


def workload(framework: str = "vllm", **spec: Any) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"framework": framework, "model": "org/m", "nodes": 2,
                                        **spec})  # fmt: skip


def flags(
    framework: str = "vllm", extra: list[str] | None = None, **args: Any
) -> EngineArgsSetSpec:
    return EngineArgsSetSpec(framework=framework, args=args, extra_args=extra or [])


def test_vllm_on_two_nodes_runs_on_ray_as_lws_example_shows() -> None:
    group = engine_group_commands(workload(), flags(**{"pipeline-parallel-size": 2}))
    assert group.leader.command == ["sh", "-c"]
    (script,) = group.leader.args
    assert script == (
        "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh leader "
        "--ray_cluster_size=$(LWS_GROUP_SIZE); exec vllm serve org/m --host 0.0.0.0 --port 8000 "
        "--served-model-name org/m --pipeline-parallel-size 2"
    )
    assert group.worker.argv == [
        "sh", "-c",
        "bash /vllm-workspace/examples/online_serving/multi-node-serving.sh worker "
        "--ray_address=$(LWS_LEADER_ADDRESS)",
    ]  # fmt: skip


def test_sglang_on_two_nodes_gives_every_pod_its_rank() -> None:
    group = engine_group_commands(workload("sglang"), flags("sglang", tp=2))
    tail = ["--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--nnodes", "$(LWS_GROUP_SIZE)",
            "--node-rank", "$(LWS_WORKER_INDEX)"]  # fmt: skip
    assert group.leader.argv[:3] == ["python3", "-m", "sglang.launch_server"]
    # `tp` is an unambiguous prefix of SGLang's --tp-size: rendered in full.
    assert group.leader.args[-6:] == tail and "--tp-size" in group.leader.args
    assert group.worker == group.leader


@pytest.mark.parametrize(
    ("framework", "nodes", "gpus", "engine_args", "named"),
    [
        (
            "vllm",
            2,
            1,
            {"tensor-parallel-size": 4},
            "--tensor-parallel-size 4 × --pipeline-parallel-size 1 = 4",
        ),
        ("vllm", 2, 1, {}, "--tensor-parallel-size 1 × --pipeline-parallel-size 1 = 1"),
        ("vllm", 2, 4, {"tp": 4}, "tp 4 × --pipeline-parallel-size 1 = 4"),
        ("sglang", 2, 1, {"tp-size": 1}, "--tp-size 1 × --pp-size 1 = 1"),
        ("sglang", 3, 2, {"tp": 2, "pp-size": 2}, "tp 2 × --pp-size 2 = 4"),
    ],
)
def test_parallel_sizes_must_use_every_gpu_of_the_group(
    framework: str, nodes: int, gpus: int, engine_args: dict[str, Any], named: str
) -> None:
    spec = workload(framework, nodes=nodes, resources={"gpus": gpus})
    with pytest.raises(ParallelismError) as caught:
        engine_group_commands(spec, flags(framework, **engine_args))
    message = str(caught.value)
    assert named in message, message
    assert f"spec.nodes {nodes} × spec.resources.gpus {gpus} = {nodes * gpus}" in message


@pytest.mark.parametrize(
    ("framework", "nodes", "gpus", "engine_args", "extra"),
    [
        ("vllm", 2, 1, {"tensor-parallel-size": 1, "pipeline-parallel-size": 2}, []),
        ("vllm", 2, 4, {}, ["--tensor-parallel-size", "4", "--pipeline-parallel-size=2"]),
        ("vllm", 2, 8, {"tensor_parallel_size": 8, "pp": 2}, []),
        ("sglang", 2, 1, {"tp": 2}, []),
        ("sglang", 2, 4, {"tensor-parallel-size": 4, "pp-size": 2}, []),
    ],
)
def test_parallel_sizes_that_use_the_group_pass(
    framework: str, nodes: int, gpus: int, engine_args: dict[str, Any], extra: list[str]
) -> None:
    spec = workload(framework, nodes=nodes, resources={"gpus": gpus})
    engine_group_commands(spec, flags(framework, extra, **engine_args))


@pytest.mark.parametrize(
    ("framework", "nodes", "gpus", "engine_args", "extra", "named"),
    [
        # vLLM: TP × PP × DP GPUs (ParallelConfig.world_size_across_dp).
        ("vllm", 2, 1, {"pipeline-parallel-size": 2, "data-parallel-size": 2}, [],
         "needs --tensor-parallel-size × --pipeline-parallel-size × --data-parallel-size = 2, "
         "but the EngineArgsSet gives --tensor-parallel-size 1 × --pipeline-parallel-size 2 × "
         "--data-parallel-size 2 = 4"),
        ("vllm", 2, 1, {"tp": 2}, ["-dp", "2"], "--tp 2 × --pipeline-parallel-size 1 × -dp 2 = 4"),
        # SGLang without DP attention: each DP rank has its own tp × pp GPUs.
        ("sglang", 2, 1, {"tp": 2, "dp-size": 2}, [], "--tp 2 × --pp-size 1 × --dp-size 2 = 4"),
        # With DP attention the ranks split tp: 2 GPUs used of 4.
        ("sglang", 2, 2, {"tp": 2, "dp": 2, "enable-dp-attention": True}, [],
         "--tp 2 × --pp-size 1 = 2 (--dp 2 with --enable-dp-attention splits --tp, adding no "
         "GPU)"),
    ],
)  # fmt: skip
def test_data_parallel_sizes_count_as_the_engine_counts_them(
    framework: str, nodes: int, gpus: int, engine_args: dict[str, Any], extra: list[str],
    named: str,
) -> None:  # fmt: skip
    spec = workload(framework, nodes=nodes, resources={"gpus": gpus})
    with pytest.raises(ParallelismError) as caught:
        engine_group_commands(spec, flags(framework, extra, **engine_args))
    message = str(caught.value)
    assert named in message, message
    assert f"spec.nodes {nodes} × spec.resources.gpus {gpus} = {nodes * gpus}" in message


@pytest.mark.parametrize(
    ("framework", "nodes", "gpus", "engine_args", "extra"),
    [
        ("vllm", 2, 2, {"tp": 2, "dp": 2}, []),
        ("vllm", 2, 1, {}, ["--data-parallel-size=2"]),
        ("sglang", 2, 1, {"tp": 1, "dp-size": 2}, []),
        ("sglang", 2, 2, {"tp": 4, "dp-size": 4, "enable-dp-attention": True}, []),
        ("sglang", 2, 1, {"tp": 2}, ["--enable-dp-attention", "--dp", "2"]),
        ("sglang", 2, 2, {"tp": 2, "data-parallel-size": 2, "enable-dp-attention": False}, []),
    ],
)
def test_data_parallel_sizes_that_use_the_group_pass(
    framework: str, nodes: int, gpus: int, engine_args: dict[str, Any], extra: list[str]
) -> None:
    spec = workload(framework, nodes=nodes, resources={"gpus": gpus})
    engine_group_commands(spec, flags(framework, extra, **engine_args))


def test_sglang_dp_attention_needs_a_data_parallel_size_dividing_tp() -> None:
    spec = workload("sglang", nodes=2, resources={"gpus": 2})
    eas = flags("sglang", **{"tp": 4, "dp-size": 3, "enable-dp-attention": True})
    with pytest.raises(ParallelismError) as caught:
        engine_group_commands(spec, eas)
    assert str(caught.value) == (
        "sglang with --enable-dp-attention splits --tp among the data-parallel ranks, so "
        "--dp-size must divide it, but the EngineArgsSet gives --tp 4 and --dp-size 3: set "
        "--dp-size to a divisor of --tp"
    )
    with pytest.raises(ParallelismError, match=r"sets dp-size to '0'"):
        engine_group_commands(spec, flags("sglang", tp=4, **{"dp-size": 0}))


def test_flags_the_operator_sets_on_several_nodes_are_refused() -> None:
    with pytest.raises(EngineArgsError, match=r"nnodes.*spec\.nodes 2"):
        engine_group_commands(workload("sglang"), flags("sglang", tp=2, nnodes=4))
    with pytest.raises(EngineArgsError, match="node-rank"):
        engine_group_commands(workload("sglang"), flags("sglang", ["--node-rank=1"], tp=2))


def test_trtllm_and_endpoints_on_several_nodes_are_refused_naming_spec_nodes() -> None:
    with pytest.raises(ValidationError, match=r"spec.nodes is 2.*TensorRT-LLM on one node"):
        workload("trtllm")
    with pytest.raises(ValidationError, match=r"spec.nodes is 3 but spec.endpoint"):
        WorkloadSpec.model_validate(
            {"framework": "vllm", "model": "m", "nodes": 3, "endpoint": {"url": "http://x/v1"}}
        )
    assert WorkloadSpec(framework="trtllm", model="m").nodes == 1


def test_the_leader_worker_set_groups_nodes_and_carries_the_queue_labels() -> None:
    spec = workload(replicas=2, resources={"gpus": 1, "memory": "64Gi"})
    eas = flags(**{"pipeline-parallel-size": 2})
    lws = workload_leader_worker_set("big", "team-a", spec, eas, OperatorSettings(), OWNER)
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert lws["metadata"]["name"] == "big-lws"
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    group = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 2
    assert (group["size"], group["restartPolicy"]) == (2, "RecreateGroupOnPodRestart")
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxUnavailable": 1, "maxSurge": 0,
    }  # fmt: skip
    queue = {"kueue.x-k8s.io/queue-name": "gpus", "kueue.x-k8s.io/priority-class": "hi"}
    for labels in (
        lws["metadata"]["labels"],
        group["leaderTemplate"]["metadata"]["labels"],
        group["workerTemplate"]["metadata"]["labels"],
    ):
        assert queue.items() <= labels.items(), labels
    leader = group["leaderTemplate"]["spec"]["containers"][0]
    worker = group["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][0].startswith("bash ") and "leader" in leader["args"][0]
    assert "worker --ray_address=$(LWS_LEADER_ADDRESS)" in worker["args"][0]
    # Probes on the leader only; GPUs, memory and /dev/shm on every pod.
    assert {"startupProbe", "readinessProbe", "livenessProbe"} <= leader.keys()
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & worker.keys()
    for container, pod in ((leader, group["leaderTemplate"]), (worker, group["workerTemplate"])):
        assert container["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "64Gi"}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert pod["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory"


def test_a_changed_node_count_or_flag_changes_the_spec_hash() -> None:
    def hashed(spec: WorkloadSpec, eas: EngineArgsSetSpec) -> str:
        lws = workload_leader_worker_set("big", "team-a", spec, eas, OperatorSettings(), OWNER)
        return str(lws["metadata"]["annotations"]["kyai.io/spec-hash"])

    base = hashed(workload(), flags(tp=2))
    assert base == hashed(workload(), flags(tp=2))
    assert base != hashed(workload(nodes=4, resources={"gpus": 1}), flags(tp=4))
    assert base != hashed(workload(), flags(tp=2, **{"max-model-len": 4096}))


def test_the_service_keeps_its_name_and_selects_the_leaders_only() -> None:
    spec = workload()
    service = workload_leader_service("big", "team-a", spec, OWNER)
    single = workload_service("big", "team-a", WorkloadSpec(framework="vllm", model="org/m"))
    assert service["metadata"]["name"] == single["metadata"]["name"] == "big-engine"
    assert service["spec"]["selector"] == {
        **single["spec"]["selector"], "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }  # fmt: skip


def test_the_set_name_stays_short_for_its_pods_and_headless_service() -> None:
    long = group_set_name("a" * 60)
    assert len(long) <= 39 and long.endswith("-lws")
    assert group_set_name("a" * 60) != group_set_name("a" * 59 + "b")
    assert group_set_name("qwen") == "qwen-lws"
    dotted = group_set_name("qwen.big")  # an RFC 1035 label, distinct from qwen-big's
    assert dotted.startswith("qwen-big-") and dotted != group_set_name("qwen-big")


def test_gpus_count_every_node_of_every_group() -> None:
    body = {
        **OWNER,
        "spec": {"framework": "vllm", "model": "m", "nodes": 2, "replicas": 3,
                 "resources": {"gpus": 4}},
        "status": {"phase": "Ready", "endpoint": "http://big-engine.team-a.svc:8000/v1"},
    }  # fmt: skip
    assert served_by(body).gpus == 24


def test_a_sweep_derives_multi_node_workloads_the_same_way() -> None:
    sweep = {"apiVersion": "kyai.io/v1alpha1", "kind": "EvaluationSweep",
             "metadata": {"name": "pick", "namespace": "team-a", "uid": "u-s"}}  # fmt: skip
    base = {**OWNER, "spec": {"framework": "vllm", "model": "m", "nodes": 2}}
    variant = Variant(workload="big", engine_args_set="pp2", name="big-pp2-x", hash="h")
    derived = derived_workload(sweep, variant, base)
    assert derived["spec"]["nodes"] == 2
    assert derived["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpus"
