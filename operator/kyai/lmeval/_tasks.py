"""Offline tasks: a built-in lm-eval task run on local files in the task's native format.

An air-gapped cluster cannot download ``gsm8k`` from the Hub. Given ``{split: path}``, this
writes a task YAML that ``include``s the built-in task's own YAML (its prompts, filters,
metrics and generation settings unchanged) and replaces only where the documents come from:
``dataset_path: json`` with the given ``data_files``. lm-eval finds it through
``--include_path``. The derived task is named ``<task>_local`` (lm-eval refuses two tasks of
one name); :func:`derive_local_task` returns that name.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: Runs in lm-eval's interpreter: each named built-in task's YAML path and the splits it reads
#: (one JSON object per task, on one line; building lm-eval's task index takes seconds).
_PROBE = r"""
import json, sys
from lm_eval.tasks import TaskManager
index = TaskManager().task_index
def info(name):
    entry = index.get(name)
    if entry is None:
        return {"error": "unknown"}
    if isinstance(entry, dict):  # lm-eval < 0.4.10: a dict, the config read from the YAML
        kind, path = str(entry.get("type")), entry.get("yaml_path")
        from lm_eval import utils
        config = utils.load_yaml_config(path, mode="simple") if kind == "task" else {}
    else:  # lm-eval >= 0.4.10: an Entry, its config with the includes resolved
        kind, path, config = entry.kind.name.lower(), entry.yaml_path, entry.cfg or {}
    if kind != "task" or not path or path == -1:
        return {"error": "kind", "kind": kind}
    return {
        "yaml_path": str(path),
        "splits": {k: config.get(k) for k in
                   ("training_split", "validation_split", "test_split", "fewshot_split")},
        "num_fewshot": config.get("num_fewshot"),
    }
print(json.dumps({name: info(name) for name in sys.argv[1:]}))
"""


class TaskError(ValueError):
    """A task cannot be derived; the message names the task or the split at fault."""


@dataclass(frozen=True)
class LocalTask:
    """A derived offline task: its name, the folder for ``--include_path``, its YAML."""

    name: str
    include_path: Path
    yaml_path: Path
    base: str


class _TaglessLoader(yaml.SafeLoader):
    """Reads lm-eval task YAML without running its ``!function`` tags (they read as None)."""


_TaglessLoader.add_multi_constructor("!", lambda loader, suffix, node: None)

_SPLIT_KEYS = ("training_split", "validation_split", "test_split", "fewshot_split")


def _read_yaml(path: Path) -> dict[str, Any] | None:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaglessLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def _resolved(path: Path, depth: int = 0) -> dict[str, Any] | None:
    """A task YAML with its ``include`` chain merged (the including file wins)."""
    data = _read_yaml(path)
    if data is None or depth > 8:
        return None
    merged: dict[str, Any] = {}
    includes = data.get("include")
    for include in includes if isinstance(includes, list) else [includes] if includes else []:
        parent = _resolved(
            (path.parent / str(include)) if not Path(str(include)).is_absolute() else Path(include),
            depth + 1,
        )
        if parent is None:
            return None
        merged.update(parent)
    merged.update({key: value for key, value in data.items() if key != "include"})
    return merged


def find_task_yaml(task: str) -> dict[str, object] | None:
    """The built-in task's YAML path and splits, read from lm-eval's files.

    No import of lm-eval (which takes seconds); None when unsure, and then
    :func:`probe_task` asks lm-eval itself.
    """
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tasks"
    pattern = re.compile(rf"^task:\s*['\"]?{re.escape(task)}['\"]?\s*$", re.MULTILINE)
    found = []
    for path in root.rglob("*.yaml"):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if pattern.search(text):
            found.append(path)
    if len(found) != 1:
        return None
    config = _resolved(found[0])
    if config is None or config.get("task") != task or "class" in config:
        return None
    return {
        "yaml_path": str(found[0]),
        "splits": {key: config.get(key) for key in _SPLIT_KEYS},
        "num_fewshot": config.get("num_fewshot"),
    }


def probe_task(task: str, *, python: Sequence[str] | None = None) -> dict[str, object]:
    """What lm-eval knows of a built-in task (its YAML path and splits)."""
    if python is None:
        found = find_task_yaml(task)
        if found is not None:
            return found
    return probe_tasks([task], python=python)[task]


def probe_tasks(
    tasks: Sequence[str], *, python: Sequence[str] | None = None
) -> dict[str, dict[str, object]]:
    """What lm-eval knows of each built-in task, asked in one lm-eval interpreter.

    Raises :class:`TaskError` naming the first task lm-eval does not have, or that is a group
    or a tag rather than a single task.
    """
    command = [*(python or (sys.executable,)), "-c", _PROBE, *tasks]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise TaskError(
            f"cannot ask lm-eval about {', '.join(map(repr, tasks))}: {' / '.join(tail)}"
        )
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for task in tasks:
        info = answers[task]
        if info.get("error") == "unknown":
            raise TaskError(f"task {task!r}: lm-eval has no such task")
        if info.get("error") == "kind":
            raise TaskError(
                f"task {task!r} is a {info.get('kind')}, not a single task: --data-file derives "
                "single tasks only (run each subtask on its own)"
            )
    return {task: dict(answers[task]) for task in tasks}


def derive_local_task(
    task: str,
    data_files: Mapping[str, str | Path],
    directory: str | Path,
    *,
    num_fewshot: int | None = None,
    python: Sequence[str] | None = None,
) -> LocalTask:
    """Write ``<directory>/<task>_local.yaml`` reading ``data_files`` ({split: path}).

    Every split the built-in task reads must be given, except its few-shot split when
    ``num_fewshot`` is 0 (then few-shot examples are drawn from nowhere: the derived task's
    ``fewshot_split`` points at the test split, from which zero examples are taken).
    """
    if not data_files:
        raise TaskError("--data-file: give at least one SPLIT=PATH")
    files: dict[str, str] = {}
    for split, path in data_files.items():
        resolved = Path(path).resolve()
        if not resolved.is_file():
            raise TaskError(f"--data-file {split}={path}: no such file")
        files[split] = str(resolved)
    info = probe_task(task, python=python)
    splits = info.get("splits")
    assert isinstance(splits, dict)
    test = splits.get("test_split") or splits.get("validation_split")
    if not test:
        raise TaskError(f"task {task!r} names no test or validation split")
    shots = num_fewshot if num_fewshot is not None else info.get("num_fewshot")
    overrides: dict[str, object] = {}
    for role, split in splits.items():
        if not split or split in files:
            continue
        if role == "fewshot_split" and not shots:
            overrides["fewshot_split"] = test
            continue
        if role in ("training_split", "validation_split") and role != "fewshot_split":
            overrides[role] = None
            continue
        raise TaskError(
            f"task {task!r} reads its {role.replace('_', ' ')} {split!r}: add --data-file "
            f"{split}=PATH" + (" (or --num-fewshot 0)" if role == "fewshot_split" else "")
        )
    if test not in files:
        raise TaskError(f"task {task!r} is scored on split {test!r}: add --data-file {test}=PATH")
    name = f"{task}_local"
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    document: dict[str, object] = {
        "include": str(info["yaml_path"]),
        "task": name,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
        **overrides,
    }
    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return LocalTask(name=name, include_path=out, yaml_path=path, base=task)
