"""Service-account tokens of the devcluster: issued to pods, checked by the API server.

A token is shaped like the projected tokens of a real cluster: a JWT (header, claims,
signature, each base64url without padding) signed with HMAC-SHA256 under a key that lives
only as long as the devcluster, with the claims a bound token carries::

    {"aud": ["https://kubernetes.default.svc.cluster.local"], "exp": ..., "iat": ...,
     "nbf": ..., "iss": ISSUER, "jti": "<uuid>", "sub": "system:serviceaccount:NS:SA",
     "kubernetes.io": {"namespace": NS, "serviceaccount": {"name": SA, "uid": ...},
                       "pod": {"name": ..., "uid": ...}, "node": {"name": ..., "uid": ...}}}

:class:`TokenAuthenticator` authenticates one as kube-apiserver's service-account token
authenticator (``pkg/serviceaccount/jwt.go`` and ``claims.go``) does: the signature, then the
audiences (the token's must meet those asked for, by default the API server's own,
:data:`API_AUDIENCES`), then ``exp``/``nbf``/``iat`` with go-jose's one-minute leeway, then the
ServiceAccount and the pod the token is bound to (both must still exist with the uids the
token names). A refusal carries the real server's error text, as a TokenReview reports it.

The admin kubeconfig's token (:data:`ADMIN_TOKEN`) is not a service-account token and stays
unrestricted.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The token of the devcluster's admin kubeconfig (unrestricted).
ADMIN_TOKEN = "kyai-devcluster"
#: The issuer written into every service-account token.
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The API server's own audiences (a real cluster's default: its issuer).
API_AUDIENCES: tuple[str, ...] = (ISSUER,)
#: Lifetime of a token issued without one (``kubectl create token``'s default, one hour).
DEFAULT_EXPIRATION_SECONDS = 3600
#: Lifetime of the default in-pod token: kube-apiserver extends the kubelet's 3607 s to a
#: year (``--service-account-extend-token-expiration``, on by default).
EXTENDED_EXPIRATION_SECONDS = 365 * 24 * 3600
#: The shortest lifetime the API server issues a projected token for.
MIN_EXPIRATION_SECONDS = 600
#: go-jose's ``DefaultLeeway``: ``exp``, ``nbf`` and ``iat`` are checked a minute loosely.
LEEWAY_SECONDS = 60

#: The ``extra`` keys of a service account's user info (as kube-apiserver 1.32 sets them).
EXTRA_CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
EXTRA_NODE_NAME = "authentication.kubernetes.io/node-name"
EXTRA_NODE_UID = "authentication.kubernetes.io/node-uid"
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"

#: The errors of kube-apiserver's token authenticators, as a TokenReview shows them.
INVALID_SIGNATURE = "[invalid bearer token, square/go-jose: error in cryptographic primitive]"
UNKNOWN_TOKEN = "[invalid bearer token, token lookup failed]"
EXPIRED = "[invalid bearer token, service account token has expired]"
NOT_VALID_YET = "[invalid bearer token, service account token is not valid yet]"
ISSUED_IN_FUTURE = "[invalid bearer token, service account token is issued in the future]"
INVALIDATED = "[invalid bearer token, service account token has been invalidated]"


@dataclass(frozen=True)
class BoundObject:
    """The object (pod, node) a token is bound to."""

    name: str
    uid: str


@dataclass(frozen=True)
class ServiceAccountIdentity:
    """Who a service-account token speaks for (and what it is bound to)."""

    namespace: str
    name: str
    uid: str = ""
    pod: BoundObject | None = None
    node: BoundObject | None = None
    token_id: str = ""
    audiences: tuple[str, ...] = field(default=(), compare=False)

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

    @property
    def extra(self) -> dict[str, tuple[str, ...]]:
        """The user info's ``extra``: the credential id and the bound node and pod."""
        extra: dict[str, tuple[str, ...]] = {}
        if self.token_id:
            extra[EXTRA_CREDENTIAL_ID] = (f"JTI={self.token_id}",)
        if self.node is not None:
            extra[EXTRA_NODE_NAME] = (self.node.name,)
            if self.node.uid:
                extra[EXTRA_NODE_UID] = (self.node.uid,)
        if self.pod is not None:
            extra[EXTRA_POD_NAME] = (self.pod.name,)
            extra[EXTRA_POD_UID] = (self.pod.uid,)
        return extra


def new_signing_key() -> bytes:
    """A fresh random signing key (one per devcluster)."""
    return secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, header: str, payload: str) -> str:
    return _b64(hmac.new(key, f"{header}.{payload}".encode("ascii"), hashlib.sha256).digest())


_HEADER = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())


def issue(
    key: bytes,
    namespace: str,
    name: str,
    *,
    audiences: Sequence[str] = API_AUDIENCES,
    expiration_seconds: int = DEFAULT_EXPIRATION_SECONDS,
    service_account_uid: str = "",
    pod: BoundObject | None = None,
    node: BoundObject | None = None,
    now: float | None = None,
) -> str:
    """A token for the service account ``namespace/name``, signed with ``key``.

    ``audiences`` default to the API server's; ``now`` (epoch seconds) is when it is issued.
    A ``pod`` binds it: it stops authenticating when that pod is gone. With a
    ``service_account_uid`` it also stops when the ServiceAccount is deleted (or recreated).
    """
    issued = int(time.time() if now is None else now)
    account: dict[str, str] = {"name": name}
    if service_account_uid:
        account["uid"] = service_account_uid
    k8s: dict[str, Any] = {"namespace": namespace, "serviceaccount": account}
    if pod is not None:
        k8s["pod"] = {"name": pod.name, "uid": pod.uid}
    if node is not None:
        k8s["node"] = {"name": node.name, "uid": node.uid}
    claims = {
        "aud": list(audiences),
        "exp": issued + int(expiration_seconds),
        "iat": issued,
        "nbf": issued,
        "iss": ISSUER,
        "jti": str(uuid.uuid4()),
        "sub": ServiceAccountIdentity(namespace, name).username,
        "kubernetes.io": k8s,
    }
    payload = _b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    return f"{_HEADER}.{payload}.{_sign(key, _HEADER, payload)}"


def signed_claims(key: bytes, token: str) -> dict[str, Any] | None:
    """The claims of a token signed with ``key`` (None: not a JWT, or another signature)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    header, payload, signature = parts
    try:
        expected = _sign(key, header, payload)
    except UnicodeEncodeError:
        return None
    if not hmac.compare_digest(expected, signature):
        return None
    try:
        claims = json.loads(_unb64(payload))
    except ValueError:
        return None
    return claims if isinstance(claims, dict) else None


def _bound(value: Any) -> BoundObject | None:
    if not isinstance(value, Mapping):
        return None
    return BoundObject(str(value.get("name") or ""), str(value.get("uid") or ""))


def identity_of(claims: Mapping[str, Any]) -> ServiceAccountIdentity | None:
    """The identity signed claims speak for (None when they name no service account)."""
    k8s = claims.get("kubernetes.io")
    if not isinstance(k8s, Mapping):
        return None
    account = k8s.get("serviceaccount")
    namespace = k8s.get("namespace")
    if not isinstance(account, Mapping) or not isinstance(namespace, str) or not namespace:
        return None
    name = account.get("name")
    if not isinstance(name, str) or not name:
        return None
    return ServiceAccountIdentity(
        namespace,
        name,
        uid=str(account.get("uid") or ""),
        pod=_bound(k8s.get("pod")),
        node=_bound(k8s.get("node")),
        token_id=str(claims.get("jti") or ""),
    )


def token_audiences(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """``aud`` as a list (a JWT may hold one string); none: the API server's (legacy)."""
    raw = claims.get("aud")
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list):
        return tuple(str(item) for item in raw)
    return ()


def go_quote(values: Sequence[str]) -> str:
    """Go's ``%q`` of a ``[]string``, as kube-apiserver prints audiences."""
    return "[" + " ".join(json.dumps(value) for value in values) + "]"


class TokenRefusedError(Exception):
    """A token did not authenticate; the message is kube-apiserver's TokenReview error."""


@dataclass(frozen=True)
class _Parsed:
    """What a token's signed claims say: who, for which audiences, ``(exp, nbf, iat)``."""

    identity: ServiceAccountIdentity
    audiences: tuple[str, ...]
    times: tuple[float | None, float | None, float | None]


#: ``(plural, namespace, name) -> uid`` of an object in the store, or None when absent.
UidLookup = Callable[[str, str, str], str | None]

#: Parsed tokens an authenticator keeps (every request of a pod sends the same token).
PARSED_CACHE_SIZE = 4096


class TokenAuthenticator:
    """Authenticates service-account tokens as kube-apiserver does (see the module)."""

    def __init__(
        self,
        key: bytes,
        *,
        api_audiences: Sequence[str] = API_AUDIENCES,
        lookup: UidLookup | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.key = key
        self.api_audiences = tuple(api_audiences)
        self.lookup = lookup
        self.clock = clock
        self._parsed: dict[str, _Parsed | TokenRefusedError] = {}

    def _parse(self, token: str) -> _Parsed:
        """The signed claims of ``token``, parsed once (every request of a pod sends it)."""
        parsed = self._parsed.get(token)
        if parsed is None:
            parsed = self._parse_anew(token)
            if len(self._parsed) >= PARSED_CACHE_SIZE:
                self._parsed.clear()
            self._parsed[token] = parsed
        if isinstance(parsed, TokenRefusedError):
            raise TokenRefusedError(str(parsed))
        return parsed

    def _parse_anew(self, token: str) -> _Parsed | TokenRefusedError:
        claims = signed_claims(self.key, token)
        if claims is None:
            return TokenRefusedError(INVALID_SIGNATURE if token.count(".") == 2 else UNKNOWN_TOKEN)
        identity = identity_of(claims)
        if claims.get("iss") != ISSUER or identity is None:
            return TokenRefusedError(UNKNOWN_TOKEN)

        def number(name: str) -> float | None:
            value = claims.get(name)
            return float(value) if isinstance(value, int | float) else None

        times = (number("exp"), number("nbf"), number("iat"))
        return _Parsed(identity, token_audiences(claims) or self.api_audiences, times)

    def authenticate(
        self, token: str, audiences: Sequence[str] | None = None
    ) -> ServiceAccountIdentity:
        """The identity ``token`` proves for ``audiences`` (default: the API server's).

        The returned identity's ``audiences`` are those both sides share. Raises
        :class:`TokenRefusedError` with the real server's error otherwise.
        """
        parsed = self._parse(token)
        have = parsed.audiences
        wanted = tuple(audiences) if audiences else self.api_audiences
        matched = tuple(audience for audience in have if audience in wanted)
        if not matched:
            raise TokenRefusedError(
                f"[invalid bearer token, token audiences {go_quote(have)} is invalid for the "
                f"target audiences {go_quote(wanted)}, token lookup failed]"
            )
        self._check_times(*parsed.times)
        identity = parsed.identity
        self._check_bindings(identity)
        if matched == identity.audiences:
            return identity
        return dataclasses.replace(identity, audiences=matched)

    def _check_times(self, exp: float | None, nbf: float | None, iat: float | None) -> None:
        now = self.clock()
        if exp is not None and now - LEEWAY_SECONDS > exp:
            raise TokenRefusedError(EXPIRED)
        if nbf is not None and now + LEEWAY_SECONDS < nbf:
            raise TokenRefusedError(NOT_VALID_YET)
        if iat is not None and now + LEEWAY_SECONDS < iat:
            raise TokenRefusedError(ISSUED_IN_FUTURE)

    def _check_bindings(self, identity: ServiceAccountIdentity) -> None:
        if self.lookup is None:
            return
        if identity.uid:
            found = self.lookup("serviceaccounts", identity.namespace, identity.name)
            if found is None:
                raise TokenRefusedError(INVALIDATED)
            if found != identity.uid:
                raise TokenRefusedError(
                    f"[invalid bearer token, service account UID ({found}) does not match "
                    f"claim ({identity.uid})]"
                )
        if identity.pod is not None:
            found = self.lookup("pods", identity.namespace, identity.pod.name)
            if found is None:
                raise TokenRefusedError(INVALIDATED)
            if found != identity.pod.uid:
                raise TokenRefusedError(
                    f"[invalid bearer token, pod UID ({found}) does not match service account "
                    f"pod ref claim ({identity.pod.uid})]"
                )


def verify(key: bytes, token: str) -> ServiceAccountIdentity | None:
    """The identity a token signed with ``key`` speaks for to the API server, or None.

    Checks the signature, the API server's audience and the times, not the bound objects
    (no store here): :class:`TokenAuthenticator` with a lookup does.
    """
    try:
        return TokenAuthenticator(key).authenticate(token)
    except TokenRefusedError:
        return None
