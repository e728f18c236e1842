"""Fixtures the unit tests of several packages share."""

from __future__ import annotations

import socket
from typing import Any

import pytest


@pytest.fixture
def no_such_host(monkeypatch: pytest.MonkeyPatch) -> str:
    """``no-such-host.invalid`` has no address (the resolver's own error); others resolve."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "no-such-host.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return "no-such-host.invalid"
