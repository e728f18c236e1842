"""A small async Kubernetes REST client for the operator's own calls.

kopf watches and dispatches; the operator's handlers create children, read referenced
objects and patch statuses. The official ``kubernetes`` client is synchronous, so this
module keeps its configuration loading (kubeconfig, in-cluster service account, exec and
token plugins) and speaks the REST API with aiohttp (kopf's own HTTP client), asynchronously.
(It was httpx: at 1,000 runs, httpcore's pool bookkeeping took a third of the operator's CPU.)
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from kyai import _json
from kyai.constants import GROUP, KINDS, VERSION

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

#: Kind → (apiVersion, plural) of every kind the operator touches.
RESOURCES: dict[str, tuple[str, str]] = {
    "ConfigMap": ("v1", "configmaps"),
    "Secret": ("v1", "secrets"),
    "Service": ("v1", "services"),
    "ServiceAccount": ("v1", "serviceaccounts"),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims"),
    "Pod": ("v1", "pods"),
    "Namespace": ("v1", "namespaces"),
    "Event": ("v1", "events"),
    "Deployment": ("apps/v1", "deployments"),
    "Job": ("batch/v1", "jobs"),
    "Role": ("rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings"),
    "NetworkPolicy": ("networking.k8s.io/v1", "networkpolicies"),
    # kubernetes-sigs/lws: served only where LeaderWorkerSet is installed (404 elsewhere).
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"),
    **{kind: (f"{GROUP}/{VERSION}", names[0]) for kind, names in KINDS.items()},
}

#: The operator's REST client as API servers log it.
USER_AGENT = "kyai-operator"

_IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
#: Objects per page of a LIST.
LIST_PAGE_SIZE = 500
#: How long a read service-account token is used before the file is read again.
TOKEN_REREAD_SECONDS = 60.0


class KubeError(Exception):
    """An API call failed; ``status`` is the HTTP status (None for transport errors)."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def resource_path(
    kind: str, namespace: str | None = None, name: str | None = None, subresource: str = ""
) -> str:
    """The REST path of a kind, a namespace's collection, an object or its subresource."""
    api_version, plural = RESOURCES[kind]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = prefix + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    if name:
        path += f"/{name}"
        if subresource:
            path += f"/{subresource}"
    return path


class KubeClient:
    """Async REST calls with the credentials of a kubeconfig or the pod's service account."""

    def __init__(
        self,
        host: str,
        *,
        headers: Mapping[str, str] | None = None,
        verify: ssl.SSLContext | bool = True,
        token_file: Path | None = None,
        max_connections: int = 64,
    ) -> None:
        self._base = host.rstrip("/")
        # Named in the API server's access log (the bench counts the operator's requests).
        self._headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **(headers or {})}
        self._verify = verify
        self._token_file = token_file
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._token: tuple[float, str] | None = None  # (read at, monotonic; the token)

    def _client(self) -> aiohttp.ClientSession:
        """The session, made on first use (inside the running event loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                # No cookies, as client-go keeps none (and per request, a jar costs CPU).
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=30.0),
                # Many reconciles at once: keep their connections instead of reopening them.
                connector=aiohttp.TCPConnector(limit=self._max_connections, ssl=self._verify),
            )
        return self._session

    @classmethod
    def from_environment(cls) -> KubeClient:
        """Load credentials as kubectl would: $KUBECONFIG / ~/.kube/config, else in-cluster."""
        from kubernetes import client, config

        from kyai._kubeconfig import load_kube_config

        configuration = client.Configuration()
        token_file: Path | None = None
        try:
            load_kube_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_incluster_config(client_configuration=configuration)
            token_file = _IN_CLUSTER_TOKEN
        headers = {}
        auth = configuration.api_key.get("authorization") or configuration.api_key.get(
            "BearerToken"
        )
        if auth:
            prefix = configuration.api_key_prefix.get("authorization", "")
            headers["Authorization"] = f"{prefix} {auth}".strip() if prefix else auth
        verify: ssl.SSLContext | bool = bool(configuration.verify_ssl)
        if configuration.verify_ssl and configuration.ssl_ca_cert:
            context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
            if configuration.cert_file:
                context.load_cert_chain(configuration.cert_file, configuration.key_file)
            verify = context
        return cls(configuration.host, headers=headers, verify=verify, token_file=token_file)

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One call; raise :class:`KubeError` for anything but 2xx."""
        content = await self._send(
            method, path, body=body, content_type=content_type, params=params
        )
        if not content:
            return {}
        result: dict[str, Any] = _json.loads(content)
        return result

    async def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
    ) -> bytes:
        """One call's body; raise :class:`KubeError` (with the Status' words) unless 2xx."""
        headers = {"Content-Type": content_type} if body is not None else {}
        token = self._bearer()
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with self._client().request(
                method,
                self._base + path,
                data=None if body is None else _json.dumps_body(body),
                headers=headers,
                params=dict(params) if params else None,
            ) as response:
                code, content = response.status, await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise KubeError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if code >= 300:
            text = content.decode(errors="replace")
            try:
                status = json.loads(content)
                message = status.get("message") or text
                reason = status.get("reason") or ""
            except (json.JSONDecodeError, AttributeError):
                message, reason = text, ""
            raise KubeError(f"{method} {path}: HTTP {code}: {message}", status=code, reason=reason)
        return content

    async def pod_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        tail_lines: int,
        previous: bool = False,
        limit_bytes: int = 64 * 1024,
    ) -> str:
        """The last ``tail_lines`` of a container's log.

        ``previous``: of its instance before the last restart. Raises :class:`KubeError`
        when the API server refuses (RBAC ``pods/log`` get, a container that never ran).
        """
        params = {
            "container": container,
            "tailLines": str(tail_lines),
            "limitBytes": str(limit_bytes),
            **({"previous": "true"} if previous else {}),
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"
        return (await self._send("GET", path, params=params)).decode(errors="replace")

    def _bearer(self) -> str | None:
        """The service account's token, read again once a minute, not on every request.

        Kubernetes rotates projected tokens well before they expire; client-go re-reads
        the file once a minute too.
        """
        if self._token_file is None:
            return None
        now = time.monotonic()
        if self._token is None or now - self._token[0] >= TOKEN_REREAD_SECONDS:
            try:
                self._token = (now, self._token_file.read_text().strip())
            except OSError:
                return self._token[1] if self._token is not None else None
        return self._token[1]

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An object, or None when it does not exist."""
        try:
            return await self.request("GET", resource_path(kind, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def pages(
        self, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """:meth:`list`, one page at a time.

        A caller that keeps few of the objects (the resync keeps the unfinished runs of
        10,000) never holds them all at once.
        """
        params = {"limit": str(LIST_PAGE_SIZE)}
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            result = await self.request("GET", resource_path(kind, namespace), params=params)
            yield result.get("items") or []
            token = (result.get("metadata") or {}).get("continue")
            if not token:
                return
            params["continue"] = str(token)

    async def list(
        self, kind: str, namespace: str | None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of a kind in a namespace (None: in every namespace).

        In pages of :data:`LIST_PAGE_SIZE` (``limit`` and ``continue``, as kubectl does):
        the API server never builds, nor this process parses in one go (blocking its event
        loop), the list of thousands of runs and Jobs a resync reads.
        """
        items: list[dict[str, Any]] = []
        async for page in self.pages(kind, namespace, label_selector=label_selector):
            items.extend(page)
        return items

    async def create(self, obj: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create ``obj``; when it exists already, return the existing one. (obj, created)."""
        kind = obj["kind"]
        namespace = obj["metadata"].get("namespace")
        try:
            created = await self.request("POST", resource_path(kind, namespace), body=obj)
            return created, True
        except KubeError as exc:
            if exc.status != 409:
                raise
        existing = await self.get(kind, namespace, obj["metadata"]["name"])
        if existing is None:  # deleted in between: one more try
            return await self.request("POST", resource_path(kind, namespace), body=obj), True
        return existing, False

    async def ensure(self, obj: Mapping[str, Any]) -> None:
        """Create ``obj`` unless it exists (a 409 is fine; the existing one is not read)."""
        kind = obj["kind"]
        try:
            await self.request(
                "POST", resource_path(kind, obj["metadata"].get("namespace")), body=obj
            )
        except KubeError as exc:
            if exc.status != 409:
                raise

    async def patch(
        self,
        kind: str,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        """Patch an object (merge patch unless told otherwise)."""
        return await self.request(
            "PATCH",
            resource_path(kind, namespace, name, subresource),
            body=body,
            content_type=content_type,
        )

    async def replace(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an object (PUT); its resourceVersion guards against lost updates."""
        meta = obj["metadata"]
        return await self.request(
            "PUT", resource_path(obj["kind"], meta.get("namespace"), meta["name"]), body=obj
        )

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete an object (gone already is fine)."""
        try:
            await self.request(
                "DELETE",
                resource_path(kind, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
