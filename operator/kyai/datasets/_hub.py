"""Downloading a built-in's native file from the HuggingFace Hub.

The downloader is a plain callable so that callers and tests can replace it
(``load_dataset(..., downloader=fake)``); nothing here runs at import time and
``huggingface_hub`` is imported only when the default downloader is called. The token, when
needed (GPQA is gated), comes from the ``HF_TOKEN`` environment variable, which
``huggingface_hub`` reads itself; this module never reads, logs or passes it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from ._errors import DatasetError, DatasetUnavailableError

__all__ = ["Downloader", "hf_download", "hf_uri", "revision_from_cache_path", "route_hub_logs"]

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


def hf_download(*, repo_id: str, filename: str, revision: str | None) -> Path:
    """Download with ``huggingface_hub.hf_hub_download(repo_type="dataset")`` (cached)."""
    route_hub_logs()
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = hf_uri(repo_id, filename, revision)
    try:
        local = hf_hub_download(
            repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision
        )
    except GatedRepoError:
        raise DatasetUnavailableError(
            f"The HuggingFace dataset {repo_id} is gated: accept its terms on its Hub page with "
            "your account, then set the HF_TOKEN environment variable to a token of that "
            "account (or use a local copy: --dataset-file for kyai, spec.source for a Snapshot).",
            path=where,
        ) from None
    except RepositoryNotFoundError:
        raise DatasetUnavailableError(
            f"The HuggingFace dataset {repo_id} was not found or is not accessible; private or "
            "gated datasets need the HF_TOKEN environment variable.",
            path=where,
        ) from None
    except RevisionNotFoundError:
        raise DatasetError(
            f"The revision {revision!r} does not exist in the HuggingFace dataset {repo_id}.",
            path=where,
        ) from None
    except LocalEntryNotFoundError:
        raise DatasetUnavailableError(
            "The file could not be downloaded (is the HuggingFace Hub reachable from here?) and "
            "is not in the local cache; use a local copy of the file instead (--dataset-file "
            "for kyai, spec.source for a Snapshot).",
            path=where,
        ) from None
    except EntryNotFoundError:
        raise DatasetError(
            f"The HuggingFace dataset {repo_id} has no file {filename!r} at this revision.",
            path=where,
        ) from None
    except HfHubHTTPError as exc:
        raise DatasetUnavailableError(
            f"The download from the HuggingFace Hub failed: {exc}", path=where
        ) from None
    except OSError as exc:
        raise DatasetUnavailableError(
            f"The download from the HuggingFace Hub failed: {exc.strerror or exc}.", path=where
        ) from None
    return Path(local)
