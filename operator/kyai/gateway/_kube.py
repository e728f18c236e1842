"""What the gateway asks the Kubernetes API: a TokenReview, a pod, a namespace.

:class:`ClusterAPI` is the small interface the token verifier uses; :class:`KubernetesAPI`
implements it over HTTPS with the gateway's own ServiceAccount (in a pod: the token and CA
the kubelet mounts, the token re-read as the kubelet rotates it) or a kubeconfig:

* ``POST /apis/authentication.k8s.io/v1/tokenreviews`` with ``spec.token`` and
  ``spec.audiences``; the API server answers 201 with ``status.authenticated``,
  ``status.user`` (``username`` ``system:serviceaccount:NS:SA``, ``uid``, ``groups`` and
  ``extra``: a pod-bound token carries ``authentication.kubernetes.io/pod-name`` and
  ``pod-uid``), ``status.audiences`` (those of the request the token is valid for) and
  ``status.error`` when it did not authenticate the token (expired, another audience, a
  deleted pod, a bad signature);
* ``GET /api/v1/namespaces/NS/pods/NAME`` (404 when there is no such pod);
* ``GET /api/v1/namespaces/NS`` (only with a namespace selector).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from kyai._json import dumps_body, loads
from kyai.gateway._files import FileUnreadableError, WatchedFile

#: The extra keys of a pod-bound ServiceAccount token's user info.
EXTRA_POD_NAME = "authentication.kubernetes.io/pod-name"
EXTRA_POD_UID = "authentication.kubernetes.io/pod-uid"

#: Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


class ClusterAPIError(Exception):
    """The API server did not answer usefully (unreachable, an error status, a bad body).

    Not the caller's fault: the caller gets a 503 and nothing is cached.
    """


class ClusterConfigError(Exception):
    """No way to reach the API server was found (no in-cluster account, no kubeconfig)."""


@dataclass(frozen=True)
class TokenReviewStatus:
    """``status`` of a TokenReview as the API server returned it."""

    authenticated: bool
    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    audiences: tuple[str, ...] = ()
    error: str = ""

    @classmethod
    def from_review(cls, review: Any) -> TokenReviewStatus:
        """Read a TokenReview response (ClusterAPIError if it is not one)."""
        status = review.get("status") if isinstance(review, Mapping) else None
        if not isinstance(status, Mapping):
            raise ClusterAPIError("the TokenReview response has no status")
        user = status.get("user")
        user = user if isinstance(user, Mapping) else {}
        extra_raw = user.get("extra")
        extra: dict[str, tuple[str, ...]] = {}
        if isinstance(extra_raw, Mapping):
            for key, values in extra_raw.items():
                if isinstance(values, list):
                    extra[str(key)] = tuple(str(value) for value in values)
        return cls(
            authenticated=status.get("authenticated") is True,
            username=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=_strings(user.get("groups")),
            extra=extra,
            audiences=_strings(status.get("audiences")),
            error=str(status.get("error") or ""),
        )

    def extra_value(self, key: str) -> str | None:
        """The first value of ``extra[key]``, if any."""
        values = self.extra.get(key) or ()
        return values[0] if values and values[0] else None


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list) else ()


class ClusterAPI(Protocol):
    """The API calls the token verifier makes; ClusterAPIError when they cannot be answered."""

    async def review_token(self, token: str, audiences: Sequence[str]) -> TokenReviewStatus:
        """Create a TokenReview of ``token`` for ``audiences``; its status."""
        ...

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The pod, or None when it does not exist."""
        ...

    async def get_namespace(self, name: str) -> Mapping[str, Any] | None:
        """The namespace, or None when it does not exist."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class ApiServerConfig:
    """Where the API server is and how the gateway proves who it is."""

    server: str
    ca_file: str | None = None
    verify_tls: bool = True
    token: str | None = None
    token_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @classmethod
    def in_cluster(
        cls,
        environ: Mapping[str, str] | None = None,
        directory: Path = SERVICE_ACCOUNT_DIR,
    ) -> ApiServerConfig | None:
        """The pod's own account, or None outside a pod.

        ``KUBERNETES_SERVICE_HOST``/``PORT``, and the token and CA the kubelet mounts.
        """
        environ = os.environ if environ is None else environ
        host = environ.get("KUBERNETES_SERVICE_HOST")
        port = environ.get("KUBERNETES_SERVICE_PORT")
        token = directory / "token"
        if not host or not port or not token.exists():
            return None
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        ca = directory / "ca.crt"
        return cls(
            server=f"https://{host}:{port}",
            ca_file=str(ca) if ca.exists() else None,
            token_file=str(token),
        )

    @classmethod
    def from_kubeconfig(cls, path: str | None = None) -> ApiServerConfig:
        """The current context of a kubeconfig (ClusterConfigError naming it if unusable).

        ``path`` None: ``$KUBECONFIG``, else ``~/.kube/config``.
        """
        from kubernetes import client, config

        from kyai._kubeconfig import load_kube_config

        configuration = client.Configuration()
        try:
            load_kube_config(
                config_file=path, client_configuration=configuration, persist_config=False
            )
        except (config.ConfigException, OSError, ValueError) as exc:
            where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ClusterConfigError(f"kubeconfig {where}: {exc}") from None
        keys = configuration.api_key or {}
        # "BearerToken" in recent clients, "authorization" in older ones.
        authorization = str(keys.get("BearerToken") or keys.get("authorization") or "")
        token = authorization.removeprefix("Bearer ").strip() or None
        return cls(
            server=str(configuration.host).rstrip("/"),
            ca_file=configuration.ssl_ca_cert or None,
            verify_tls=bool(configuration.verify_ssl),
            token=token,
            cert_file=configuration.cert_file or None,
            key_file=configuration.key_file or None,
        )

    @classmethod
    def discover(cls, kubeconfig: str | None = None) -> ApiServerConfig:
        """``kubeconfig`` when given, else the in-cluster account, else the default kubeconfig."""
        if kubeconfig is None:
            found = cls.in_cluster()
            if found is not None:
                return found
        return cls.from_kubeconfig(kubeconfig)

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS settings of an https server (None for http)."""
        if not self.server.startswith("https://"):
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if not self.verify_tls:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


class KubernetesAPI:
    """:class:`ClusterAPI` over HTTP(S), with the gateway's own credentials."""

    def __init__(
        self, config: ApiServerConfig, *, timeout_s: float = 10.0, check_seconds: float = 1.0
    ) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self._token_file = (
            WatchedFile(
                config.token_file,
                what="the gateway's ServiceAccount token",
                check_seconds=check_seconds,
            )
            if config.token_file
            else None
        )
        self._session: aiohttp.ClientSession | None = None

    def _credentials(self) -> dict[str, str]:
        token = self.config.token
        if self._token_file is not None:
            try:
                token = self._token_file.read()
            except FileUnreadableError as exc:
                raise ClusterAPIError(str(exc)) from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.config.ssl_context() or False),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            )
        return self._session

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json", **self._credentials()}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = dumps_body(body)
        url = f"{self.config.server}{path}"
        try:
            async with self._client().request(method, url, data=data, headers=headers) as reply:
                raw = await reply.read()
                status = reply.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise ClusterAPIError(
                f"cannot reach the API server at {self.config.server}: {reason}"
            ) from None
        try:
            parsed = loads(raw) if raw else None
        except ValueError:
            parsed = None
        return status, parsed

    @staticmethod
    def _failure(what: str, status: int, body: Any) -> ClusterAPIError:
        message = body.get("message") if isinstance(body, Mapping) else None
        hint = ""
        if status in (401, 403):
            hint = " (check the gateway's ServiceAccount and its ClusterRole)"
        return ClusterAPIError(f"{what}: HTTP {status}: {message or 'no message'}{hint}")

    async def review_token(self, token: str, audiences: Sequence[str]) -> TokenReviewStatus:
        """POST a TokenReview; its status (the response, which repeats the token, is dropped)."""
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": list(audiences)},
        }
        status, body = await self._call("POST", TOKEN_REVIEWS, review)
        if status not in (200, 201):
            raise self._failure("TokenReview", status, body)
        return TokenReviewStatus.from_review(body)

    async def _get(self, what: str, path: str) -> Mapping[str, Any] | None:
        status, body = await self._call("GET", path)
        if status == 404:
            return None
        if status != 200 or not isinstance(body, Mapping):
            raise self._failure(f"GET {what}", status, body)
        return body

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET the pod (None on 404)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        return await self._get(f"pod {namespace}/{name}", path)

    async def get_namespace(self, name: str) -> Mapping[str, Any] | None:
        """GET the namespace (None on 404)."""
        return await self._get(f"namespace {name}", f"/api/v1/namespaces/{quote(name, safe='')}")

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()
            self._session = None
