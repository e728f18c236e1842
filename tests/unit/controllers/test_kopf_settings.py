"""kopf as the operator configures it: storages, server-side selectors, the JSON of watches."""

from __future__ import annotations

import importlib
import json
import logging
import math
from collections.abc import Iterator

import kopf
import pytest

from kyai.constants import GROUP, KINDS, VERSION
from kyai.controllers import _kopf_json, handlers
from kyai.controllers._diffbase import DigestDiffBaseStorage
from kyai.controllers._multinode import (
    KOPF_OBSERVATION_LOGGER,
    LWS_ABSENT,
    LeaderWorkerSetAbsence,
)
from kyai.settings import OperatorSettings


def kinds_with_changing_handlers(registry: kopf.OperatorRegistry) -> set[str]:
    plurals = {names[0]: kind for kind, names in KINDS.items()}
    found = set()
    for handler in registry._changing.get_all_handlers():
        selector = handler.selector
        assert selector is not None and selector.group == GROUP and selector.version == VERSION
        found.add(plurals[str(selector.plural or selector.any_name)])
    return found


def test_the_diff_base_is_kept_for_exactly_the_kinds_with_create_update_handlers() -> None:
    registry = handlers.build_registry(OperatorSettings.from_env())
    assert kinds_with_changing_handlers(registry) == set(handlers.CHANGING_KINDS)
    # Runs are reconciled from their events (no kopf annotations written for them).
    assert "EvaluationRun" not in handlers.CHANGING_KINDS
    assert "EvaluationSweep" not in handlers.CHANGING_KINDS  # nor sweeps (evaluationsweep.py)


def test_an_untracked_kind_costs_no_essence() -> None:
    storage = DigestDiffBaseStorage(prefix="kyai.io", key="x", kinds=("Workload",))
    job = kopf.Body({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                     "spec": {"parallelism": 1}})  # fmt: skip
    assert storage.build(body=job) == {} and storage.fetch(body=job) == {}
    workload = kopf.Body({"kind": "Workload", "metadata": {"name": "w"}, "spec": {"model": "m"}})
    assert "sha256" in storage.build(body=workload)["spec"]


def test_jobs_and_deployments_are_watched_with_the_operators_label_only() -> None:
    from kopf._cogs.structs import references

    settings = kopf.OperatorSettings()
    handlers.configure_kopf(settings)
    for group, plural, kind in (("batch", "jobs", "Job"), ("apps", "deployments", "Deployment")):
        resource = references.Resource(group, "v1", plural, kind=kind, namespaced=True)
        assert list(settings.watching.label_selectors.collect(resource)) == [
            "app.kubernetes.io/managed-by=kyai-operator"
        ]
    for plural in ("evaluationruns", "workloads", "snapshots"):
        resource = references.Resource(GROUP, VERSION, plural, namespaced=True)
        assert list(settings.watching.label_selectors.collect(resource)) == []
    assert isinstance(settings.persistence.diffbase_storage, DigestDiffBaseStorage)


def test_kopf_watch_streams_parse_with_orjson_and_the_same_results() -> None:
    assert _kopf_json.install()
    assert _kopf_json.install()  # twice is fine
    api = importlib.import_module(_kopf_json.KOPF_API_MODULE)
    fast = api.json
    assert isinstance(fast, _kopf_json.FastJson)
    line = '{"type":"ADDED","object":{"metadata":{"name":"é"},"n":[1,2.5,null,true]}}'
    assert fast.loads(line) == json.loads(line)
    # What orjson refuses, json decides, with json's exceptions.
    assert math.isnan(fast.loads('{"x": NaN}')["x"])
    with pytest.raises(json.JSONDecodeError):
        fast.loads("{not json")
    # Everything else is the json module's own.
    assert fast.dumps is json.dumps and fast.JSONDecodeError is json.JSONDecodeError
    assert fast.loads("[1]", parse_int=str) == ["1"]  # options: json itself


@pytest.fixture
def fresh_observation_logger() -> Iterator[logging.Logger]:
    """kopf's observation logger without the filter an earlier configure_kopf attached."""
    logger = logging.getLogger(KOPF_OBSERVATION_LOGGER)

    def strip() -> None:
        for found in [f for f in logger.filters if isinstance(f, LeaderWorkerSetAbsence)]:
            logger.removeFilter(found)

    strip()
    yield logger
    strip()


def test_a_cluster_without_leader_worker_set_is_said_once_at_info(
    fresh_observation_logger: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    from kopf._cogs.structs import references
    from kopf._core.reactor import observation

    handlers.configure_kopf(kopf.OperatorSettings())
    handlers.configure_kopf(kopf.OperatorSettings())  # a second start-up attaches nothing more
    lws = references.Selector("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
    other = references.Selector("example.com", "v1", "foos")
    caplog.set_level(logging.INFO)
    # kopf's own check, as at start-up and at each later rescan (any CRD added or removed).
    for _ in range(3):
        observation._disable_mismatched_selectors(resources=set(), selectors=frozenset({lws}))
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert said == [(logging.INFO, LWS_ABSENT)], said
    assert "multi-node serving" in LWS_ABSENT and "is off until" in LWS_ABSENT
    # Another resource that resolves to nothing is still a warning (without LeaderWorkerSet).
    caplog.clear()
    selectors = frozenset({lws, other})
    observation._disable_mismatched_selectors(resources=set(), selectors=selectors)
    (warning,) = caplog.records
    assert warning.levelno == logging.WARNING and "foos" in warning.getMessage()
    assert "leaderworkerset" not in warning.getMessage()
