"""``make mutation``: mutation testing of the modules that decide scores and safety (issue 14).

Every mutant comes from mutmut's own mutation operators (mutmut 3). Two ways to run them:

- ``mutmut`` groups (code the tests call in their own process): mutmut 3 itself, in a
  workspace ``.mutation/<group>/`` holding a copy of the package as ``src/kyai`` and of
  ``tests/`` (mutmut needs a ``src`` layout; the project keeps its package in ``operator/``).
  mutmut runs, per mutant, only the selected tests that reach the mutated function.
- ``file`` groups (code that runs in another process, where mutmut's trampolines cannot follow:
  the sandbox's child script, whose environment is wiped; the run controller, which runs in the
  operator process of the system tests): each mutant is written into a scratch copy of the
  package, one at a time, and the group's tests run against it (``PYTHONPATH``), stopping at
  the first failure.

Usage (``make mutation`` passes ``MUTATION_ARGS``)::

    python scripts/mutation.py                      # every group, one after another
    python scripts/mutation.py evaluation graders   # some groups
    python scripts/mutation.py --report graders     # print the last results again
    python scripts/mutation.py --jobs 2 --fresh evaluation

It prints, per module: mutants, killed, survived, no tests, timeouts and the kill rate, then
every surviving mutant as a diff. Classify survivors in docs/mutation.md (real gap: add a test
in a ``test_guard_*.py`` file; equivalent: list it there).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "operator" / "kyai"
WORK = REPO / ".mutation"


@dataclass(frozen=True)
class Group:
    """Modules mutated together, and the fast tests that judge their mutants."""

    name: str
    engine: str  # "mutmut" or "file"
    modules: tuple[str, ...]  # paths below operator/kyai
    tests: tuple[str, ...]  # pytest arguments (paths below tests/, node ids)
    functions: tuple[str, ...] = ()  # file engine: only mutants inside these functions
    lines_with: tuple[str, ...] = ()  # file engine: only mutants of lines holding one of these
    mutants: tuple[str, ...] = ()  # mutmut engine: only mutant names matching these globs
    timeout_factor: float = 4.0  # file engine: a mutant may take this times the clean run
    also_copy: tuple[str, ...] = ()  # mutmut engine: repository paths the tests read
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


GROUPS: dict[str, Group] = {
    group.name: group
    for group in (
        # evaluation/: one group per test area, so that each group's test selection (and
        # mutmut's first, recorded run of all of it) holds only the tests that reach it.
        Group(
            "evaluation-scoring",
            "mutmut",
            (
                "evaluation/_verdict.py",
                "evaluation/_scoring.py",
                "evaluation/_reasoning.py",
                "evaluation/_budget.py",
            ),
            (
                "tests/unit/evaluation",
                "tests/integration/test_pipeline.py",
                "tests/integration/test_guard_resume.py",
                "tests/integration/test_guard_reasoning_graders.py",
            ),
        ),
        Group(
            "evaluation-client",
            "mutmut",
            ("evaluation/_client.py",),
            (
                "tests/unit/evaluation/test_client.py",
                "tests/unit/evaluation/test_guard_client.py",
                "tests/integration/test_faults.py",
            ),
        ),
        Group(
            "evaluation-store",
            "mutmut",
            ("evaluation/_store.py",),
            (
                "tests/unit/evaluation/test_guard_store.py",
                "tests/unit/evaluation/test_store.py",
                "tests/integration/test_guard_resume.py",
                "tests/integration/test_pipeline.py",
            ),
        ),
        # graders/: one group per module, each with the tests of that module only. The
        # wall-clock assertions of these tests are generous safety nets (>= 10x the expected
        # time), so that mutmut's call recording on a loaded machine does not trip them.
        Group(
            "graders-mcq",
            "mutmut",
            ("graders/_mcq.py",),
            (
                "tests/unit/graders/test_mcq.py",
                "tests/unit/graders/test_guard_mcq.py",
                "tests/integration/test_guard_reasoning_graders.py",
            ),
            mutants=("kyai.graders._mcq.*",),
        ),
        Group(
            "graders-math",
            "mutmut",
            ("graders/_math.py",),
            (
                "tests/unit/graders/test_guard_math.py",
                "tests/unit/graders/test_math.py",
                "tests/integration/test_guard_reasoning_graders.py",
            ),
            mutants=(
                # The functions that decide a row's score (the worker's own code runs in a
                # subprocess, where mutmut's switch between mutants cannot reach).
                "kyai.graders._math.x_extract_final_answer_*",
                "kyai.graders._math.x__last_boxed_*",
                "kyai.graders._math.x__clean_*",
                "kyai.graders._math.x__gold_source_*",
                "kyai.graders._math.x__for_math_verify_*",
                "kyai.graders._math.xǁMathGraderǁ_prepare_*",
                "kyai.graders._math.xǁMathGraderǁ_grade_reply_*",
            ),
        ),
        Group(
            "graders-python",
            "mutmut",
            ("graders/_python.py",),
            (
                "tests/unit/graders/test_python_grader.py",
                "tests/unit/graders/test_guard_python_batch.py",
            ),
            mutants=(
                "kyai.graders._python.x_interpret_result_*",
                "kyai.graders._python.x_primary_score_*",
                "kyai.graders._python.x__finite_number_*",
                "kyai.graders._python.x__failure_*",
                "kyai.graders._python.xǁPythonGraderǁ_scored_*",
                "kyai.graders._python.xǁPythonGraderǁ_grade_sample_*",
                "kyai.graders._python.xǁPythonGraderǁ_all_failed_*",
                "kyai.graders._python.xǁPythonGraderǁ_read_batch_*",
            ),
        ),
        Group(
            "graders-sandbox",
            "mutmut",
            ("graders/_sandbox.py",),
            (
                "tests/unit/graders/test_sandbox.py",
                "tests/unit/graders/test_guard_sandbox_udp.py",
                "tests/unit/graders/test_guard_sandbox_bridge.py",
                "tests/unit/graders/test_guard_sandbox_child.py",
                "tests/unit/graders/test_python_grader.py",
            ),
            mutants=(
                # The functions that decide a sandbox run's verdict.
                "kyai.graders._sandbox.x__verdict_*",
                "kyai.graders._sandbox.x__no_result_*",
                "kyai.graders._sandbox.x__child_env_*",
                "kyai.graders._sandbox.x__config_*",
                "kyai.graders._sandbox.xǁSandboxLimitsǁ*",
                "kyai.graders._sandbox.xǁ_Runǁ_answer_*",
            ),
        ),
        Group(
            "api",
            "mutmut",
            (
                "api/evaluationrun.py",
                "api/snapshot.py",
                "api/workload.py",
                "api/engineargsset.py",
            ),
            ("tests/unit/api", "tests/unit/controllers", "tests/unit/builders"),
            also_copy=("crds",),  # the CRD tests compare the models with the committed CRDs
            notes="mutmut mutates undecorated functions only: the pydantic validators "
            "(@field_validator, @model_validator) and the Field(ge=..., le=...) bounds are not "
            "mutated (tests/unit/api/test_guard_validation.py tests each rule).",
        ),
        # The last round's modules (issue 36): statistics, the judge gateway, sweeps, the
        # serving figures and the non-inferiority gate.
        Group(
            "stats",
            "mutmut",
            ("stats.py", "ranking.py"),
            (
                "tests/unit/stats",
                "tests/unit/leaderboard/test_ranks.py",
                "tests/unit/leaderboard/test_pareto.py",
                "tests/unit/leaderboard/test_leaderboard.py",
                "tests/unit/leaderboard/test_guard_ranking.py",
                "tests/integration/test_stats_ranks.py",
            ),
            mutants=(
                "kyai.stats.*",
                # ranking.py: the board's ranks, the Pareto front, the same-rows refusal.
                "kyai.ranking.x_rank_key_*",
                "kyai.ranking.x_rank__*",
                "kyai.ranking.x__board_*",
                "kyai.ranking.x_pareto_front_*",
                "kyai.ranking.x__check_same_rows_*",
                "kyai.ranking.x_entry_from_run_*",
            ),
        ),
        Group(
            "gateway",
            "mutmut",
            (
                "gateway/_limits.py",
                "gateway/_auth.py",
                "gateway/_body.py",
                "gateway/_redact.py",
                "gateway/_proxy.py",
            ),
            (
                "tests/unit/gateway",
                "tests/integration/test_gateway.py",
                "tests/integration/test_guard_gateway.py",
            ),
            mutants=(
                # The gateway's decisions: the per-namespace limits, who the caller is (token
                # review), what reaches the judge (the key, the model, the body) and what
                # comes back; not the server's start and stop.
                "kyai.gateway._limits.*",
                "kyai.gateway._auth.*",
                "kyai.gateway._body.*",
                "kyai.gateway._redact.*",
                "kyai.gateway._proxy.x_error_response_*",
                "kyai.gateway._proxy.xǁGatewayǁ_account_*",
                "kyai.gateway._proxy.xǁGatewayǁ_caller_*",
                "kyai.gateway._proxy.xǁGatewayǁ_upstream_headers_*",
                "kyai.gateway._proxy.xǁGatewayǁ_chat_*",
                "kyai.gateway._proxy.xǁGatewayǁ_models_*",
                "kyai.gateway._proxy.xǁGatewayǁ_limited_*",
                "kyai.gateway._proxy.xǁGatewayǁ_forward_*",
                "kyai.gateway._proxy.xǁGatewayǁ_stream_*",
            ),
            notes="tests/integration/test_gateway.py needs kyai_testing (tools/testing) in "
            "the mutation venv.",
        ),
        Group(
            "sweeps",
            "mutmut",
            (
                "sweeps/_cells.py",
                "sweeps/_memo.py",
                "sweeps/_schedule.py",
                "sweeps/_status.py",
                "sweeps/_table.py",
            ),
            (
                # Not test_api.py nor test_metrics_and_dashboard.py: they check the API
                # models and the dashboards (not mutated) against docs/ and charts/.
                "tests/unit/sweeps/test_expand.py",
                "tests/unit/sweeps/test_schedule.py",
                "tests/unit/sweeps/test_status.py",
                "tests/unit/sweeps/test_table.py",
                "tests/unit/sweeps/test_guard_table.py",
                "tests/unit/sweeps/test_guard_schedule.py",
                "tests/unit/leaderboard/test_sweep_board.py",
            ),
            mutants=(
                # Matrix expansion, the ranking memo, the places (what starts, what is
                # deleted), the status and the table (ranks, baseline, Pareto fronts); not
                # the names and hashes of children.
                "kyai.sweeps._cells.x_expand_*",
                "kyai.sweeps._cells.x__cells_of_*",
                "kyai.sweeps._cells.x__chosen_*",
                "kyai.sweeps._cells.x__judges_*",
                "kyai.sweeps._cells.x__variants_*",
                "kyai.sweeps._cells.x__spec_problems_*",
                "kyai.sweeps._memo.*",
                "kyai.sweeps._schedule.*",
                "kyai.sweeps._status.*",
                "kyai.sweeps._table.*",
            ),
        ),
        Group(
            "serving",
            "mutmut",
            ("evaluation/_serving.py", "evaluation/_servermetrics.py"),
            (
                "tests/unit/evaluation/test_serving.py",
                "tests/unit/evaluation/test_servermetrics.py",
                "tests/unit/evaluation/test_guard_servermetrics.py",
                "tests/unit/metrics/test_interval_and_serving.py",
                "tests/integration/test_serving_figures.py",
            ),
            mutants=(
                # The client's figures and the engine's (the scrapes' difference); not the
                # command-line flags.
                "kyai.evaluation._serving.x__round_*",
                "kyai.evaluation._serving.x_timing_fields_*",
                "kyai.evaluation._serving.x_distribution_*",
                "kyai.evaluation._serving.x__rate_*",
                "kyai.evaluation._serving.xǁServingRecorderǁ*",
                "kyai.evaluation._serving.x_serving_note_*",
                "kyai.evaluation._servermetrics.*",
            ),
            notes="api/serving.py holds pydantic models only (nothing mutmut mutates).",
        ),
        Group(
            "baseline-gate",
            "mutmut",
            ("controllers/_baseline.py", "controllers/_thresholds.py", "compare.py"),
            (
                "tests/unit/controllers/test_non_inferiority.py",
                "tests/unit/controllers/test_guard_thresholds.py",
                "tests/unit/controllers/test_guard_baseline.py",
                "tests/unit/controllers/test_rejudge_source.py",
                "tests/unit/compare/test_compare.py",
            ),
            mutants=(
                "kyai.controllers._baseline.*",
                "kyai.controllers._thresholds.x_metric_gate_*",
                "kyai.controllers._thresholds.x_combine_passed_*",
                # compare.py: what `kyai compare` concludes about a margin and a level.
                "kyai.compare.x__margin_*",
                "kyai.compare.x__alpha_*",
                "kyai.compare.x_same_run_*",
                "kyai.compare.x_verdict_sentence_*",
                "kyai.compare.x_non_inferiority_sentence_*",
            ),
            notes="threshold_condition (avgScore, maxErrorRate) is in the controller group.",
        ),
        # Issue 44: the schedules' decisions (cron as CronJob, regression, history) and the
        # controller's use of them.
        Group(
            "schedules",
            "mutmut",
            (
                "schedules/_cron.py",
                "schedules/_regression.py",
                "schedules/_history.py",
                "controllers/evaluationschedule.py",
            ),
            (
                "tests/unit/schedules",
                "tests/unit/controllers/test_schedule_controller.py",
            ),
            mutants=(
                "kyai.schedules.*",
                "kyai.controllers.evaluationschedule.x_serving_hash_*",
                "kyai.controllers.evaluationschedule.x__history_*",
                "kyai.controllers.evaluationschedule.x__due_*",
                "kyai.controllers.evaluationschedule.x__requested_*",
                "kyai.controllers.evaluationschedule.x__changed_*",
                "kyai.controllers.evaluationschedule.x_reconcile_schedule_*",
            ),
        ),
        # Issue 45: the shared-cluster round's modules (Kueue, multi-node groups, leader
        # election, streams, the report's data), each with the unit tests that reach it.
        Group(
            "kueue",
            "mutmut",
            ("controllers/_kueue.py",),
            ("tests/unit/controllers/test_kueue.py", "tests/unit/controllers/test_guard_kueue.py"),
            mutants=("kyai.controllers._kueue.*",),
            also_copy=("config/argocd",),  # a test reads the Argo CD health checks
        ),
        Group(
            "leader",
            "mutmut",
            ("controllers/leader.py",),
            (
                "tests/unit/controllers/test_leader_settings.py",
                "tests/unit/controllers/test_guard_leader.py",
            ),
            mutants=("kyai.controllers.leader.*",),
        ),
        Group(
            "multinode",
            "mutmut",
            ("engines/_multinode.py", "controllers/_multinode.py"),
            (
                "tests/unit/controllers/test_multinode_workload.py",
                "tests/unit/engines/test_guard_multinode_args.py",
                "tests/unit/controllers/test_guard_multinode_ready.py",
            ),
            mutants=("kyai.engines._multinode.*", "kyai.controllers._multinode.*"),
        ),
        Group(
            "streams",
            "mutmut",
            ("evaluation/_stream.py",),
            (
                "tests/unit/evaluation/test_stream.py",
                "tests/unit/evaluation/test_client_stream.py",
                "tests/unit/evaluation/test_guard_stream_end.py",
            ),
            mutants=("kyai.evaluation._stream.*",),
        ),
        Group(
            "view-data",
            "mutmut",
            ("view/payload.py",),
            (
                "tests/unit/view/test_payload.py",
                "tests/unit/view/test_guard_discordant.py",
                "tests/unit/view/test_guard_latest_record.py",
            ),
            mutants=("kyai.view.payload.*",),
        ),
        # Issue 42: the judge checked before the generation (shared checks, the engine's use).
        Group(
            "endpoint-checks",
            "mutmut",
            ("controllers/_endpoints.py", "evaluation/_preflight.py"),
            (
                "tests/unit/controllers/test_judge_checks.py",
                "tests/integration/test_cli_endpoint_checks.py",
            ),
            mutants=(
                "kyai.controllers._endpoints.*",
                "kyai.evaluation._preflight.x__check_*",
                "kyai.evaluation._preflight.x__failed_*",
                "kyai.evaluation._preflight.x_check_server_*",
            ),
        ),
        Group(
            "sandbox-child",
            "file",
            ("graders/_sandbox_child.py",),
            (
                "tests/unit/graders/test_guard_sandbox_udp.py",
                "tests/unit/graders/test_guard_sandbox_child.py",
                "tests/unit/graders/test_sandbox.py",
            ),
            functions=(
                "_apply_seccomp",
                "_is_own",
                "_apply_rlimits",
                "_apply_landlock",
                "_read_paths",
            ),
            notes="the confinement steps (rlimits, Landlock, seccomp); module-level "
            "constants (DENIED_SYSCALLS) are not mutated (mutmut mutates functions only); the "
            "socket rule is guarded by test_guard_sandbox_udp.py.",
        ),
        Group(
            "controller",
            "file",
            ("controllers/_thresholds.py", "controllers/_pods.py", "controllers/_engine.py"),
            ("tests/unit/controllers/test_guard_thresholds.py", "tests/system/test_guard_runs.py"),
            functions=("threshold_condition", "job_state", "_complete"),
            lines_with=(
                "thresholds",
                "rate",
                "score <",
                "misses",
                "condition.get",
                "succeeded",
                "questions",
            ),
            timeout_factor=3.0,
            notes="how a Job's state is read and how thresholds are decided; a unit test of "
            "threshold_condition, then system tests (the operator process against kyai "
            "devcluster, ~25 s per mutant).",
        ),
    )
}


# Names that stand for several groups, run one after another.
ALIASES: dict[str, tuple[str, ...]] = {
    "evaluation": ("evaluation-scoring", "evaluation-client", "evaluation-store"),
    "graders": ("graders-mcq", "graders-math", "graders-python", "graders-sandbox"),
    "last-round": ("stats", "gateway", "sweeps", "serving", "baseline-gate"),
}


# --- mutmut groups ---------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _workspace(group: Group, fresh: bool) -> tuple[Path, bool]:
    """``.mutation/<group>``: src/kyai, tests/ and a pyproject.toml configuring mutmut.

    Also says whether that configuration changed since the last run (the test selection):
    mutmut then forgets every result of the group.
    """
    ws = WORK / group.name
    if fresh and ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True, exist_ok=True)
    # copy2 keeps modification times: mutmut re-mutates only files that changed.
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PACKAGE, ws / "src" / "kyai", dirs_exist_ok=True, ignore=ignore)
    shutil.copytree(REPO / "tests", ws / "tests", dirs_exist_ok=True, ignore=ignore)
    for extra in group.also_copy:
        shutil.copytree(REPO / extra, ws / extra, dirs_exist_ok=True, ignore=ignore)
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    pytest_options = dict(project["tool"]["pytest"]["ini_options"])
    pytest_options["testpaths"] = ["tests"]
    mutmut_options = {
        "source_paths": ["src/"],
        "only_mutate": [f"src/kyai/{module}" for module in group.modules],
        "pytest_add_cli_args_test_selection": list(group.tests),
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q"],
        "use_git_change_detection": False,
        "also_copy": list(group.also_copy),
        # A mutant that loops (start = end in a parser) is stopped after 5x the time its tests
        # took on the clean code plus 5 s (mutmut's default, 15x, costs minutes per loop).
        "timeout_multiplier": 5.0,
        "timeout_constant": 5.0,
    }
    lines = ["# Written by scripts/mutation.py; do not edit.", "[tool.mutmut]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in mutmut_options.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {_toml_value(value)}" for key, value in pytest_options.items()]
    config = ws / "pyproject.toml"
    # mutmut forgets its results when the tests it runs change (its "test_selection" and
    # "test_execution" fingerprints), not for other settings.
    keys = ("pytest_add_cli_args_test_selection", "pytest_add_cli_args")
    before = None
    if config.exists():
        old = tomllib.loads(config.read_text(encoding="utf-8")).get("tool", {}).get("mutmut", {})
        before = tuple(old.get(key) for key in keys)
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ws, before is not None and before != tuple(mutmut_options[key] for key in keys)


def _mutmut() -> str:
    path = Path(sys.executable).with_name("mutmut")
    if not path.exists():
        raise SystemExit("mutmut is not installed next to this Python: run `make mutation`.")
    return str(path)


def run_mutmut(
    group: Group,
    *,
    jobs: int,
    fresh: bool,
    only: Sequence[str] = (),
    budget: float | None = None,
    survivors: bool = False,
) -> None:
    """Run mutmut 3 on the group's workspace (it resumes where it stopped).

    With ``budget`` (seconds), mutmut is stopped after that long: it records each mutant's
    result as soon as the mutant is done, so the mutants run so far keep their results and
    the rest stay "not checked" (a later run resumes them).
    """
    ws, reconfigured = _workspace(group, fresh)
    started = time.monotonic()
    if reconfigured:
        print(f"== {group.name}: the test selection changed: mutmut forgets the earlier results")
    names = list(only)
    if survivors and not reconfigured:
        names = [r["mutant"] for r in mutmut_results(group) if r["status"] == "survived"]
        if not names:
            print(f"== {group.name}: no survivor to run again")
            return
    if not names:
        # mutmut re-runs every mutant named on its command line, tested or not: to resume,
        # name only those without a result yet (the group's globs on a first run).
        records = [] if reconfigured else mutmut_results(group)
        if records:
            names = [
                record["mutant"]
                for record in records
                if record["status"] == "not checked"
                and (
                    not group.mutants
                    or any(fnmatch.fnmatchcase(record["mutant"], glob) for glob in group.mutants)
                )
            ]
            if not names:
                print(f"== {group.name}: every mutant has a result (--fresh to start over)")
                return
        else:
            names = list(group.mutants)
    print(f"== {group.name}: mutmut run in {ws.relative_to(REPO)} ({jobs} children)", flush=True)
    log = ws / "mutmut-run.log"  # mutmut's own progress display, as it runs
    with log.open("w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            [_mutmut(), "run", "--max-children", str(jobs), *names],
            cwd=ws,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its forked children too, for the budget's stop
        )
        try:
            returncode: int | str = process.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            # mutmut stops its workers on Ctrl-C; each finished mutant is already saved.
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            with contextlib.suppress(ProcessLookupError):  # workers it left behind
                os.killpg(process.pid, signal.SIGKILL)
            returncode = "stopped: time budget spent (run again to resume)"
    print(f"   mutmut exited {returncode} after {time.monotonic() - started:.0f}s", flush=True)
    if isinstance(returncode, int) and returncode != 0:
        print(log.read_text(encoding="utf-8", errors="replace")[-3000:])


_STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "type check",
}


def mutmut_results(group: Group) -> list[dict[str, Any]]:
    """One record per mutant of the group's modules, from mutmut's .meta files."""
    ws = WORK / group.name
    records = []
    for module in group.modules:
        meta = ws / "mutants" / "src" / "kyai" / (module + ".meta")
        if not meta.exists():
            continue
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
        except json.JSONDecodeError:  # read while mutmut rewrites it: once more
            time.sleep(1)
            data = json.loads(meta.read_text(encoding="utf-8"))
        for name, code in sorted(data["exit_code_by_key"].items()):
            if group.mutants and not any(fnmatch.fnmatchcase(name, g) for g in group.mutants):
                continue  # outside the group's selection
            status = "not checked" if code is None else _STATUS.get(code, "suspicious")
            records.append({"module": module, "mutant": name, "status": status})
    return records


def mutmut_diff(group: Group, module: str, mutant: str) -> str:
    """The changed lines of one mutmut mutant (what ``mutmut show`` prints)."""
    diff_apply = importlib.import_module("mutmut.mutation.diff_apply")
    here = Path.cwd()
    os.chdir(WORK / group.name)
    try:
        text: str = diff_apply.get_diff_for_mutant(mutant, path=Path("src/kyai") / module)
    except Exception as exc:  # an older result whose function has changed since
        return f"(no diff: {exc})"
    finally:
        os.chdir(here)
    lines = text.splitlines()
    return "\n".join(
        line for line in lines if line.startswith(("+", "-")) and line[:3] not in ("+++", "---")
    )


# --- file groups -----------------------------------------------------------------------------


def _single_mutants(workspace: Path, path: Path, functions: Sequence[str]) -> list[tuple[str, str]]:
    """``(function, mutated source)`` for each of mutmut's mutations of ``path``."""
    try:
        cst = importlib.import_module("libcst")
        create_mutations = importlib.import_module("mutmut.mutation.file_mutation").create_mutations
    except (
        ImportError,
        AttributeError,
    ) as exc:  # mutmut moved its internals: pin the version in the Makefile
        raise SystemExit(f"this mutmut has no create_mutations ({exc}); use mutmut 3.8") from exc

    code = path.read_text(encoding="utf-8")
    here = Path.cwd()
    os.chdir(workspace)  # mutmut reads its configuration from ./pyproject.toml
    try:
        module, mutations, _, _ = create_mutations(str(path), code)
    finally:
        os.chdir(here)
    result = []
    for mutation in mutations:
        function = mutation.contained_by_top_level_function
        if not isinstance(function, cst.FunctionDef):
            continue  # module or class level: mutmut itself never applies these
        name = function.name.value
        if functions and name not in functions:
            continue
        mutated = module.deep_replace(mutation.original_node, mutation.mutated_node)
        result.append((name, mutated.code))
    return result


def _diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return "\n".join(
        line for line in lines if line.startswith(("+", "-")) and line[:3] not in ("+++", "---")
    )


def _pytest(tests: Sequence[str], scratch: Path, timeout: float | None) -> tuple[int, float]:
    started = time.monotonic()
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(scratch), "PYTHONDONTWRITEBYTECODE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return -1, time.monotonic() - started
    return completed.returncode, time.monotonic() - started


def run_file(
    group: Group,
    *,
    fresh: bool,
    deadline: float,
    only: Sequence[str] = (),
    survivors: bool = False,
) -> None:
    """Mutate one file at a time in a scratch copy and run the group's tests on each mutant.

    No new mutant starts after ``deadline`` (``time.monotonic()``); a later run resumes.
    With ``only`` (globs of ``function:number`` keys), just those mutants run, again even if
    an earlier run tested them.
    """
    ws = WORK / group.name
    if fresh and ws.exists():
        shutil.rmtree(ws)
    scratch = ws / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PACKAGE, scratch / "kyai", dirs_exist_ok=True, ignore=ignore)
    (ws / "pyproject.toml").write_text(
        '# Written by scripts/mutation.py.\n[tool.mutmut]\nsource_paths = ["src/"]\n',
        encoding="utf-8",
    )
    results_path = ws / "results.json"
    results: dict[str, Any] = (
        json.loads(results_path.read_text(encoding="utf-8")) if results_path.exists() else {}
    )
    print(f"== {group.name}: one mutant at a time, tests {' '.join(group.tests)}", flush=True)
    code, clean = _pytest(group.tests, scratch, None)
    if code != 0:
        raise SystemExit(f"the clean tests of {group.name} fail (exit {code}): fix them first")
    print(f"   clean run {clean:.1f}s", flush=True)
    for module in group.modules:
        target = scratch / "kyai" / module
        original = (PACKAGE / module).read_text(encoding="utf-8")
        mutants = [
            (function, source)
            for function, source in _single_mutants(ws, PACKAGE / module, group.functions)
            if not group.lines_with
            or any(
                needle in line
                for line in _diff(original, source).splitlines()
                if line.startswith("-")
                for needle in group.lines_with
            )
        ]
        # Keys number the mutants within their function; the functions are taken in the
        # group's order (the most important first, for bounded runs).
        keyed: list[tuple[str, str]] = []
        per_function: Counter[str] = Counter()
        for function, source in mutants:
            per_function[function] += 1
            keyed.append((f"{function}:{per_function[function]}", source))
        if group.functions:
            keyed.sort(key=lambda item: group.functions.index(item[0].split(":")[0]))
        stored = results.setdefault(module, {})
        counts_path = ws / "counts.json"  # how many mutants each module has, for the report
        counts = json.loads(counts_path.read_text(encoding="utf-8")) if counts_path.exists() else {}
        counts[module] = len(keyed)
        counts_path.write_text(json.dumps(counts), encoding="utf-8")
        print(f"   {module}: {len(mutants)} mutants", flush=True)
        try:
            for key, source in keyed:
                diff = _diff(original, source)
                if survivors:
                    if stored.get(key, {}).get("status") != "survived":
                        continue
                elif only:
                    if not any(fnmatch.fnmatchcase(key, pattern) for pattern in only):
                        continue
                elif key in stored and stored[key]["diff"] == diff:
                    continue  # done in an earlier run
                if time.monotonic() > deadline:
                    print("   time budget spent: stopping (run again to resume)", flush=True)
                    return
                target.write_text(source, encoding="utf-8")
                exit_code, took = _pytest(group.tests, scratch, group.timeout_factor * clean + 30)
                status = {0: "survived", 1: "killed", -1: "timeout"}.get(exit_code, "suspicious")
                stored[key] = {"status": status, "exit": exit_code, "seconds": round(took, 1)}
                stored[key]["diff"] = diff
                results_path.write_text(json.dumps(results, indent=1), encoding="utf-8")
                print(f"   {key} {status} ({took:.0f}s)", flush=True)
        finally:
            target.write_text(original, encoding="utf-8")


def file_results(group: Group) -> list[dict[str, Any]]:
    """One record per mutant of a file group, from its results.json.

    The mutants a bounded run did not reach are "not checked".
    """
    path = WORK / group.name / "results.json"
    if not path.exists():
        return []
    results = json.loads(path.read_text(encoding="utf-8"))
    records = [
        {"module": module, "mutant": key, "status": value["status"], "diff": value["diff"]}
        for module, mutants in results.items()
        for key, value in mutants.items()
    ]
    counts_path = WORK / group.name / "counts.json"
    if counts_path.exists():
        for module, count in json.loads(counts_path.read_text(encoding="utf-8")).items():
            done = len(results.get(module, {}))
            records += [{"module": module, "mutant": "", "status": "not checked"}] * (count - done)
    return records


# --- report ----------------------------------------------------------------------------------


def report(group: Group, *, diffs: bool = True) -> dict[str, Counter[str]]:
    """Print the kill rate per module and the surviving mutants; return the counts."""
    records = mutmut_results(group) if group.engine == "mutmut" else file_results(group)
    counts: dict[str, Counter[str]] = {}
    for record in records:
        counts.setdefault(record["module"], Counter())[record["status"]] += 1
    print(f"\n== {group.name} ({group.engine})" + (f": {group.notes}" if group.notes else ""))
    print(f"   {'module':34} {'mutants':>7} {'unrun':>5} {'killed':>6} {'timeout':>7} "
          f"{'survived':>8} {'no tests':>8} {'other':>5} {'kill rate':>9}")  # fmt: skip
    for module in group.modules:
        c = counts.get(module, Counter())
        total = sum(c.values())
        killed = c["killed"] + c["timeout"]
        tested = killed + c["survived"]
        other = total - tested - c["no tests"] - c["not checked"]
        rate = f"{100 * killed / tested:.1f} %" if tested else "-"
        print(f"   {module:34} {total:7} {c['not checked']:5} {c['killed']:6} {c['timeout']:7} "
              f"{c['survived']:8} {c['no tests']:8} {other:5} {rate:>9}")  # fmt: skip
    if diffs:
        for record in records:
            if record["status"] in ("survived", "suspicious", "no tests"):
                diff = record.get("diff") or mutmut_diff(group, record["module"], record["mutant"])
                print(f"\n   [{record['status']}] {record['module']} {record['mutant']}")
                print("\n".join("      " + line for line in diff.splitlines()))
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen groups (all by default), then print their reports."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "groups", nargs="*", metavar="GROUP", help=f"of {', '.join([*GROUPS, *ALIASES])}"
    )
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (mutmut)")
    parser.add_argument("--fresh", action="store_true", help="forget earlier results")
    parser.add_argument("--report", action="store_true", help="only print the last results")
    parser.add_argument("--no-diffs", action="store_true", help="counts only")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="(re)run only the mutants whose names match (repeatable): mutmut names such as "
        "'kyai.graders._mcq.x_extract_letter*', or file-group keys such as '_read_paths:*'",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run again only the mutants that survived the last run (after adding tests)",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="per group: stop after this long (results so far are kept; run again to resume)",
    )
    args = parser.parse_args(argv)
    names = [member for name in args.groups for member in ALIASES.get(name, (name,))]
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        choices = ", ".join([*GROUPS, *ALIASES])
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {choices}")
    groups = [GROUPS[name] for name in dict.fromkeys(names or GROUPS)]
    budget = args.max_minutes * 60 if args.max_minutes is not None else None
    for group in groups:
        if args.report:
            continue
        if group.engine == "mutmut":
            run_mutmut(
                group,
                jobs=args.jobs,
                fresh=args.fresh,
                only=args.only,
                budget=budget,
                survivors=args.survivors,
            )
        else:
            deadline = time.monotonic() + (budget if budget is not None else float("inf"))
            run_file(
                group, fresh=args.fresh, deadline=deadline, only=args.only, survivors=args.survivors
            )
    for group in groups:
        report(group, diffs=not args.no_diffs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
