"""What a judge worker's pod needs to call the gateway (for the operator's Job builder).

The pod mounts a projected ServiceAccount token for the gateway's audience (not the API
server's): the kubelet writes it at ``TOKEN_MOUNT_PATH/token`` and replaces it at 80 % of its
lifetime, so a worker reads the file for every request (or whenever it changed). The API
server refuses ``expirationSeconds`` below 600.
"""

from __future__ import annotations

from typing import Any

from kyai.constants import MIN_PROJECTED_TOKEN_SECONDS
from kyai.gateway._settings import DEFAULT_AUDIENCE

#: Where a worker pod gets its gateway token (the file ``token`` in it).
TOKEN_MOUNT_PATH = "/var/run/secrets/kyai.io/judge-gateway"
TOKEN_VOLUME = "judge-gateway-token"

#: The shortest lifetime the API server issues a projected token for (seconds).
MIN_TOKEN_EXPIRATION_SECONDS = MIN_PROJECTED_TOKEN_SECONDS


def token_volume(
    *, audience: str = DEFAULT_AUDIENCE, expiration_seconds: int = MIN_TOKEN_EXPIRATION_SECONDS
) -> dict[str, Any]:
    """The projected volume holding a worker pod's gateway token."""
    if expiration_seconds < MIN_TOKEN_EXPIRATION_SECONDS:
        raise ValueError(
            f"expiration_seconds={expiration_seconds}: the API server issues projected tokens "
            f"for at least {MIN_TOKEN_EXPIRATION_SECONDS} s"
        )
    source = {"audience": audience, "expirationSeconds": expiration_seconds, "path": "token"}
    return {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": source}]}}


def token_mount() -> dict[str, Any]:
    """The worker container's mount of :func:`token_volume`."""
    return {"name": TOKEN_VOLUME, "mountPath": TOKEN_MOUNT_PATH, "readOnly": True}
