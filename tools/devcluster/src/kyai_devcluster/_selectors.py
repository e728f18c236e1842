"""Label and field selectors: the query-string syntax and ``LabelSelector`` objects."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kyai_devcluster._errors import StatusError, bad_request

Obj = dict[str, Any]

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: ``key op values``."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (= and == are In; != is NotIn)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        return False


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; empty matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with ``labels`` is selected."""
        labels = labels or {}
        return all(requirement.matches(labels) for requirement in self.requirements)

    @property
    def empty(self) -> bool:
        """Whether the selector selects everything."""
        return not self.requirements


def _split_terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    terms.append("".join(current))
    return [term for term in terms if term.strip()]


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse the ``labelSelector`` query syntax (``=``, ``==``, ``!=``, ``in``, ``notin``, exists).

    Raises a 400 ``StatusError`` for a selector the API server would reject.
    """
    if not text or not text.strip():
        return LabelSelector()
    requirements: list[Requirement] = []
    for term in _split_terms(text):
        if match := _SET_RE.match(term):
            key, op, raw = match.groups()
            values = tuple(value.strip() for value in raw.split(",") if value.strip())
            if any(not _VALUE_RE.match(value) for value in values):
                raise _unparseable(text, f"invalid label value in {term.strip()!r}")
            requirements.append(Requirement(key, "In" if op == "in" else "NotIn", values))
        elif match := _CMP_RE.match(term):
            key, op, value = match.groups()
            requirements.append(Requirement(key, "NotIn" if op == "!=" else "In", (value,)))
        elif match := _EXISTS_RE.match(term):
            negated, key = match.groups()
            requirements.append(Requirement(key, "DoesNotExist" if negated else "Exists"))
        else:
            raise _unparseable(text, f"cannot parse {term.strip()!r}")
    return LabelSelector(tuple(requirements))


def _unparseable(text: str, detail: str) -> StatusError:
    return bad_request(f"unable to parse requirement: {detail} (in selector {text!r})")


def selector_from_object(selector: Obj | None) -> LabelSelector:
    """Build a selector from a ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``).

    A missing selector selects nothing, as the controllers treat it.
    """
    if selector is None:
        return LabelSelector((Requirement("", "In", ()),))
    requirements = [
        Requirement(key, "In", (str(value),))
        for key, value in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expression in selector.get("matchExpressions") or []:
        requirements.append(
            Requirement(
                str(expression.get("key", "")),
                str(expression.get("operator", "")),
                tuple(str(value) for value in expression.get("values") or []),
            )
        )
    return LabelSelector(tuple(requirements))


def selector_to_string(selector: Obj | None) -> str:
    """Render a ``metav1.LabelSelector`` in query syntax."""
    parts = [
        f"{key}={value}" for key, value in sorted((selector or {}).get("matchLabels", {}).items())
    ]
    for expression in (selector or {}).get("matchExpressions") or []:
        key, op = expression.get("key"), expression.get("operator")
        values = ",".join(expression.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({values})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({values})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


@dataclass(frozen=True)
class FieldRequirement:
    """One term of a field selector."""

    path: str
    equal: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of ``path=value`` / ``path!=value`` terms."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Obj) -> bool:
        """Whether ``obj`` is selected."""
        for requirement in self.requirements:
            actual = field_value(obj, requirement.path)
            if (actual == requirement.value) != requirement.equal:
                return False
        return True

    @property
    def paths(self) -> set[str]:
        """The field paths used."""
        return {requirement.path for requirement in self.requirements}


def field_value(obj: Obj, path: str) -> str:
    """The string form of a dotted field path, as the API server's field sets expose it."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_field_selector(
    text: str | None, *, supported: Callable[[str], bool] | None = None
) -> FieldSelector:
    """Parse the ``fieldSelector`` query syntax (``=``, ``==``, ``!=``, comma-joined).

    ``supported`` tells whether a field path may be selected on; others get a 400 like
    ``field label not supported: spec.foo``.
    """
    if not text or not text.strip():
        return FieldSelector()
    requirements: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term.strip():
            continue
        operator = next((op for op in ("!=", "==", "=") if op in term), None)
        if operator is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        path, value = term.split(operator, 1)
        equal = operator != "!="
        path = path.strip()
        if supported is not None and not supported(path):
            raise bad_request(f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, equal, value.strip()))
    return FieldSelector(tuple(requirements))
