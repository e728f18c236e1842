"""Downloading a built-in's native file from the HuggingFace Hub.

The downloader is a plain callable so that callers and tests can replace it
(``load_dataset(..., downloader=fake)``); nothing here runs at import time and
``huggingface_hub`` is imported only when the default downloader is called. The token, when
needed (GPQA is gated), comes from the ``HF_TOKEN`` environment variable, which
``huggingface_hub`` reads itself; this module never reads, logs or passes it.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from ._errors import DatasetError, DatasetUnavailableError
from ._failures import SourceFailure, failure_of

__all__ = [
    "DEFAULT_ENDPOINT",
    "Downloader",
    "hf_cached",
    "hf_download",
    "hf_uri",
    "hub_error",
    "hub_host",
    "revision_from_cache_path",
    "route_hub_logs",
]

#: The Hub's address when ``HF_ENDPOINT`` names no mirror.
DEFAULT_ENDPOINT = "https://huggingface.co"

_COMMIT = re.compile(r"[0-9a-f]{40}")


class Downloader(Protocol):
    """Fetches one file of a HuggingFace dataset repository and returns its local path."""

    def __call__(self, *, repo_id: str, filename: str, revision: str | None) -> str | Path:
        """Download ``filename`` of dataset repo ``repo_id`` at ``revision`` (None: main)."""
        ...


def hf_uri(repo_id: str, filename: str, revision: str | None) -> str:
    """``hf://<repo>/<file>@<revision>``, the ``source`` of a downloaded built-in."""
    return f"hf://{repo_id}/{filename}@{revision or 'main'}"


def revision_from_cache_path(path: Path) -> str | None:
    """The commit hash in a Hub cache path (``.../snapshots/<commit>/<file>``), if any."""
    parts = path.parts
    for position, part in enumerate(parts[:-1]):
        if part == "snapshots" and _COMMIT.fullmatch(parts[position + 1]):
            return parts[position + 1]
    return None


def route_hub_logs() -> None:
    """``huggingface_hub``'s log lines through the process's own handlers only.

    The library adds a handler of its own to its root logger when imported, and still lets
    records propagate: every retry warning was printed twice, once plain and once through
    the CLI's or the operator's formatter (which also redacts). Its handlers go; the records
    reach the root logger's handlers as every other library's do.
    """
    import logging

    import huggingface_hub.utils.logging  # noqa: F401  (adds the handler being removed)

    hub = logging.getLogger("huggingface_hub")
    for handler in list(hub.handlers):
        hub.removeHandler(handler)
    hub.propagate = True


def hub_host() -> str | None:
    """The host the Hub client connects to itself, to look its name up first; else None.

    ``HF_ENDPOINT``'s host (default ``huggingface.co``), as ``huggingface_hub`` reads it;
    None in offline mode (``HF_HUB_OFFLINE``: nothing is looked up) or behind an HTTP(S)
    proxy for that host (the proxy resolves names, not this process).
    """
    if os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE"):
        return None
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    parts = urlsplit(endpoint)
    host = parts.hostname
    if not host:
        return None
    proxies = urllib.request.getproxies()
    proxied = proxies.get(parts.scheme) or proxies.get("all")
    if proxied and not urllib.request.proxy_bypass(host):
        return None
    return host


def hf_download(*, repo_id: str, filename: str, revision: str | None) -> Path:
    """Download with ``huggingface_hub.hf_hub_download(repo_type="dataset")`` (cached)."""
    return _download(repo_id=repo_id, filename=filename, revision=revision, cached_only=False)


def hf_cached(*, repo_id: str, filename: str, revision: str | None) -> Path:
    """The file from the local Hub cache alone (no network); as :func:`hf_download` fails."""
    return _download(repo_id=repo_id, filename=filename, revision=revision, cached_only=True)


def _download(*, repo_id: str, filename: str, revision: str | None, cached_only: bool) -> Path:
    route_hub_logs()
    from huggingface_hub import hf_hub_download

    try:
        if cached_only:
            local = hf_hub_download(
                repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision,
                local_files_only=True,
            )  # fmt: skip
        else:
            local = hf_hub_download(
                repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision
            )
    except Exception as exc:
        raise hub_error(exc, repo_id=repo_id, filename=filename, revision=revision) from None
    return Path(local)


def hub_error(
    error: Exception, *, repo_id: str, filename: str, revision: str | None
) -> DatasetError:
    """The :class:`DatasetError` for what ``hf_hub_download`` raised, with the Hub's words.

    Its ``failure`` says why (:func:`~kyai.datasets._failures.failure_of`). A revision or file
    the dataset does not have is the caller's input (:class:`DatasetError`); a dataset not
    found, gated or refused, a Hub that cannot be reached: :class:`DatasetUnavailableError`
    (access or a network can change). Anything else the Hub client raised is re-raised.
    """
    from huggingface_hub import errors

    where = hf_uri(repo_id, filename, revision)
    failure = failure_of(error)
    said = f" huggingface_hub said: {failure.said}" if failure.said else ""
    unavailable: type[DatasetError] = DatasetUnavailableError
    if isinstance(error, errors.GatedRepoError):
        detail = (
            f"The HuggingFace dataset {repo_id} is gated: accept its terms on its Hub page with "
            "your account, then set the HF_TOKEN environment variable to a token of that "
            "account (or use a local copy: --dataset-file for kyai, spec.source for a Snapshot)."
        )
    elif isinstance(error, errors.RepositoryNotFoundError):
        detail = (
            f"The HuggingFace dataset {repo_id} was not found or is not accessible; private or "
            "gated datasets need the HF_TOKEN environment variable."
        )
    elif isinstance(error, errors.RevisionNotFoundError):
        detail = f"The revision {revision!r} does not exist in the HuggingFace dataset {repo_id}."
        unavailable = DatasetError
    elif isinstance(error, errors.LocalEntryNotFoundError):
        detail = _not_fetched(failure, repo_id)
    elif isinstance(error, errors.EntryNotFoundError):
        detail = f"The HuggingFace dataset {repo_id} has no file {filename!r} at this revision."
        unavailable = DatasetError
    elif isinstance(error, errors.HfHubHTTPError):
        detail, said = f"The download from the HuggingFace Hub failed: {failure.said}", ""
    elif isinstance(error, OSError):
        why = error.strerror or error
        detail, said = f"The download from the HuggingFace Hub failed: {why}.", ""
    else:
        raise error
    return unavailable(detail + said, path=where, failure=failure)


def _not_fetched(failure: SourceFailure, repo_id: str) -> str:
    """Why a file is neither downloaded nor cached, as the cause the Hub client hid says."""
    local_copy = (
        "use a local copy of the file instead (--dataset-file for kyai, spec.source for a Snapshot)"
    )
    if failure.kind == "forbidden":
        return (
            f"The HuggingFace Hub refused the dataset {repo_id} (a token without access to it, "
            f"or none: set HF_TOKEN), and the file is not in the local cache; or {local_copy}."
        )
    if failure.kind == "unreachable":
        host = failure.host or "the HuggingFace Hub"
        return (
            f"The host {host} cannot be resolved (DNS) and the file is not in the local cache; "
            f"check the name (HF_ENDPOINT) and the name servers, or {local_copy}."
        )
    return (
        "The file could not be downloaded (is the HuggingFace Hub reachable from here?) and "
        f"is not in the local cache; {local_copy}."
    )
