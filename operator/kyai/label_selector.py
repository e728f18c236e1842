"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``), evaluated on labels.

The semantics of ``metav1.LabelSelector``: every ``matchLabels`` pair and every expression
must hold; an empty selector selects everything. The operator (which runs may use the default
judge) and the judge gateway (which callers it lets in) both check a namespace's labels
against ``defaultJudge.namespaceSelector`` with it, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


class SelectorRequirement(BaseModel):
    """One ``matchExpressions`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1)
    operator: Operator
    values: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _values(self) -> SelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"matchExpressions key {self.key!r}: {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"matchExpressions key {self.key!r}: {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values


class LabelSelector(BaseModel):
    """A ``metav1.LabelSelector``: ``matchLabels`` and ``matchExpressions`` (camelCase keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: tuple[SelectorRequirement, ...] = Field(default=(), alias="matchExpressions")

    @property
    def empty(self) -> bool:
        """An empty selector selects every object."""
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)

    def describe(self) -> str:
        """The selector in ``kubectl``'s ``-l`` syntax, for messages."""
        parts = [f"{key}={value}" for key, value in sorted(self.match_labels.items())]
        for requirement in self.match_expressions:
            if requirement.operator == "Exists":
                parts.append(requirement.key)
            elif requirement.operator == "DoesNotExist":
                parts.append(f"!{requirement.key}")
            else:
                word = "in" if requirement.operator == "In" else "notin"
                parts.append(f"{requirement.key} {word} ({','.join(requirement.values)})")
        return ",".join(parts) or "(everything)"
