"""The operator's vLLM command lines, read by the real ``vllm serve`` parser (vLLM 0.32).

Each case is a Workload and an EngineArgsSet built with the product's public API
(``kyai.api`` models, ``kyai.engines.engine_command`` / ``engine_group_commands``); its
command line goes through the parser ``vllm serve`` itself builds, then the validation the
CLI runs before serving (``serve_parser.py``, in the engines venv). The parsed namespace must
hold every value declared — a ``false`` too, which vLLM spells ``--no-X``; leaving the flag
out would leave the engine's default (for these flags: unset, which the engine turns on
where it can) — and every flag must be written in the engine's own spelling. Each case's
values differ from the engine's defaults (checked against the command line without an
EngineArgsSet), so that a dropped flag shows.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from engines.real_vllm import IMAGE, TIMINGS, parse_serve_args
from kyai.api import EngineArgsSetSpec, WorkloadSpec
from kyai.engines import engine_command, engine_group_commands

pytestmark = [pytest.mark.engines, pytest.mark.timeout(300)]

MODEL = "/models/tiny-llama"


@dataclass(frozen=True)
class Case:
    """A Workload (``spec`` beside the defaults) and its EngineArgsSet's ``args``."""

    args: Mapping[str, Any]
    workload: Mapping[str, Any] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    #: The namespace's values for the extra args (they are not declared in ``args``).
    extra_expected: Mapping[str, Any] = field(default_factory=dict)
    multinode: bool = False


CASES: dict[str, Case] = {
    "prefix caching off": Case({"enable-prefix-caching": False}),
    "prefix caching on": Case({"enable-prefix-caching": True}),
    "chunked prefill on": Case({"enable-chunked-prefill": True}),
    "chunked prefill off": Case({"enable-chunked-prefill": False}),
    "switches on": Case({"enforce-eager": True, "trust-remote-code": True}),
    "compilation config as a JSON string": Case(
        {"compilation-config": '{"mode": 0, "cudagraph_capture_sizes": [1, 2, 4]}'}
    ),
    "hf overrides as a JSON string": Case({"hf-overrides": '{"rope_theta": 5000.0}'}),
    "speculative config as a JSON string": Case(
        {
            "speculative-config": (
                '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
            )
        }
    ),
    "JSON-valued flags as objects": Case(
        {
            "hf-overrides": {"rope_theta": 5000.0},
            "override-generation-config": {"temperature": 0.5, "top_p": 0.9},
        }
    ),
    "quantization": Case({"quantization": "fp8", "kv-cache-dtype": "fp8"}),
    "tensor and pipeline parallel sizes": Case(
        {"tensor-parallel-size": 2, "pipeline-parallel-size": 2},
        workload={"resources": {"gpus": 4}},
    ),
    "numbers, a choice and underscores": Case(
        {
            "max_model_len": 2048,
            "gpu_memory_utilization": 0.85,
            "max-num-seqs": 64,
            "dtype": "bfloat16",
        }
    ),
    "a list": Case({"ignore-patterns": ["*.pt", "*.bin"]}),
    "extra args": Case(
        {"max-model-len": 4096},
        extra_args=("--max-num-batched-tokens", "8192"),
        extra_expected={"max_num_batched_tokens": 8192},
    ),
    "the multi-node leader": Case(
        {"tensor-parallel-size": 2, "pipeline-parallel-size": 2, "enable-prefix-caching": False},
        workload={"nodes": 2, "resources": {"gpus": 2}},
        multinode=True,
    ),
}


def workload_spec(case: Case) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "framework": "vllm",
            "model": MODEL,
            "servedModelName": "tiny",
            "image": IMAGE,
            **case.workload,
        }
    )


def command_line(case: Case) -> list[str]:
    """The operator's command line for the case (the leader's ``vllm serve`` on several nodes)."""
    workload = workload_spec(case)
    engine_args = EngineArgsSetSpec.model_validate(
        {"framework": "vllm", "args": dict(case.args), "extraArgs": list(case.extra_args)}
    )
    if not case.multinode:
        return engine_command(workload, engine_args).argv
    leader = engine_group_commands(workload, engine_args).leader.argv
    assert leader[:2] == ["sh", "-c"], leader
    # `bash multi-node-serving.sh leader ...; exec vllm serve ...`: the part vLLM parses.
    served = leader[2].rsplit("; exec ", 1)[1]
    return shlex.split(served)


#: Command lines vLLM refuses, and the line saying why (exit status 2, argparse's usage error).
REFUSED = {
    "an unknown flag": (
        ["--tensor-paralel-size", "1"],
        "vllm: error: unrecognized arguments: --tensor-paralel-size 1",
    ),
    "a value outside the choices": (
        ["--dtype", "foo"],
        "vllm serve: error: argument --dtype: invalid choice: 'foo' (choose from 'auto', "
        "'bfloat16', 'float', 'float16', 'float32', 'half')",
    ),
}


@dataclass
class Parsed:
    options: dict[str, list[str]]
    version: str
    baseline: dict[str, Any]
    argvs: dict[str, list[str] | Exception]
    results: dict[str, dict[str, Any]]
    refused: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def parsed(engines_ready: None) -> Parsed:
    """Every case's command line (and the refused ones) through one real parser."""
    argvs: dict[str, list[str] | Exception] = {}
    for name, case in CASES.items():
        try:
            argvs[name] = command_line(case)
        except Exception as exc:  # the product refused the case: that case's test says so
            argvs[name] = exc
    baseline = engine_command(workload_spec(Case({}))).argv
    lines = {name: argv for name, argv in argvs.items() if isinstance(argv, list)}
    refused = {name: ["vllm", "serve", MODEL, *extra] for name, (extra, _) in REFUSED.items()}
    started = time.monotonic()
    facts, results = parse_serve_args([baseline, *lines.values(), *refused.values()])
    TIMINGS["vllm serve's parser read every command line"] = time.monotonic() - started
    return Parsed(
        options=facts["options"],
        version=facts["version"],
        baseline=results[0],
        argvs=argvs,
        results=dict(zip(lines, results[1 : 1 + len(lines)], strict=True)),
        refused=dict(zip(refused, results[1 + len(lines) :], strict=True)),
    )


def dest_of(flag: str, options: Mapping[str, list[str]]) -> str:
    """The parser's destination for a flag as declared (any spelling the parser knows)."""
    canonical = flag.lstrip("-").replace("_", "-")
    spellings = {f"--{canonical}", f"-{canonical}"}
    for dest, strings in options.items():
        if spellings & set(strings):
            return dest
    raise AssertionError(f"vllm serve has no option {flag!r}")


def expected_value(value: Any) -> Any:
    """What the namespace holds for a declared value (a JSON string: the object it holds)."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        return json.loads(value)
    return value


def holds(parsed: Any, declared: Any) -> bool:
    """Whether the parsed value is the declared one (an object: every declared key's value)."""
    if isinstance(declared, Mapping):
        return isinstance(parsed, Mapping) and all(
            key in parsed and holds(parsed[key], item) for key, item in declared.items()
        )
    if isinstance(declared, bool) or isinstance(parsed, bool):
        return parsed is declared
    if isinstance(declared, list | tuple):
        return (
            isinstance(parsed, list)
            and len(parsed) == len(declared)
            and all(holds(a, b) for a, b in zip(parsed, declared, strict=True))
        )
    return bool(parsed == declared)


def result_of(parsed: Parsed, name: str) -> tuple[list[str], dict[str, Any]]:
    """The case's command line and the namespace the real parser made of it."""
    argv = parsed.argvs[name]
    if isinstance(argv, Exception):
        pytest.fail(f"the product refused the case: {type(argv).__name__}: {argv}")
    result = parsed.results[name]
    assert result["status"] == 0, (
        f"vllm serve {parsed.version} refused {shlex.join(argv)} (exit {result['status']}):\n"
        f"{result['stderr']}"
    )
    return argv, result["args"]


@pytest.mark.parametrize("name", list(CASES))
def test_the_real_parser_takes_the_operators_command_line_with_the_values_declared(
    parsed: Parsed, name: str
) -> None:
    case = CASES[name]
    argv, args = result_of(parsed, name)
    defaults = parsed.baseline["args"]
    wrong = {}
    for flag, value in {**case.args}.items():
        dest = dest_of(flag, parsed.options)
        want = expected_value(value)
        assert not holds(defaults.get(dest), want), f"{flag}: {value!r} is the default"
        if not holds(args.get(dest), want):
            wrong[flag] = {"declared": value, "parsed": args.get(dest)}
    for dest, want in case.extra_expected.items():
        if not holds(args.get(dest), want):
            wrong[dest] = {"declared": want, "parsed": args.get(dest)}
    assert not wrong, f"{shlex.join(argv)}\n{json.dumps(wrong)}"
    # The arguments the operator owns, as the Workload says.
    assert args["model"] == MODEL and args["served_model_name"] == ["tiny"]
    assert args["host"] == "0.0.0.0" and args["port"] == 8000


@pytest.mark.parametrize("name", list(CASES))
def test_flags_are_written_in_the_engines_own_spelling(parsed: Parsed, name: str) -> None:
    argv, _ = result_of(parsed, name)
    known = {spelling for strings in parsed.options.values() for spelling in strings}
    foreign = [
        arg.split("=", 1)[0]
        for arg in argv[2:]
        if arg.startswith("--") and arg.split("=", 1)[0] not in known
    ]
    assert not foreign, f"not vllm serve's spelling: {foreign} in {shlex.join(argv)}"


@pytest.mark.parametrize("name", list(REFUSED))
def test_the_stand_in_refuses_what_vllm_refuses_as_vllm_does(parsed: Parsed, name: str) -> None:
    extra, line = REFUSED[name]
    real = parsed.refused[name]
    assert real["status"] == 2 and real["stderr"].splitlines()[-1] == line, real
    standin = subprocess.run(
        [sys.executable, "-m", "kyai_testing.engines", "vllm", "serve", MODEL, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert standin.returncode == 2, standin
    assert standin.stderr.splitlines()[-1] == line
