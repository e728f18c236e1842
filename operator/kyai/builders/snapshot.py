"""The manifest of a Snapshot's child: the immutable ConfigMap holding its resolved rows."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from kyai.builders._common import child_name, label_value, owner_reference
from kyai.constants import (
    LABEL_COMPONENT,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_SNAPSHOT,
    MANAGER,
)


def config_map_name(snapshot: str) -> str:
    """The ConfigMap holding a Snapshot's resolved rows."""
    return child_name(snapshot, "-rows")


def snapshot_config_map(
    owner: Mapping[str, Any], text: Mapping[str, str], binary: Mapping[str, bytes]
) -> dict[str, Any]:
    """The immutable ConfigMap of a Snapshot: text files in data, compressed ones in binaryData."""
    meta = owner["metadata"]
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {
                LABEL_NAME: "kyai",
                LABEL_COMPONENT: "snapshot",
                LABEL_PART_OF: "kyai-operator",
                LABEL_MANAGED_BY: MANAGER,
                LABEL_SNAPSHOT: label_value(meta["name"]),
            },
            "ownerReferences": [owner_reference(owner)],
        },
        "immutable": True,
        "data": dict(text),
    }
    if binary:
        config_map["binaryData"] = {
            key: base64.b64encode(value).decode("ascii") for key, value in binary.items()
        }
    return config_map
