"""EngineArgsSet: a serving engine's flags and environment, shared by Workloads."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from kyai.api._base import KyaiModel, StatusBase
from kyai.engines import ENGINES, framework_list
from kyai.engines import canonical_flag as canonical_flag

if TYPE_CHECKING:
    Framework = str
else:  # the engines registry names the frameworks (and so the CRD's enum)
    Framework = Literal[tuple(ENGINES)]

#: Scalar flag values; ``true`` is a bare flag, ``false`` leaves the flag out.
ArgScalar = str | int | float | bool
ArgValue = ArgScalar | list[str | int | float]

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
    """Flag → value, without leading dashes (``tensor-parallel-size: 2``). ``true`` renders a
    bare flag, ``false`` leaves it out, a list renders the flag once followed by each value.
    Flags the operator owns (host, port, model, served model name) are refused."""
    extra_args: list[str] = Field(default_factory=list)
    """Arguments appended verbatim after the generated ones."""
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
            elif value is None or not isinstance(value, str | int | float | bool):
                raise ValueError(
                    f"args.{name}: must be a string, number, boolean or list, not "
                    f"{type(value).__name__}"
                )
        return args

    def owned_flags_used(self) -> list[str]:
        """The flags in ``args`` or ``extra_args`` that the operator sets itself."""
        owned = OWNED_FLAGS[self.framework]
        used = [name for name in self.args if canonical_flag(name) in owned]
        for arg in self.extra_args:
            if arg.startswith("-") and canonical_flag(arg.split("=", 1)[0]) in owned:
                used.append(arg.split("=", 1)[0])
        return used


EngineArgsSetPhase = Literal["Ready", "Invalid"]


class EngineArgsSetStatus(StatusBase):
    """Whether the flags can be used."""

    phase: EngineArgsSetPhase | None = None
    """Ready or Invalid."""
