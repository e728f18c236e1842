"""The objects a sweep owns: its cells' runs, its derived Workloads, its table's ConfigMap.

Every name is deterministic (the sweep's name and the cell's names, cut by the child-name
rule), so an operator restarted between creating an object and recording it finds the object
instead of making a second one. Every object carries a controller owner reference to the
sweep (``blockOwnerDeletion``), so deleting the sweep deletes them.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kyai.api.evaluationsweep import EvaluationSweepSpec, SweepRow
from kyai.builders import child_name, object_meta, spec_hash, standard_labels
from kyai.builders.queue import queue_labels
from kyai.constants import (
    ANNOTATION_SWEEP_ENGINE_ARGS_SET,
    ANNOTATION_SWEEP_RUN_HASH,
    ANNOTATION_SWEEP_SNAPSHOT,
    ANNOTATION_SWEEP_WORKLOAD,
    API_VERSION,
    LABEL_SNAPSHOT,
    LABEL_SWEEP,
    LABEL_SWEEP_CELL,
    LABEL_SWEEP_VARIANT,
    LABEL_WORKLOAD,
)
from kyai.sweeps._cells import Cell, Variant, run_name

#: ``app.kubernetes.io/name`` of a sweep's children.
APP_NAME = "kyai-sweep"
#: The ConfigMap keys of the full table: JSON, or gzip-compressed JSON in binaryData.
TABLE_KEY = "table.json"
TABLE_GZIP_KEY = "table.json.gz"
#: Tables whose JSON is larger than this go compressed into binaryData.
TABLE_PLAIN_LIMIT_BYTES = 256 * 1024


def _meta(sweep: Mapping[str, Any]) -> tuple[str, str]:
    metadata = sweep.get("metadata") or {}
    return str(metadata.get("name", "")), str(metadata.get("namespace", ""))


def owned_by(obj: Mapping[str, Any], sweep: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s controller owner reference is the sweep (same uid)."""
    uid = (sweep.get("metadata") or {}).get("uid")
    for reference in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if reference.get("controller") and reference.get("uid") == uid:
            return True
    return False


def run_hash(spec: EvaluationSweepSpec) -> str:
    """The hash of the spec.run block (as written): runs record the one they were made from."""
    return spec_hash(spec.run.cell_spec())


def _cell_annotations(cell: Cell) -> dict[str, str]:
    annotations = {
        ANNOTATION_SWEEP_WORKLOAD: cell.workload,
        ANNOTATION_SWEEP_SNAPSHOT: cell.snapshot,
    }
    if cell.engine_args_set is not None:
        annotations[ANNOTATION_SWEEP_ENGINE_ARGS_SET] = cell.engine_args_set
    return annotations


def cell_run(sweep: Mapping[str, Any], spec: EvaluationSweepSpec, cell: Cell) -> dict[str, Any]:
    """The EvaluationRun of ``cell``: spec.run as written plus the cell's refs.

    Labels: ``kyai.io/sweep`` (the sweep), ``kyai.io/sweep-cell`` (the cell's hash),
    ``kyai.io/sweep-variant`` (with a derived Workload), ``kyai.io/workload`` and
    ``kyai.io/snapshot``, and the sweep's Kueue labels (``kueue.x-k8s.io/queue-name``,
    ``kueue.x-k8s.io/priority-class``); annotations: the cell's names and the run block's
    hash.
    """
    name, namespace = _meta(sweep)
    extra = {
        LABEL_SWEEP: name,
        LABEL_SWEEP_CELL: cell.hash,
        LABEL_WORKLOAD: cell.candidate,
        LABEL_SNAPSHOT: cell.snapshot,
    }
    if cell.variant is not None:
        extra[LABEL_SWEEP_VARIANT] = cell.variant.hash
    labels = standard_labels(name=APP_NAME, instance=name, component="cell", extra=extra)
    labels.update(queue_labels(sweep))
    annotations = {**_cell_annotations(cell), ANNOTATION_SWEEP_RUN_HASH: run_hash(spec)}
    return {
        "apiVersion": API_VERSION,
        "kind": "EvaluationRun",
        "metadata": object_meta(
            name=run_name(name, cell),
            namespace=namespace,
            labels=labels,
            owner=sweep,
            annotations=annotations,
        ),
        "spec": {
            **spec.run.cell_spec(),
            "workloadRef": {"name": cell.candidate},
            "snapshotRef": {"name": cell.snapshot},
        },
    }


def derived_workload(
    sweep: Mapping[str, Any], variant: Variant, base: Mapping[str, Any]
) -> dict[str, Any]:
    """The Workload of ``variant``: the base Workload's spec with the variant's set.

    Same model, image, resources, placement, cache and probes; ``engineArgsSetRef`` names
    the variant's EngineArgsSet. The base's labels and annotations are not copied (a GitOps
    tool's tracking label would claim the derived Workload); it carries the sweep's labels,
    and the sweep's Kueue labels (else the base's: its GPUs wait in the same queue).
    """
    name, namespace = _meta(sweep)
    spec = copy.deepcopy(dict(base.get("spec") or {}))
    spec["engineArgsSetRef"] = {"name": variant.engine_args_set}
    labels = standard_labels(
        name=APP_NAME,
        instance=name,
        component="workload",
        extra={LABEL_SWEEP: name, LABEL_SWEEP_VARIANT: variant.hash},
    )
    labels.update(queue_labels(sweep) or queue_labels(base))
    annotations = {
        ANNOTATION_SWEEP_WORKLOAD: variant.workload,
        ANNOTATION_SWEEP_ENGINE_ARGS_SET: variant.engine_args_set,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": object_meta(
            name=variant.name,
            namespace=namespace,
            labels=labels,
            owner=sweep,
            annotations=annotations,
        ),
        "spec": spec,
    }


def table_config_map_name(sweep: str) -> str:
    """``<sweep>-table``, cut by the child-name rule."""
    return child_name(sweep, "-table")


def table_json(rows: Sequence[SweepRow]) -> bytes:
    """The full table as JSON (``{"rows": [...]}``, camelCase as in status)."""
    payload = {"rows": [row.to_k8s() for row in rows]}
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def table_config_map(sweep: Mapping[str, Any], rows: Sequence[SweepRow]) -> dict[str, Any]:
    """The ConfigMap holding the full table.

    ``data.table.json`` when its JSON is at most 256 KiB, else ``binaryData.table.json.gz``
    (gzip without a timestamp, so equal tables give equal bytes).
    """
    name, namespace = _meta(sweep)
    text = table_json(rows)
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(
            name=table_config_map_name(name),
            namespace=namespace,
            labels=standard_labels(
                name=APP_NAME, instance=name, component="table", extra={LABEL_SWEEP: name}
            ),
            owner=sweep,
        ),
    }
    if len(text) <= TABLE_PLAIN_LIMIT_BYTES:
        config_map["data"] = {TABLE_KEY: text.decode()}
    else:
        packed = gzip.compress(text, mtime=0)
        config_map["binaryData"] = {TABLE_GZIP_KEY: base64.b64encode(packed).decode()}
    return config_map


class TableError(ValueError):
    """A table ConfigMap that cannot be read; the message says why."""


def read_table(config_map: Mapping[str, Any]) -> list[SweepRow]:
    """The rows of a table ConfigMap (:func:`table_config_map`), in table order."""
    where = f"ConfigMap {(config_map.get('metadata') or {}).get('name', '')}"
    data = config_map.get("data") or {}
    binary = config_map.get("binaryData") or {}
    try:
        if TABLE_KEY in data:
            payload = json.loads(data[TABLE_KEY])
        elif TABLE_GZIP_KEY in binary:
            payload = json.loads(gzip.decompress(base64.b64decode(binary[TABLE_GZIP_KEY])))
        else:
            raise TableError(f"{where}: neither data.{TABLE_KEY} nor binaryData.{TABLE_GZIP_KEY}")
        return [SweepRow.model_validate(row) for row in payload["rows"]]
    except TableError:
        raise
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise TableError(f"{where}: unreadable table: {exc}") from exc
