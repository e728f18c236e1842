"""Label selectors as Kubernetes evaluates them (metav1.LabelSelector), on listed objects."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyai.api.evaluationsweep import LabelSelector


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """The object's labels (an object without labels has none)."""
    return dict((obj.get("metadata") or {}).get("labels") or {})


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every requirement of ``selector``.

    ``matchLabels`` k: v is ``k In (v)``; ``In``: the key is present with one of the values;
    ``NotIn``: the key is absent or its value is none of them; ``Exists`` / ``DoesNotExist``:
    the key is present / absent. An empty selector matches everything.
    """
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or ():
        present = requirement.key in labels
        found = labels.get(requirement.key)
        values = requirement.values or []
        if requirement.operator == "In" and not (present and found in values):
            return False
        if requirement.operator == "NotIn" and present and found in values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True
