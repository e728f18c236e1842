"""The CRDs' CEL validation rules (``x-kubernetes-validations``), evaluated with cel-python.

As in ``k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel``: every rule of a schema node
runs with ``self`` bound to the value there (nodes without a value are skipped); a
*transition rule* (one that mentions ``oldSelf``) runs only on updates, and only where the
old object has a value at the same place (object properties, map keys, and items of
``x-kubernetes-list-type: map`` lists matched by their keys). A false rule is a ``422``
cause worded as the real server words it::

    <Kind>.<group> "<name>" is invalid: spec: Invalid value: "object": <message>

``message`` (default ``failed rule: <rule>``), ``messageExpression`` (when it evaluates to a
non-empty string), ``reason`` (``FieldValueForbidden``/``Required``/``Duplicate``/``Invalid``)
and ``fieldPath`` (relative to the node) are honoured; a root-level rule reports on
``<nil>``, as the real server's nil field path prints. Evaluation errors are reported as
``<error> evaluating rule: <rule>``.

Beyond standard CEL, the most used functions of the Kubernetes CEL libraries are provided:
strings (``lowerAscii``, ``upperAscii``, ``trim``, ``split``, ``join``, ``replace``,
``indexOf``, ``lastIndexOf``, ``substring``, ``charAt``), lists (``isSorted``, ``sum``,
``min``, ``max``, ``indexOf``, ``lastIndexOf``) and regex (``find``, ``findAll``).

Limits: rules are evaluated dynamically (no static type check, no cost budget); rules the
library cannot parse (optional syntax ``?.``), or that call a function that is not there
(``quantity``, ``url``, ``ip``, ``cidr``, ``format``, sets, ...), and ``optionalOldSelf``
rules are logged once and skipped. The CRD itself is not refused for
them, unlike the real server, which compiles every rule when the CRD is written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import celpy
import celpy.celparser
import celpy.evaluation
from celpy import celtypes
from celpy.adapter import json_to_cel

from kyai._json import record_line
from kyai_devcluster._errors import FieldError
from kyai_devcluster._resources import ResourceType

Obj = dict[str, Any]
logger = logging.getLogger("kyai_devcluster.cel")

_OLD_SELF = re.compile(r"\boldSelf\b")
_MISSING = object()


def _index_of(target: Any, item: Any, start: Any = 0) -> Any:
    if isinstance(target, str):
        return celtypes.IntType(str(target).find(str(item), int(start)))
    values = list(target)
    return celtypes.IntType(values.index(item) if item in values else -1)


def _last_index_of(target: Any, item: Any) -> Any:
    if isinstance(target, str):
        return celtypes.IntType(str(target).rfind(str(item)))
    values = list(target)
    return celtypes.IntType(len(values) - 1 - values[::-1].index(item) if item in values else -1)


def _split(text: Any, sep: Any, limit: Any = -1) -> Any:
    count = int(limit)
    if count == 0:
        return celtypes.ListType([])
    parts = str(text).split(str(sep), count - 1 if count > 0 else -1)
    return celtypes.ListType([celtypes.StringType(part) for part in parts])


def _replace(text: Any, old: Any, new: Any, limit: Any = -1) -> Any:
    return celtypes.StringType(str(text).replace(str(old), str(new), int(limit)))


def _substring(text: Any, start: Any, end: Any = None) -> Any:
    value = str(text)
    return celtypes.StringType(value[int(start) : len(value) if end is None else int(end)])


def _find(text: Any, pattern: Any) -> Any:
    match = re.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = -1) -> Any:
    found = [m.group(0) for m in re.finditer(str(pattern), str(text))]
    if int(limit) >= 0:
        found = found[: int(limit)]
    return celtypes.ListType([celtypes.StringType(item) for item in found])


#: Functions of the Kubernetes CEL libraries (k8s.io/apiserver/pkg/cel/library, cel-go ext).
K8S_FUNCTIONS: dict[str, Any] = {
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "split": _split,
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": lambda s, i: celtypes.StringType(str(s)[int(i) : int(i) + 1]),
    "isSorted": lambda items: celtypes.BoolType(
        all(items[i] <= items[i + 1] for i in range(len(items) - 1))
    ),
    "sum": lambda items: sum(items[1:], items[0]) if len(items) else celtypes.IntType(0),
    "min": lambda items: min(items),
    "max": lambda items: max(items),
    "find": _find,
    "findAll": _find_all,
}


#: ``self.a.b`` / ``oldSelf.a`` member chains (method names excluded): what a rule can read.
_CHAIN = re.compile(r"\b(self|oldSelf)((?:\.[A-Za-z_]\w*+(?!\s*\())*)")
#: Outcomes kept (keyed by a digest of what the rule reads).
_CACHE_SIZE = 4096


_HAS = re.compile(r"\bhas\(\s*(self|oldSelf)((?:\.[A-Za-z_]\w*+)+)\s*\)")
Reads = tuple[tuple[str, tuple[str, ...], bool], ...]


def _reads(*texts: str) -> Reads:
    """The member chains on ``self``/``oldSelf`` in CEL source: ``(variable, names, presence)``.

    Everything a rule evaluates descends from one of them, so their values decide its
    outcome; a chain used only as ``has(chain)`` needs only its presence. String literals
    that look like chains only add to the set (still sound).
    """
    counts: dict[tuple[str, tuple[str, ...]], int] = {}
    tested: dict[tuple[str, tuple[str, ...]], int] = {}
    for text in texts:
        for match in _CHAIN.finditer(text):
            chain = (match.group(1), tuple(p for p in match.group(2).split(".") if p))
            counts[chain] = counts.get(chain, 0) + 1
        for match in _HAS.finditer(text):
            chain = (match.group(1), tuple(p for p in match.group(2).split(".") if p))
            tested[chain] = tested.get(chain, 0) + 1
    return tuple(
        (variable, names, tested.get((variable, names), 0) >= count)
        for (variable, names), count in sorted(counts.items())
    )


def _pruned(value: Any, reads: Reads, variable: str) -> Any:
    """``value`` cut down to the member chains of ``variable`` that a rule reads.

    Every access of a rule descends from one of its chains (:func:`_reads`), so the result
    evaluates as the whole would; a chain without members (``self.size()``, ``self[k]``)
    keeps everything, no chain at all nothing.
    """
    chains = [names for var, names, _ in reads if var == variable]
    if not isinstance(value, dict) or any(not names for names in chains):
        return value
    pruned: Obj = {}
    for names in chains:
        source: Any = value
        target = pruned
        for depth, name in enumerate(names):
            if not isinstance(source, dict) or name not in source:
                break
            source = source[name]
            if depth == len(names) - 1 or not isinstance(source, dict):
                target[name] = source  # the end of the chain: all of it
                break
            existing = target.get(name)
            if existing is source:  # another chain kept the whole of it already
                break
            target = target.setdefault(name, {})
    return pruned


@dataclass
class _Compiled:
    program: Any | None
    transition: bool
    problem: str = ""


def _path_text(path: list[str]) -> str:
    """``field.Path.String()``: ``<nil>`` for the root, ``a.b[0][key]`` otherwise."""
    if not path:
        return "<nil>"
    text = ""
    for part in path:
        text += part if part.startswith("[") or not text else f".{part}"
    return text


def _relative_path(path: list[str], field_path: str) -> list[str]:
    """Extend ``path`` with a rule's ``fieldPath`` (``.spec.x``, ``.list[0]``, ``['k']``)."""
    result = list(path)
    for match in re.finditer(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\['([^']*)'\]", field_path):
        name, index, key = match.groups()
        if name is not None:
            result.append(name)
        elif index is not None:
            result.append(f"[{index}]")
        else:
            result.append(f"[{key}]")
    return result


def _rule_text(rule: Obj) -> str:
    """``ruleErrorString``: the message if any, else the rule, trimmed."""
    message = str(rule.get("message") or "").strip()
    return message or str(rule.get("rule") or "").strip()


def _eval_error_text(error: Exception) -> str:
    text = str(error.args[0]) if error.args else str(error)
    member = re.match(r"no such member in mapping: '([^']*)'", text)
    if member:
        return f"no such key: {member.group(1)}"
    return text


class CelValidator:
    """Compiles each rule once and evaluates the rules of a schema against an object."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._compiled: dict[str, _Compiled] = {}
        self._skipped: set[str] = set()
        #: Whether a schema has any rule, by identity (the schema is kept alive with it).
        self._has_rules: dict[int, tuple[Obj, bool]] = {}
        self._outcomes: OrderedDict[str, tuple[str, str] | None] = OrderedDict()
        self._reads: dict[tuple[str, str], Reads] = {}

    def _skip(self, text: str, problem: str) -> None:
        if text not in self._skipped:
            self._skipped.add(text)
            logger.warning("CEL rule skipped (%s): %s", problem, text)

    def _compile(self, text: str) -> _Compiled:
        compiled = self._compiled.get(text)
        if compiled is None:
            transition = bool(_OLD_SELF.search(text))
            try:
                program = self._env.program(self._env.compile(text), functions=K8S_FUNCTIONS)
                compiled = _Compiled(program, transition)
            except (celpy.celparser.CELParseError, celpy.evaluation.CELEvalError) as exc:
                compiled = _Compiled(None, transition, f"cannot compile: {exc}")
            self._compiled[text] = compiled
        if compiled.problem:
            self._skip(text, compiled.problem)
        return compiled

    def _evaluate(self, text: str, activation: Obj) -> tuple[Any, str]:
        """``(result, error)``; an unsupported function marks the rule skipped."""
        compiled = self._compile(text)
        if compiled.program is None:
            return None, "skip"
        try:
            return compiled.program.evaluate(activation), ""
        except celpy.evaluation.CELEvalError as exc:
            message = _eval_error_text(exc)
            if message.startswith("undeclared reference to"):
                compiled.problem = f"cel-python lacks a function: {message.split(' (in ')[0]}"
                compiled.program = None
                self._skip(text, compiled.problem)
                return None, "skip"
            return None, message
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            return None, str(exc)

    def validate(self, rt: ResourceType, obj: Obj, old: Obj | None) -> list[FieldError]:
        """The CEL errors of ``obj`` (an update when ``old`` is given)."""
        schema = rt.schema
        if not isinstance(schema, dict):
            return []
        known = self._has_rules.get(id(schema))
        if known is None or known[0] is not schema:
            known = (schema, "x-kubernetes-validations" in str(schema))
            self._has_rules[id(schema)] = known
        if not known[1]:
            return []
        errors: list[FieldError] = []
        self._walk(schema, obj, old if old is not None else _MISSING, [], errors)
        return errors

    # -- walking the schema and the value together ----------------------------------------

    def _walk(
        self, schema: Obj, value: Any, old: Any, path: list[str], errors: list[FieldError]
    ) -> None:
        rules = schema.get("x-kubernetes-validations")
        if isinstance(rules, list):
            for rule in rules:
                if isinstance(rule, dict) and rule.get("rule"):
                    self._check(rule, schema, value, old, path, errors)
        if isinstance(value, dict):
            properties = schema.get("properties")
            if isinstance(properties, dict):
                for name, sub in properties.items():
                    if name in value and isinstance(sub, dict):
                        sub_old = old.get(name, _MISSING) if isinstance(old, dict) else _MISSING
                        self._walk(sub, value[name], sub_old, [*path, name], errors)
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for key, item in value.items():
                    sub_old = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                    self._walk(extra, item, sub_old, [*path, f"[{key}]"], errors)
        elif isinstance(value, list):
            items = schema.get("items")
            if not isinstance(items, dict):
                return
            keys = schema.get("x-kubernetes-list-map-keys") or []
            olds: dict[tuple[Any, ...], Any] = {}
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
                for item in old:
                    if isinstance(item, dict):
                        olds[tuple(item.get(key) for key in keys)] = item
            for index, item in enumerate(value):
                sub_old = (
                    olds.get(tuple(item.get(key) for key in keys), _MISSING)
                    if isinstance(item, dict) and olds
                    else _MISSING
                )
                self._walk(items, item, sub_old, [*path, f"[{index}]"], errors)

    def _check(
        self,
        rule: Obj,
        schema: Obj,
        value: Any,
        old: Any,
        path: list[str],
        errors: list[FieldError],
    ) -> None:
        text = str(rule["rule"])
        if rule.get("optionalOldSelf"):
            self._skip(text, "optionalOldSelf is not supported")
            return
        compiled = self._compile(text)
        if compiled.program is None or (compiled.transition and old is _MISSING):
            return
        outcome = self._outcome(rule, compiled, value, old)
        if outcome is None:
            return
        kind, message = outcome
        field = _path_text(_relative_path(path, str(rule.get("fieldPath") or "")))
        node_type = str(schema.get("type") or "")
        reason = rule.get("reason") if kind == "fail" else None
        if reason == "FieldValueForbidden":
            errors.append(FieldError.forbidden(field, message))
        elif reason == "FieldValueRequired":
            errors.append(FieldError.required(field, message))
        elif reason == "FieldValueDuplicate":
            errors.append(FieldError.duplicate(field, node_type))
        else:
            errors.append(FieldError.invalid(field, node_type, message))

    def _cache_key(self, rule: Obj, value: Any, old: Any) -> str:
        """A digest of everything the rule (and its message expression) can read."""
        digest = hashlib.sha256()
        digest.update(json.dumps([rule.get("rule"), rule.get("messageExpression")]).encode())
        for variable, names, presence in self._reads_of(rule):
            found = value if variable == "self" else old
            where = ""
            for depth, name in enumerate(names):
                if not isinstance(found, dict) or name not in found:
                    where = f"{depth}:{type(found).__name__}"
                    found = _MISSING
                    break
                found = found[name]
            if found is _MISSING:
                shown = f"\0missing@{where}"
            elif presence:
                shown = "\0present"
            else:
                shown = record_line(found).decode()
            digest.update(f"\0{variable}.{'.'.join(names)}=".encode() + shown.encode())
        return digest.hexdigest()

    def _reads_of(self, rule: Obj) -> Reads:
        """What a rule and its message expression read (:func:`_reads`, once per rule)."""
        expression = str(rule.get("messageExpression") or "")
        reads = self._reads.get((str(rule["rule"]), expression))
        if reads is None:
            reads = _reads(str(rule["rule"]), expression)
            self._reads[(str(rule["rule"]), expression)] = reads
        return reads

    def _outcome(
        self, rule: Obj, compiled: _Compiled, value: Any, old: Any
    ) -> tuple[str, str] | None:
        """None when the rule holds, else ``(kind, message)``; cached on what it reads."""
        key = self._cache_key(rule, value, old)
        if key in self._outcomes:
            self._outcomes.move_to_end(key)
            return self._outcomes[key]
        text = str(rule["rule"])
        reads = self._reads_of(rule)
        # Only what the rule can read is converted (a rule at the root reading self.spec
        # converted the whole object, status and all, on every write).
        activation: Obj = {"self": json_to_cel(_pruned(value, reads, "self"))}
        if compiled.transition:
            activation["oldSelf"] = json_to_cel(_pruned(old, reads, "oldSelf"))
        result, error = self._evaluate(text, activation)
        outcome: tuple[str, str] | None
        if error == "skip":
            return None
        if error:
            outcome = ("error", f"{error} evaluating rule: {_rule_text(rule)}")
        elif result is True or (isinstance(result, celtypes.BoolType) and bool(result)):
            outcome = None
        elif not isinstance(result, bool | celtypes.BoolType):
            outcome = ("error", f"rule did not evaluate to a bool: {_rule_text(rule)}")
        else:
            outcome = ("fail", self._failure_message(rule, activation))
        self._outcomes[key] = outcome
        if len(self._outcomes) > _CACHE_SIZE:
            self._outcomes.popitem(last=False)
        return outcome

    def _failure_message(self, rule: Obj, activation: Obj) -> str:
        message = str(rule.get("message") or "").strip()
        expression = str(rule.get("messageExpression") or "")
        if expression:
            result, error = self._evaluate(expression, activation)
            if not error and isinstance(result, str) and result.strip():
                message = result.strip()
        return message or f"failed rule: {str(rule['rule']).strip()}"
