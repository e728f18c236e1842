"""Service-account tokens of the devcluster: issued to pods, checked by the API server.

A token is shaped like the projected tokens of a real cluster (a JWT: header, claims,
signature, each base64url without padding) and signed with HMAC-SHA256 under a key that
lives only as long as the devcluster. Clients never look inside: they send it as
``Authorization: Bearer <token>``, as in-cluster configuration does.

The admin kubeconfig's token (:data:`ADMIN_TOKEN`) is not a service-account token and stays
unrestricted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

#: The token of the devcluster's admin kubeconfig (unrestricted).
ADMIN_TOKEN = "kyai-devcluster"
#: The issuer written into every service-account token.
ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class ServiceAccountIdentity:
    """Who a service-account token speaks for."""

    namespace: str
    name: str

    @property
    def username(self) -> str:
        """The user name Kubernetes gives a service account (used in 403 messages)."""
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> tuple[str, ...]:
        """The groups Kubernetes puts every service account in."""
        return (
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        )


def new_signing_key() -> bytes:
    """A fresh random signing key (one per devcluster)."""
    return secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue(key: bytes, namespace: str, name: str) -> str:
    """A token for the service account ``namespace/name``, signed with ``key``."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {
        "iss": ISSUER,
        "sub": ServiceAccountIdentity(namespace, name).username,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": name}},
    }
    payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    signing_input = f"{header}.{payload}".encode("ascii")
    signature = _b64(hmac.new(key, signing_input, hashlib.sha256).digest())
    return f"{header}.{payload}.{signature}"


def verify(key: bytes, token: str) -> ServiceAccountIdentity | None:
    """The identity a token signed with ``key`` speaks for, or None when it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    header, payload, signature = parts
    expected = _b64(hmac.new(key, f"{header}.{payload}".encode("ascii"), hashlib.sha256).digest())
    if not hmac.compare_digest(expected, signature):
        return None
    try:
        claims = json.loads(_unb64(payload))
        ns = claims["kubernetes.io"]["namespace"]
        name = claims["kubernetes.io"]["serviceaccount"]["name"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(ns, str) or not isinstance(name, str):
        return None
    return ServiceAccountIdentity(ns, name)
