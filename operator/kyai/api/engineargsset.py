"""EngineArgsSet: a serving engine's flags and environment, shared by Workloads."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from kyai.api._base import KyaiModel, StatusBase
from kyai.engines import ENGINES, framework_list, owned_flags_used
from kyai.engines import canonical_flag as canonical_flag

if TYPE_CHECKING:
    Framework = str
else:  # the engines registry names the frameworks (and so the CRD's enum)
    Framework = Literal[tuple(ENGINES)]

#: Flag values: a scalar, a list (the flag once, then each value) or an object (JSON).
ArgScalar = str | int | float | bool
ArgValue = ArgScalar | list[str | int | float] | dict[str, Any]

#: Flags the operator sets itself, per framework, in their canonical (dashed) form.
OWNED_FLAGS: dict[str, frozenset[str]] = {
    name: engine.owned_flags for name, engine in ENGINES.items()
}

_FLAG = re.compile(r"^-{0,2}[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class EnvVar(KyaiModel):
    """An environment variable of the engine container (literal values only)."""

    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    """The variable's name."""
    value: str = ""
    """Its value."""


class EngineArgsSetSpec(KyaiModel):
    """The engine's flags: copy verified flags from the framework's documentation."""

    framework: Framework = Field(
        description=f"The serving framework these flags are for: {framework_list()}."
    )
    args: Annotated[
        dict[str, Any],
        Field(
            default_factory=dict,
            json_schema_extra={
                "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True}
            },
        ),
    ]
    """Flag → value, without leading dashes (``tensor-parallel-size: 2``; ``_`` and ``-``
    are the same). Each flag is checked against the flag table of the engine version its
    Workloads run (unknown flags, values outside a flag's choices and values of the wrong
    kind are refused) and rendered in the engine's own spelling. ``true`` renders the switch;
    ``false`` its negative form (vLLM's ``--no-X``), nothing when the switch is off by
    default (the status says so), and is refused when the engine cannot turn it off. A list
    renders the flag once followed by each value (or the flag once per value, for options
    the engine repeats); an object renders as JSON (vLLM's ``compilation-config``). Flags the
    operator owns (host, port, model, served model name) are refused."""
    extra_args: list[str] = Field(default_factory=list)
    """Arguments appended verbatim after the generated ones, never checked: the escape hatch
    for what the flag tables cannot express (a flag of a build newer than the tables, an
    engine's positional arguments)."""
    env: list[EnvVar] = Field(default_factory=list)
    """Environment variables of the engine container."""

    @field_validator("args")
    @classmethod
    def _check_args(cls, args: dict[str, Any]) -> dict[str, Any]:
        for name, value in args.items():
            if not _FLAG.match(name):
                raise ValueError(f"args: {name!r} is not a flag name")
            if isinstance(value, list):
                if not all(
                    isinstance(item, str | int | float) and not isinstance(item, bool)
                    for item in value
                ):
                    raise ValueError(f"args.{name}: a list may hold only strings and numbers")
            elif isinstance(value, dict):
                if not all(isinstance(key, str) for key in value):
                    raise ValueError(f"args.{name}: an object's keys must be strings")
            elif value is None or not isinstance(value, str | int | float | bool):
                raise ValueError(
                    f"args.{name}: must be a string, number, boolean, list or object, not "
                    f"{type(value).__name__}"
                )
        return args

    def owned_flags_used(self) -> list[str]:
        """The flags in ``args`` or ``extra_args`` that the operator sets itself."""
        return owned_flags_used(self, OWNED_FLAGS[self.framework])


EngineArgsSetPhase = Literal["Ready", "Invalid"]


class EngineArgsSetStatus(StatusBase):
    """Whether the flags can be used."""

    phase: EngineArgsSetPhase | None = None
    """Ready or Invalid."""
