"""Engine flag tables: every option of an engine version, read from the engine's own parser.

``flags/<engine>/<version>.json`` are written by ``make engine-flags``
(``scripts/engine_flags``; the format is documented in ``scripts/engine_flags/_table.py``):
vLLM from the ``vllm serve`` parser of its wheel, SGLang from ``ServerArgs.add_cli_args``,
TensorRT-LLM from the click options of ``trtllm-serve``'s source. Each names its source.

:func:`plan_flags` turns an EngineArgsSet's ``args`` into the engine's arguments with a
table: a flag is looked up in every spelling the engine accepts (``max_model_len`` finds
``--max-model-len``) and rendered in the engine's own spelling; ``true``/``false`` render the
switch or its negative form (vLLM's ``--no-X``), never nothing where nothing would mean
something else; an unknown flag is refused with the nearest known spelling, a value outside
the flag's choices with the choices.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

#: Kinds of option (see scripts/engine_flags/_table.py).
FlagKind = Literal["boolean", "value", "choice", "list", "any", "optional", "append", "deprecated"]

#: ``v0.32.0``, ``0.5.3.post1-cu129``, ``1.2.0rc6``: the release is the leading X.Y[.Z].
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")

#: Converters of a value the checks understand.
_INTEGER_TYPES = frozenset({"int"})
_FLOAT_TYPES = frozenset({"float"})
_BOOLEAN_VALUE_TYPES = frozenset({"bool", "str2bool", "strtobool"})


def canonical_flag(name: str) -> str:
    """``--max_model_len``, ``max-model-len`` and ``max_model_len`` all become ``max-model-len``."""
    return name.lstrip("-").replace("_", "-").lower()


def release_of(version: str) -> tuple[int, int, int] | None:
    """The (major, minor, patch) release a version or image tag names, or None."""
    match = _RELEASE.match(version.strip())
    if match is None:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def image_version(image: str) -> str | None:
    """The engine version an image's tag names (``vllm/vllm-openai:v0.32.0`` gives 0.32.0).

    None for an image with no tag, a digest only, or a tag that names no release
    (``latest``, ``nightly``).
    """
    reference = image.split("@", 1)[0]
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        return None
    release = release_of(tag)
    return None if release is None else ".".join(map(str, release))


@dataclass(frozen=True)
class Flag:
    """One option of an engine, as its parser declares it."""

    option: str
    """The primary spelling (``--tensor-parallel-size``)."""
    kind: FlagKind
    """What it takes (see scripts/engine_flags/_table.py)."""
    aliases: tuple[str, ...] = ()
    """Other spellings of the same option (``-tp``)."""
    negative: str | None = None
    """For a switch: the spelling that turns it off (``--no-enable-prefix-caching``)."""
    negative_aliases: tuple[str, ...] = ()
    """For a switch: other spellings that turn it off."""
    sets: bool = True
    """For a switch: the value it gives its setting when passed (False for store_false)."""
    default: Any = None
    """The setting's default as the parser declares it (None: none, or computed at start)."""
    type: str | None = None
    """What a value is converted with (``int``, ``float``, ``str``, ``json``, ...)."""
    choices: tuple[Any, ...] | None = None
    """The values the parser accepts, when it restricts them."""
    required: bool = False
    """Whether the parser requires the option."""
    message: str | None = None
    """For a deprecated option: the engine's words refusing it."""

    @property
    def name(self) -> str:
        """The canonical name (``tensor-parallel-size``)."""
        return canonical_flag(self.option)

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every spelling that sets the option (not its negative form)."""
        return (self.option, *self.aliases)

    @property
    def off_by_default(self) -> bool:
        """For a switch without a negative form: whether leaving it out leaves it off."""
        return self.default is None or self.default != self.sets

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> Flag:
        """An entry of a table file."""
        choices = item.get("choices")
        return cls(
            option=str(item["option"]),
            kind=item["kind"],
            aliases=tuple(item.get("aliases") or ()),
            negative=item.get("negative"),
            negative_aliases=tuple(item.get("negative_aliases") or ()),
            sets=bool(item.get("set", True)),
            default=item.get("default"),
            type=item.get("type"),
            choices=None if choices is None else tuple(choices),
            required=bool(item.get("required", False)),
            message=item.get("message"),
        )


@dataclass(frozen=True)
class FlagTable:
    """Every option of one engine version."""

    engine: str
    """vllm, sglang or trtllm."""
    version: str
    """The engine release (``0.32.0``)."""
    source: str
    """Where the options were read (the wheel and parser, or the source and commit)."""
    flags: tuple[Flag, ...]
    """The options, in the parser's order."""
    _by_spelling: dict[str, tuple[Flag, str, bool]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        index: dict[str, tuple[Flag, str, bool]] = {}
        for flag in self.flags:  # long spellings first, so a short alias never hides one
            for spelling in sorted(flag.spellings, key=lambda s: not s.startswith("--")):
                index.setdefault(canonical_flag(spelling), (flag, spelling, False))
        for flag in self.flags:
            if flag.negative is not None:
                for negative in (flag.negative, *flag.negative_aliases):
                    index.setdefault(canonical_flag(negative), (flag, flag.negative, True))
        object.__setattr__(self, "_by_spelling", index)

    @property
    def label(self) -> str:
        """``vllm 0.32.0``."""
        return f"{self.engine} {self.version}"

    def lookup(self, name: str) -> tuple[Flag, str, bool] | None:
        """(flag, the engine's spelling of ``name``, whether it is the negative form)."""
        return self._by_spelling.get(canonical_flag(name))

    def prefixed(self, name: str) -> list[tuple[Flag, str, bool]]:
        """The long options ``name`` is a prefix of, as argparse matches abbreviations.

        One option: ``name`` means it; several: ``name`` is ambiguous (argparse refuses it).
        """
        wanted = canonical_flag(name)
        if not wanted:
            return []
        found: dict[str, tuple[Flag, str, bool]] = {}
        for spelling, (flag, engine_spelling, negated) in self._by_spelling.items():
            if spelling.startswith(wanted) and engine_spelling.startswith("--"):
                found.setdefault(spelling, (flag, engine_spelling, negated))
        return [found[key] for key in sorted(found)]

    def suggest(self, name: str) -> str | None:
        """The known spelling nearest to ``name`` (canonical), if any is near."""
        wanted = canonical_flag(name)
        known = [spelling for spelling in self._by_spelling if len(spelling) > 2]
        found = difflib.get_close_matches(wanted, known, n=1, cutoff=0.75)
        return found[0] if found else None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> FlagTable:
        """A table file's document."""
        return cls(
            engine=str(document["engine"]),
            version=str(document["version"]),
            source=str(document.get("source") or ""),
            flags=tuple(Flag.from_json(item) for item in document["options"]),
        )


@cache
def engine_tables(engine: str) -> tuple[FlagTable, ...]:
    """Every table of ``engine`` shipped with the operator, oldest release first."""
    folder = resources.files("kyai.engines").joinpath("flags", engine)
    if not folder.is_dir():
        return ()
    found = [
        FlagTable.from_json(json.loads(item.read_text(encoding="utf-8")))
        for item in folder.iterdir()
        if item.name.endswith(".json")
    ]
    return tuple(sorted(found, key=lambda table: release_of(table.version) or (0, 0, 0)))


@dataclass(frozen=True)
class TableChoice:
    """The table an engine version is checked against, and how firmly."""

    table: FlagTable | None
    """The table (None: the engine has none)."""
    exact: bool
    """Whether the table is the version's own: findings refuse; else they only warn."""
    version: str | None
    """The version the image names (None: its tag names none)."""

    def describe(self) -> str:
        """``vllm 0.32.0`` or ``vllm 0.29.1 (no table: checked against vllm 0.32.0)``."""
        if self.table is None:
            return "no flag table"
        if self.exact:
            return self.table.label
        asked = (
            f"{self.table.engine} {self.version}"
            if self.version
            else "an image whose tag names no version"
        )
        return f"{asked} (no table of its own: checked against {self.table.label})"


def table_for(engine: str, version: str | None) -> TableChoice:
    """The table of ``engine`` at ``version``: its own (same X.Y.Z release), else the newest."""
    tables = engine_tables(engine)
    if not tables:
        return TableChoice(None, False, version)
    wanted = release_of(version) if version else None
    if wanted is not None:
        for table in tables:
            if release_of(table.version) == wanted:
                return TableChoice(table, True, version)
    return TableChoice(tables[-1], False, version)


# -- checking and rendering -----------------------------------------------------------------


@dataclass
class FlagPlan:
    """An EngineArgsSet's ``args`` as the engine's arguments, with what was found on the way."""

    argv: list[str] = field(default_factory=list)
    """The arguments, flag by flag in the order of ``args``' sorted names."""
    errors: list[str] = field(default_factory=list)
    """Findings that refuse the flags (with an exact table, or when nothing can be rendered)."""
    warnings: list[str] = field(default_factory=list)
    """Findings against a table that is not the version's own."""
    notes: list[str] = field(default_factory=list)
    """What the user should know but need not change (``X: false`` is the default)."""


def _flag_text(name: str) -> str:
    return f"`{name}`"


def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value)


def _render_scalar(value: Any) -> str:
    if isinstance(value, Mapping):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _number_problem(flag: Flag, value: Any) -> str | None:
    """Why ``value`` is not a number the flag's converter takes, or None."""
    if isinstance(value, Mapping | list):
        return None
    text = str(value).strip()
    if flag.type in _INTEGER_TYPES:
        try:
            int(text)
        except ValueError:
            return "an integer"
    elif flag.type in _FLOAT_TYPES:
        try:
            number = float(text)
        except ValueError:
            return "a number"
        if not math.isfinite(number):
            return "a finite number"
    return None


def _choice_problem(flag: Flag, values: Iterable[Any]) -> str | None:
    if flag.choices is None:
        return None
    allowed = [str(choice) for choice in flag.choices]
    for value in values:
        if _render_scalar(value) not in allowed:
            return f"{_value_text(value)} is not one of its choices: {', '.join(allowed)}"
    return None


class _Planner:
    """Checks and renders one ``args`` mapping against a table choice."""

    def __init__(
        self, choice: TableChoice, negative_of: NegativeForm | None, abbreviations: bool
    ) -> None:
        self.choice = choice
        self.table = choice.table
        self.negative_of = negative_of
        self.abbreviations = abbreviations
        self.plan = FlagPlan()
        self.where = choice.describe()

    def problem(self, text: str) -> None:
        if self.table is not None and self.choice.exact:
            self.plan.errors.append(text)
        else:
            self.plan.warnings.append(text)

    def add(self, name: str, value: Any) -> None:
        found = self.table.lookup(name) if self.table is not None else None
        if found is None and self.table is not None and self.abbreviations:
            matches = self.table.prefixed(name)
            if matches:
                found = self.abbreviation(name, matches)
                if found is None:
                    return
        if found is None:
            self.unknown(name, value)
            return
        flag, spelling, negated = found
        if negated:
            if not isinstance(value, bool):
                self.plan.errors.append(
                    f"{_flag_text(name)} is the negative form of {_flag_text(flag.name)}: "
                    f"give {_flag_text(flag.name)} true or false instead"
                )
                return
            value, spelling = not value, flag.option
        if flag.kind == "deprecated":
            refusal = flag.message or f"{flag.option} is deprecated"
            self.problem(f"{_flag_text(name)} is refused by {self.where}: {refusal}")
            return
        if flag.kind == "boolean":
            self.switch(name, flag, spelling, value)
        elif flag.kind in ("list", "any", "append"):
            self.values(name, flag, spelling, value)
        else:
            self.single(name, flag, spelling, value)

    def abbreviation(
        self, name: str, matches: Sequence[tuple[Flag, str, bool]]
    ) -> tuple[Flag, str, bool] | None:
        """What an abbreviated flag means, by argparse's rule.

        One option it is a prefix of: that option, noted; several: refused (None).
        """
        options = sorted({match[1] for match in matches})
        if len(options) == 1:
            flag, spelling, negated = matches[0]
            self.plan.notes.append(
                f"{_flag_text(name)} is taken as {_flag_text(spelling)} ({self.where} accepts "
                "an unambiguous prefix of an option)"
            )
            return flag, spelling, negated
        shown = ", ".join(_flag_text(option) for option in options[:8])
        more = f" and {len(options) - 8} more" if len(options) > 8 else ""
        self.problem(f"{_flag_text(name)} is ambiguous in {self.where}: {shown}{more}")
        return None

    def unknown(self, name: str, value: Any) -> None:
        """A flag the table does not know: refused (or warned), rendered as written."""
        if self.table is not None:
            hint = self.table.suggest(name)
            meant = f": did you mean {_flag_text(hint)}?" if hint else ""
            self.problem(
                f"{_flag_text(name)} is not an option of {self.where}{meant} "
                "(spec.extraArgs passes arguments unchecked)"
            )
        flag = name if name.startswith("-") else f"--{name}"
        if value is True:
            self.plan.argv.append(flag)
        elif value is False:
            negative = self.negative_of(name) if self.negative_of is not None else None
            if negative is None:
                self.plan.errors.append(
                    f"{_flag_text(name)}: false cannot be rendered: {self.where} does not "
                    "say how this flag is turned off; remove it, or pass the engine's own "
                    "spelling in spec.extraArgs"
                )
            else:
                self.plan.argv.append(negative)
        elif isinstance(value, list):
            if value:
                self.plan.argv += [flag, *(_render_scalar(item) for item in value)]
            else:
                self.plan.errors.append(f"{_flag_text(name)} gives an empty list: remove it")
        else:
            self.plan.argv += [flag, _render_scalar(value)]

    def switch(self, name: str, flag: Flag, spelling: str, value: Any) -> None:
        if not isinstance(value, bool):
            self.problem(
                f"{_flag_text(name)} is a switch of {self.where}: give true or false, "
                f"not {_value_text(value)}"
            )
            return
        if value:
            self.plan.argv.append(spelling)
            return
        if flag.negative is not None:
            self.plan.argv.append(flag.negative)
        elif flag.off_by_default:
            self.plan.notes.append(
                f"{_flag_text(name)}: false is {self.where}'s default (nothing passed)"
            )
        else:
            self.plan.errors.append(
                f"{_flag_text(name)}: false cannot be honoured: {self.where} has no way to turn "
                f"it off (no negative form, and it is on by default); remove it"
            )

    def values(self, name: str, flag: Flag, spelling: str, value: Any) -> None:
        if isinstance(value, bool):
            if value is True and flag.kind == "any":
                self.plan.argv.append(spelling)
                return
            self.problem(f"{_flag_text(name)} takes values in {self.where}, not true/false")
            return
        items = list(value) if isinstance(value, list) else [value]
        if not items:
            if flag.kind == "any":
                self.plan.argv.append(spelling)
            else:
                self.plan.errors.append(f"{_flag_text(name)} gives an empty list: remove it")
            return
        self.check_items(name, flag, items)
        if flag.kind == "append":
            for item in items:
                self.plan.argv += [spelling, _render_scalar(item)]
        else:
            self.plan.argv += [spelling, *(_render_scalar(item) for item in items)]

    def single(self, name: str, flag: Flag, spelling: str, value: Any) -> None:
        if isinstance(value, bool):
            if flag.type in _BOOLEAN_VALUE_TYPES:
                self.plan.argv += [spelling, _render_scalar(value)]
            elif flag.kind == "optional" and value:
                self.plan.argv.append(spelling)
            else:
                self.problem(
                    f"{_flag_text(name)} takes a value in {self.where} "
                    f"({flag.type or 'str'}), not {_value_text(value)}"
                )
            return
        if isinstance(value, list):
            self.problem(f"{_flag_text(name)} takes one value in {self.where}, not a list")
            return
        self.check_items(name, flag, [value])
        self.plan.argv += [spelling, _render_scalar(value)]

    def check_items(self, name: str, flag: Flag, items: Sequence[Any]) -> None:
        for item in items:
            if isinstance(item, Mapping) and flag.type in (
                _INTEGER_TYPES | _FLOAT_TYPES | _BOOLEAN_VALUE_TYPES
            ):
                self.problem(f"{_flag_text(name)} takes {flag.type} values, not an object")
                return
            wanted = _number_problem(flag, item)
            if wanted is not None:
                self.problem(
                    f"{_flag_text(name)} takes {wanted} in {self.where}, not {_value_text(item)}"
                )
                return
        choice = _choice_problem(flag, items)
        if choice is not None:
            self.problem(f"{_flag_text(name)}: {choice} ({self.where})")


class NegativeForm:
    """How an engine spells "off" for a flag no table knows (vLLM: ``--no-X``)."""

    def __init__(self, template: str | None) -> None:
        self.template = template

    def __call__(self, name: str) -> str | None:
        """The negative spelling of ``name``, or None when the engine has no convention."""
        if self.template is None:
            return None
        return self.template.format(name=name.lstrip("-"))


def plan_flags(
    args: Mapping[str, Any],
    choice: TableChoice,
    negative_of: NegativeForm | None = None,
    *,
    abbreviations: bool = False,
) -> FlagPlan:
    """``args`` (flag name to value) checked against ``choice``'s table and rendered.

    Flags are rendered sorted by name (the order of ``args`` does not change the command
    line, so it does not roll a Deployment). ``abbreviations``: the engine's parser takes an
    unambiguous prefix of a long option (argparse's default), rendered in full here. See the
    module docstring for the rules.
    """
    planner = _Planner(choice, negative_of, abbreviations)
    for name in sorted(args, key=lambda flag: (flag.lstrip("-"), flag)):
        planner.add(name, args[name])
    return planner.plan
