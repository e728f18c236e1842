"""EvaluationSweep logic without Kubernetes I/O: spec + listed objects in, decisions out.

The controller of the EvaluationSweep kind lists what the sweep names and owns, then:

1. :func:`expand`: the spec and the namespace's Workloads, EngineArgsSets and Snapshots →
   the cells (one per Workload × EngineArgsSet or none × Snapshot, in start order), the
   derived Workloads they need, and the problems and notes of what was left out;
2. :func:`plan`: the cells and the sweep's runs and derived Workloads → the Workloads and
   runs to create (bounded by ``spec.parallelism``), and those to delete;
3. :func:`sweep_status`: the cells and their runs → the status (counts, phase, the ranked
   table cut at 64 rows, ``best``, ``pareto``), the Ready condition and the ConfigMap of the
   full table when it is longer.

Names are deterministic (:func:`run_name`, :func:`derived_workload_name`), so a restarted
operator finds what it made. A cell's identity (:func:`cell_hash`) is its three names only.
"""

from __future__ import annotations

from kyai.sweeps._cells import (
    ENDPOINT_NOTE,
    ENGINE_ARGS_NOT_FOUND,
    INVALID_SPEC,
    NO_CELLS,
    SNAPSHOT_NOT_FOUND,
    WORKLOAD_NOT_FOUND,
    Cell,
    Expansion,
    Problem,
    Variant,
    cell_hash,
    derived_workload_name,
    expand,
    run_name,
    variant_hash,
)
from kyai.sweeps._children import (
    TABLE_GZIP_KEY,
    TABLE_KEY,
    TableError,
    cell_run,
    derived_workload,
    owned_by,
    read_table,
    run_hash,
    table_config_map,
    table_config_map_name,
)
from kyai.sweeps._schedule import CellState, Plan, cell_states, finished, plan, run_phase
from kyai.sweeps._selectors import matches
from kyai.sweeps._status import (
    CELLS_FAILED,
    CELLS_PENDING,
    CELLS_RUNNING,
    SUCCEEDED,
    SweepReport,
    counts,
    sweep_status,
)
from kyai.sweeps._table import QUEUED, Table, build_table

__all__ = [
    "CELLS_FAILED",
    "CELLS_PENDING",
    "CELLS_RUNNING",
    "ENDPOINT_NOTE",
    "ENGINE_ARGS_NOT_FOUND",
    "INVALID_SPEC",
    "NO_CELLS",
    "QUEUED",
    "SNAPSHOT_NOT_FOUND",
    "SUCCEEDED",
    "TABLE_GZIP_KEY",
    "TABLE_KEY",
    "WORKLOAD_NOT_FOUND",
    "Cell",
    "CellState",
    "Expansion",
    "Plan",
    "Problem",
    "SweepReport",
    "Table",
    "TableError",
    "Variant",
    "build_table",
    "cell_hash",
    "cell_run",
    "cell_states",
    "counts",
    "derived_workload",
    "derived_workload_name",
    "expand",
    "finished",
    "matches",
    "owned_by",
    "plan",
    "read_table",
    "run_hash",
    "run_name",
    "run_phase",
    "sweep_status",
    "table_config_map",
    "table_config_map_name",
    "variant_hash",
]
