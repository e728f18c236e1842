"""Why a dataset's source could not be fetched, sorted by what trying again can change.

A download fails for one of four reasons, told apart from what was raised (the HuggingFace
Hub client's errors, ``httpx``'s, the resolver's) or from an HTTP status:

* ``not-found``: the server answered that it is not there (HTTP 404 or 410; the Hub's
  ``RepositoryNotFoundError``, ``RevisionNotFoundError``, ``EntryNotFoundError``). Trying
  again changes nothing until someone puts it there or corrects the name;
* ``forbidden``: the server refused (HTTP 401 or 403; the Hub's ``GatedRepoError``, a
  disabled repository): a token, an accepted licence or a permission is missing;
* ``unreachable``: the host has no address (the resolver's ``gaierror``: an unknown host, or a
  name server that does not answer), which may be a passing DNS problem;
* ``unavailable``: anything else (5xx, 429, time-outs, refused or reset connections, offline
  mode): worth trying again as it is.

:attr:`SourceFailure.said` keeps the server's (or resolver's) own words on one line, with
the HuggingFace token and any user:password of a URL taken out.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["SourceFailure", "failure_of", "failure_of_status", "one_line"]

SourceFailureKind = Literal["not-found", "forbidden", "unreachable", "unavailable"]

#: HTTP statuses that say the file is not there, or that access is refused.
NOT_FOUND_STATUSES = frozenset({404, 410})
FORBIDDEN_STATUSES = frozenset({401, 403})
#: The longest quote of a server's words kept in a message.
MAX_SAID = 600
#: Environment variables the Hub client reads its token from.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")

_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{10,}\b")
_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)[^/@\s]+@", re.IGNORECASE)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class SourceFailure:
    """Why a source could not be fetched: its kind, the server's own words, the status."""

    kind: SourceFailureKind
    said: str
    """The server's (or resolver's) words, one line, without secrets."""
    status: int | None = None
    """The HTTP status, when one was answered."""
    host: str | None = None
    """The host that could not be resolved (``unreachable``), when known."""

    @property
    def permanent(self) -> bool:
        """Whether only a change by someone (not time) can make the source answer."""
        return self.kind in ("not-found", "forbidden")


def one_line(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_SAID` characters, without secrets.

    The HuggingFace token (the environment's, or anything shaped like one) and the
    ``user:password@`` of a URL are replaced.
    """
    for variable in TOKEN_VARIABLES:
        token = os.environ.get(variable)
        if token and len(token) >= 6:
            text = text.replace(token, "[REDACTED]")
    text = _HF_TOKEN.sub("[REDACTED]", text)
    text = _USERINFO.sub(r"\g<scheme>", text)
    text = _SPACE.sub(" ", text).strip()
    return text if len(text) <= MAX_SAID else text[: MAX_SAID - 1] + "…"


def failure_of_status(status: int, said: str) -> SourceFailure:
    """What an HTTP answer with ``status`` means for a download (``said``: its words)."""
    kind: SourceFailureKind = "unavailable"
    if status in NOT_FOUND_STATUSES:
        kind = "not-found"
    elif status in FORBIDDEN_STATUSES:
        kind = "forbidden"
    return SourceFailure(kind, one_line(said), status)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then its causes (``__cause__``, else ``__context__``), each once."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _status(error: BaseException) -> int | None:
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _hub(error: BaseException) -> SourceFailure | None:
    """The Hub client's own verdict on ``error``; None: none (its cause may have one)."""
    errors = sys.modules.get("huggingface_hub.errors")
    if errors is None:  # never imported: nothing raised can be one of its errors
        return None
    said = one_line(str(error) or type(error).__name__)
    if isinstance(error, errors.LocalEntryNotFoundError):
        return None  # "not in the cache" (an EntryNotFoundError too): its cause says why
    if isinstance(error, errors.OfflineModeIsEnabled):
        return SourceFailure("unavailable", said)
    if isinstance(error, (errors.GatedRepoError, errors.DisabledRepoError)):
        return SourceFailure("forbidden", said, _status(error))
    if isinstance(
        error,
        (errors.RepositoryNotFoundError, errors.RevisionNotFoundError, errors.EntryNotFoundError),
    ):
        return SourceFailure("not-found", said, _status(error))
    if isinstance(error, errors.HfHubHTTPError):
        status = _status(error)
        return failure_of_status(status, said) if status else SourceFailure("unavailable", said)
    return None


def _http(error: BaseException) -> SourceFailure | None:
    """An ``httpx`` (or the Hub's ``httpx2``) status error: by its status."""
    for name in ("httpx", "httpx2"):
        module = sys.modules.get(name)
        if module is not None and isinstance(error, module.HTTPStatusError):
            status = _status(error)
            if status is not None:
                return failure_of_status(status, str(error))
    return None


def _requested_host(error: BaseException) -> str | None:
    """The host of the request an ``httpx`` error was raised for, if it says."""
    try:
        request = getattr(error, "request", None)  # httpx raises RuntimeError when unset
    except RuntimeError:
        return None
    host = getattr(getattr(request, "url", None), "host", None)
    return str(host) if host else None


def failure_of(error: BaseException) -> SourceFailure:
    """What ``error`` (raised by a download) means: the first link of its chain that says.

    The Hub client wraps a failed look-up in ``LocalEntryNotFoundError`` ("not in the local
    cache") whose cause is the real one: a 403, a connection error, the resolver's
    ``gaierror``. Anything unrecognised is ``unavailable`` (tried again).
    """
    host: str | None = None
    for link in _chain(error):
        host = host or _requested_host(link)
        found = _hub(link) or _http(link)
        if found is not None:
            return found
        if isinstance(link, socket.gaierror):
            return SourceFailure("unreachable", one_line(str(link)), host=host)
    return SourceFailure("unavailable", one_line(str(error) or type(error).__name__))
