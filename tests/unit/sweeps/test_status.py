"""The status: counts, phase, the Ready condition, best, the 64-row cut with the table's
ConfigMap, notes."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest

from kyai.api import status_patch
from kyai.api.evaluationsweep import MAX_NOTES, EvaluationSweepSpec, EvaluationSweepStatus
from kyai.stats import ranks
from kyai.sweeps import (
    CELLS_FAILED,
    CELLS_PENDING,
    CELLS_RUNNING,
    INVALID_SPEC,
    SUCCEEDED,
    TABLE_GZIP_KEY,
    TABLE_KEY,
    WORKLOAD_NOT_FOUND,
    TableError,
    _children,
    read_table,
    table_config_map_name,
)


def spec(**fields: Any) -> EvaluationSweepSpec:
    return EvaluationSweepSpec.model_validate(fields)


def names(*values: str) -> list[dict[str, str]]:
    return [{"name": value} for value in values]


def three(ns: Any, **fields: Any) -> EvaluationSweepSpec:
    for name in ("a", "b", "c"):
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    fields = {"parallelism": 2, **fields}
    return spec(workloads=names("a", "b", "c"), snapshots=names("s"), **fields)


def test_phases_from_pending_to_succeeded(ns: Any) -> None:
    sweep = three(ns)
    report = ns.status(sweep)
    assert (report.status.phase, report.reason, report.ready) == ("Pending", CELLS_PENDING, False)
    assert report.status.cells.model_dump() == {
        "total": 3, "pending": 3, "running": 0, "succeeded": 0, "failed": 0, "outdated": 0,
    }  # fmt: skip
    ns.step(sweep)
    report = ns.status(sweep)
    assert (report.status.phase, report.reason) == ("Running", CELLS_RUNNING)
    assert report.message == "0/3 cells succeeded, 2 running, 1 pending"
    assert report.status.message == report.message
    for workload in ("a", "b"):
        ns.succeed(ns.run_of(workload, "s"), [1, 1, 0, 0], key="k")
    report = ns.status(sweep, waiting=["the Workload x is being deleted"])
    assert report.status.phase == "Pending"
    assert report.message == "2/3 cells succeeded, 1 pending; the Workload x is being deleted"
    ns.step(sweep)
    ns.succeed(ns.run_of("c", "s"), [1, 1, 1, 0], key="k")
    report = ns.status(sweep)
    assert (report.status.phase, report.reason, report.ready, report.stalled) == (
        "Succeeded", SUCCEEDED, True, False,
    )  # fmt: skip
    assert [c.workload for c in report.status.best or ()] == ["a", "b", "c"]  # no test separates
    assert report.status.best_names == "a, b, c"
    assert report.message == "3/3 cells succeeded; best: a, b, c"
    assert report.config_map is None and report.status.table_config_map is None
    assert report.status.table_rows == 3


def test_a_failed_cell_ends_the_sweep_failed_with_the_others_ranked(ns: Any) -> None:
    sweep = three(ns, parallelism=3)
    ns.step(sweep)
    ns.fail(ns.run_of("a", "s"))
    ns.succeed(ns.run_of("b", "s"), [1] * 20, key="k")
    report = ns.status(sweep)
    assert report.status.phase == "Running"  # c still runs
    assert report.message == "1/3 cells succeeded, 1 failed, 1 running"
    ns.succeed(ns.run_of("c", "s"), [0] * 20, key="k")
    report = ns.status(sweep)
    assert (report.status.phase, report.reason, report.ready, report.stalled) == (
        "Failed", CELLS_FAILED, False, True,
    )  # fmt: skip
    assert report.status.cells.failed == 1
    assert report.status.best_names == "b"
    rows = {row.workload: row for row in report.status.table or ()}
    assert (rows["b"].rank, rows["c"].rank, rows["a"].rank) == (1, 2, None)
    assert rows["a"].phase == "Failed"


def test_a_missing_named_workload_keeps_it_pending_not_stalled(ns: Any) -> None:
    sweep = three(ns)
    sweep = spec(**{**sweep.model_dump(by_alias=True, exclude_unset=True),
                    "workloads": names("a", "gone")})  # fmt: skip
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), [1, 0], key="k")
    report = ns.status(sweep)
    assert (report.status.phase, report.reason, report.stalled) == (
        "Pending", WORKLOAD_NOT_FOUND, False,
    )  # fmt: skip
    assert (
        report.message == "the Workload gone (spec.workloads) does not exist (1/1 cells succeeded)"
    )
    assert report.status.notes == ["the Workload gone (spec.workloads) does not exist"]
    assert report.status.best is None  # not decided while a cell may still come


def test_an_invalid_spec_is_stalled(ns: Any) -> None:
    ns.add_workload("a", endpoint=True, labels={"t": "1"})
    ns.add_snapshot("s")
    sweep = spec(workloadSelector={"matchLabels": {"t": "1"}}, snapshots=names("s"),
                 baseline={"workload": "nope"})  # fmt: skip
    report = ns.status(sweep)
    assert (report.reason, report.stalled, report.status.phase) == (INVALID_SPEC, True, "Pending")
    assert report.message.startswith("spec.baseline.workload: nope is not among")


def test_outdated_runs_are_counted(ns: Any) -> None:
    sweep = three(ns, parallelism=3)
    ns.step(sweep)
    changed = spec(**sweep.model_dump(by_alias=True, exclude_unset=True),
                   run={"generation": {"concurrency": 1}})  # fmt: skip
    assert ns.status(changed).status.cells.outdated == 3
    assert ns.status(sweep).status.cells.outdated == 0


def test_seventy_cells_keep_64_rows_and_spill_all_70(ns: Any) -> None:
    workloads = [f"w{index:02}" for index in range(70)]
    for name in workloads:
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names(*workloads), snapshots=names("s"), parallelism=70)
    ns.step(sweep)
    for index, name in enumerate(workloads):
        ns.succeed(ns.run_of(name, "s"), [1] * (index % 10) + [0] * (10 - index % 10), key="k")
    report = ns.status(sweep)
    status = report.status
    assert status.phase == "Succeeded"
    assert len(status.table or ()) == 64 and status.table_rows == 70
    # On 10 questions, Holm over 2415 pairs separates none: all 70 share rank 1 (kyai.stats
    # says the same), and the BEST column stays short.
    vectors = [[1] * (i % 10) + [0] * (10 - i % 10) for i in range(70)]
    assert set(ranks(vectors)) == {1} and len(status.best or ()) == 70
    assert (
        status.best_names == "w00, w01, w02, w03, w04, w05, w06, w07, w08, w09, w10, w11, +58 more"
    )
    assert status.table_config_map == table_config_map_name("pick") == "pick-table"
    config_map = report.config_map
    assert config_map is not None
    assert config_map["metadata"]["name"] == "pick-table"
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == "sweep-uid-1"
    assert config_map["metadata"]["labels"]["kyai.io/sweep"] == "pick"
    full = read_table(config_map)
    assert len(full) == 70 and full[:64] == status.table
    assert {row.workload for row in full} == set(workloads)
    assert json.loads(config_map["data"][TABLE_KEY])["rows"][0] == full[0].to_k8s()
    # The status patch names the ConfigMap; a shorter table later clears it (null).
    assert status_patch(status)["tableConfigMap"] == "pick-table"
    ns.step(spec(workloads=names(*workloads[:3]), snapshots=names("s")))
    shorter = ns.status(spec(workloads=names(*workloads[:3]), snapshots=names("s"))).status
    assert status_patch(shorter)["tableConfigMap"] is None
    assert EvaluationSweepStatus.model_validate(status_patch(status)).table == status.table


def test_a_large_table_is_gzipped_in_binary_data(ns: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_children, "TABLE_PLAIN_LIMIT_BYTES", 100)
    workloads = [f"w{index:02}" for index in range(65)]
    for name in workloads:
        ns.add_workload(name, endpoint=True)
    ns.add_snapshot("s")
    sweep = spec(workloads=names(*workloads), snapshots=names("s"), parallelism=65)
    ns.step(sweep)
    report = ns.status(sweep)
    config_map = report.config_map
    assert config_map is not None and "data" not in config_map
    packed = base64.b64decode(config_map["binaryData"][TABLE_GZIP_KEY])
    assert len(json.loads(gzip.decompress(packed))["rows"]) == 65
    full = read_table(config_map)
    assert len(full) == 65 and full[:64] == report.status.table
    # Equal tables give equal bytes (no timestamp in the gzip header).
    assert ns.status(sweep).config_map == config_map


@pytest.mark.parametrize(
    ("config_map", "message"),
    [
        ({"metadata": {"name": "t"}}, "ConfigMap t: neither data.table.json nor binaryData"),
        ({"metadata": {"name": "t"}, "data": {TABLE_KEY: "{"}}, "ConfigMap t: unreadable table"),
        ({"metadata": {"name": "t"}, "binaryData": {TABLE_GZIP_KEY: "bm90IGd6aXA="}},
         "ConfigMap t: unreadable table"),
        ({"metadata": {"name": "t"}, "data": {TABLE_KEY: '{"rows": [{"cell": 1}]}'}},
         "ConfigMap t: unreadable table"),
    ],
)  # fmt: skip
def test_an_unreadable_table_says_why(config_map: dict[str, Any], message: str) -> None:
    with pytest.raises(TableError, match=message):
        read_table(config_map)


def test_notes_are_capped(ns: Any) -> None:
    many = [f"r{index:02}" for index in range(30)]
    for name in many:
        ns.add_workload(name, endpoint=True)
    ns.add_engine_args_set("e")
    ns.add_snapshot("s")
    sweep = spec(workloads=names(*many), engineArgsSets=names("e"), snapshots=names("s"))
    notes = ns.status(sweep).status.notes
    assert len(notes) == MAX_NOTES
    assert notes[-1] == f"... and {30 - MAX_NOTES + 1} more"


def nulls_in_lists(value: Any, inside: bool = False) -> list[Any]:
    if isinstance(value, dict):
        return [v for v in value.values() if v is None and inside] + [
            found for v in value.values() for found in nulls_in_lists(v, inside)
        ]
    if isinstance(value, list):
        return [found for item in value for found in nulls_in_lists(item, True)]
    return []


def test_the_status_patch_writes_no_null_inside_a_list(ns: Any) -> None:
    """A null inside a list is a value the CRD's typed schema refuses (not a deletion)."""
    sweep = three(ns, baseline={"workload": "a"})
    ns.step(sweep)
    ns.succeed(ns.run_of("a", "s"), [1, 0, 1], key="k")
    patch = status_patch(ns.status(sweep).status)
    assert patch["table"][0]["workload"] == "a"
    assert "engineArgsSet" not in patch["table"][0] and "rank" in patch["table"][0]
    assert nulls_in_lists(patch) == []


def test_best_names_stay_short() -> None:
    from kyai.api.evaluationsweep import SweepChoice
    from kyai.sweeps._status import _best_names

    many = [SweepChoice(workload=f"workload-{index:02}") for index in range(12)]
    assert _best_names(many) == ("workload-00, workload-01, workload-02, workload-03, +8 more")
    assert _best_names([SweepChoice(workload="q", engine_args_set="fp8")]) == "q/fp8"
    assert _best_names([]) == "(none)" and _best_names(None) is None
