"""kopf's diff base is a digest: small whatever the spec, changed by any spec change only."""

from __future__ import annotations

import json
from typing import Any

import kopf

from kyai.constants import KOPF_PREFIX
from kyai.controllers._diffbase import DigestDiffBaseStorage

KEY = f"{KOPF_PREFIX}/last-handled-configuration"


def snapshot(rows: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "kyai.io/v1alpha1",
        "kind": "Snapshot",
        "metadata": {"name": "big", "namespace": "n", "labels": {"team": "a"}},
        "spec": {
            "source": {
                "rows": [
                    {"instruction": f"Question number {i}?", "groundTruthResponse": f"{i}"}
                    for i in range(rows)
                ]
            }
        },
        "status": {"phase": "Ready"},
    }
    body.update(extra)
    return body


def stored(storage: DigestDiffBaseStorage, body: dict[str, Any]) -> str:
    patch = kopf.Patch()
    essence = storage.build(body=kopf.Body(body))
    storage.store(body=kopf.Body(body), patch=patch, essence=essence)
    value: str = patch["metadata"]["annotations"][KEY]
    return value


def test_the_stored_diff_base_is_a_digest_not_a_copy() -> None:
    storage = DigestDiffBaseStorage(prefix=KOPF_PREFIX, key="last-handled-configuration")
    big = snapshot(1000)
    value = stored(storage, big)
    assert len(value) < 100 < len(json.dumps(big["spec"])) // 100
    # kopf reads back what it stored and compares it with a fresh build: equal = no change.
    with_base = snapshot(1000)
    with_base["metadata"]["annotations"] = {KEY: value}
    assert storage.fetch(body=kopf.Body(with_base)) == storage.build(body=kopf.Body(with_base))


def test_spec_label_and_annotation_changes_change_it_status_does_not() -> None:
    storage = DigestDiffBaseStorage(prefix=KOPF_PREFIX, key="last-handled-configuration")
    base = storage.build(body=kopf.Body(snapshot(3)))
    assert storage.build(body=kopf.Body(snapshot(3, status={"phase": "Failed"}))) == base
    assert storage.build(body=kopf.Body(snapshot(4))) != base
    relabelled = snapshot(3)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert storage.build(body=kopf.Body(relabelled)) != base
    annotated = snapshot(3)
    annotated["metadata"]["annotations"] = {"note": "x"}
    assert storage.build(body=kopf.Body(annotated)) != base
    # kubectl's own copy and kopf's annotations do not count.
    applied = snapshot(3)
    applied["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        KEY: '{"spec":{"sha256":"0"}}\n',
    }
    assert storage.build(body=kopf.Body(applied)) == base
