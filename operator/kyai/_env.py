"""How settings read from environment variables are parsed (the operator's and the gateway's).

Both settings models take their values as strings from ``KYAI_*`` variables; these are the
``mode="before"`` (or plain) field-validator bodies they share.
"""

from __future__ import annotations

import ipaddress
import json


def ip_address(value: str) -> str:
    """``value`` when it is an IPv4 or IPv6 address (a bind address), else ValueError."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address (e.g. 0.0.0.0, 127.0.0.1 or ::)"
        ) from None
    return value


def comma_separated(value: object) -> object:
    """A variable's ``a, b,c`` as the tuple ``("a", "b", "c")``; other values unchanged."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def json_object(value: object, example: str = "") -> object:
    """A variable's JSON text parsed (blank: ``{}``); other values unchanged.

    ``example``, when given, ends the error message: ``not JSON (…): give <example>``.
    """
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except ValueError as exc:
        if example:
            raise ValueError(f"not JSON ({exc}): give {example}") from None
        raise ValueError(f"not JSON: {exc}") from None
