"""Multi-node parallel sizes: SGLang's ``--enable-dp-attention`` and extraArgs ending in a flag.

Issue 45, items 9 and 10: with ``--enable-dp-attention`` the data-parallel ranks split the
tensor-parallel GPUs, so a dp size that divides tp is accepted (and adds no GPU) and one that
does not is refused; a bare flag at the end of ``extraArgs`` (nothing after it to read as its
value) is checked without a crash.
"""

from __future__ import annotations

from typing import Any

import pytest

from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.engines import ParallelismError, engine_group_commands


def workload(framework: str = "sglang", *, nodes: int = 2, gpus: int = 2) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {"framework": framework, "model": "org/m", "nodes": nodes, "resources": {"gpus": gpus}}
    )


def flags(
    framework: str = "sglang", extra: list[str] | None = None, **args: Any
) -> EngineArgsSetSpec:
    return EngineArgsSetSpec(framework=framework, args=args, extra_args=extra or [])


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        ({"tp": 4, "dp-size": 2, "enable-dp-attention": True}, []),
        ({"tp": 4}, ["--dp-size", "2", "--enable-dp-attention"]),
        ({}, ["--tp-size=4", "--enable-dp-attention", "--dp=2"]),
    ],
    ids=["args", "extra-args", "equals-forms"],
)
def test_dp_attention_with_a_dp_size_dividing_tp_is_accepted_and_adds_no_gpu(
    args: dict[str, Any], extra: list[str]
) -> None:
    # tp 4 on 2 nodes × 2 GPUs; dp 2 splits tp 4 (attention tp 2 per rank): 4 GPUs, not 8.
    group = engine_group_commands(workload(), flags(extra=extra, **args))
    assert "--enable-dp-attention" in group.leader.args


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        ({"tp": 4, "dp-size": 3, "enable-dp-attention": True}, []),
        ({"tp": 4}, ["--dp-size", "3", "--enable-dp-attention"]),
        ({"tp": 2, "dp-size": 4, "enable-dp-attention": True}, []),
    ],
    ids=["3-of-4", "3-of-4-extra-args", "4-of-2"],
)
def test_dp_attention_with_a_dp_size_not_dividing_tp_is_refused_naming_both(
    args: dict[str, Any], extra: list[str]
) -> None:
    spec = workload(gpus=2 if args.get("tp", 4) == 4 else 1)
    with pytest.raises(ParallelismError, match=r"must divide it") as caught:
        engine_group_commands(spec, flags(extra=extra, **args))
    tp = args.get("tp", 4)
    dp = args.get("dp-size") or int(extra[1])
    assert f"gives --tp {tp} and --dp-size {dp}" in str(caught.value)


def test_without_dp_attention_the_dp_size_multiplies_instead() -> None:
    # The same tp 4 × dp 2 without the flag needs 8 GPUs: on 4 it is refused, on 8 accepted.
    with pytest.raises(ParallelismError, match=r"--tp 4 × --pp-size 1 × --dp-size 2 = 8"):
        engine_group_commands(
            workload(), EngineArgsSetSpec(framework="sglang", args={"tp": 4, "dp-size": 2})
        )
    engine_group_commands(
        workload(gpus=4), EngineArgsSetSpec(framework="sglang", args={"tp": 4, "dp-size": 2})
    )


@pytest.mark.parametrize(
    ("framework", "gpus", "args", "extra"),
    [
        # The flag is last: no argument after it to be taken as its value.
        ("sglang", 2, {"tp": 4, "dp-size": 2}, ["--enable-dp-attention"]),
        ("sglang", 2, {"tp": 4}, ["--dp-size", "2", "--enable-dp-attention"]),
        ("sglang", 1, {"tp": 2}, ["--trust-remote-code"]),
        ("vllm", 1, {"tensor-parallel-size": 2}, ["--enforce-eager"]),
    ],
    ids=["dp-attention-alone", "dp-attention-after-dp", "sglang-other", "vllm-other"],
)
def test_extra_args_ending_in_a_bare_flag_are_checked_without_a_crash(
    framework: str, gpus: int, args: dict[str, Any], extra: list[str]
) -> None:
    group = engine_group_commands(
        workload(framework, gpus=gpus), flags(framework, extra=extra, **args)
    )
    assert extra[-1] in " ".join(group.leader.argv)  # passed on to the engine


def test_a_size_flag_left_without_its_value_at_the_end_is_refused_not_a_crash() -> None:
    with pytest.raises(ParallelismError, match=r"sets --dp-size to ''"):
        engine_group_commands(
            workload(), flags(extra=["--tp-size", "4", "--enable-dp-attention", "--dp-size"])
        )
