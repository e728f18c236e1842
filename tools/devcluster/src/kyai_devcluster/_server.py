"""The HTTP face of the store: Kubernetes API paths, discovery, OpenAPI, watches and logs."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import yaml
from aiohttp import web

from kyai._json import clone, dumps_body
from kyai_devcluster import _limits, _openapi, _protobuf, _rbac, _reviews, _tables, _tokens
from kyai_devcluster._errors import (
    StatusError,
    bad_request,
    method_not_allowed,
    not_found,
    unsupported_media_type,
)
from kyai_devcluster._patch import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
)
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._selectors import (
    FieldSelector,
    parse_field_selector,
    parse_label_selector,
    selector_to_string,
)
from kyai_devcluster._store import Admission, Store, meta

Obj = dict[str, Any]
logger = logging.getLogger("kyai_devcluster")

KUBERNETES_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-kyai-devcluster"}
_JSON = "application/json"
_YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", APPLY_PATCH}
_PATCH_TYPES = {JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH}
_RETURNS_DELETED_OBJECT = {("", "pods"), ("", "services")}
_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_USER = web.RequestKey("kyai_user", _rbac.UserInfo)


class LogSource(Protocol):
    """Where pod logs come from (the simulated kubelet)."""

    def log_file(
        self, namespace: str, pod: str, container: str, *, previous: bool = False
    ) -> Path | None:
        """The file holding a container's output, if there is one.

        ``previous``: its instance before the last restart.
        """
        ...

    def is_running(self, namespace: str, pod: str, container: str) -> bool:
        """Whether the container's process is still running (for ``follow``)."""
        ...


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"true", "1", "yes"}


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _accept_as(request: web.Request, what: str) -> str | None:
    """The ``meta.k8s.io`` version asked for with ``;as=<what>`` in Accept, if any."""
    for media_range in request.headers.get("Accept", "").split(","):
        params: dict[str, str] = {}
        for part in media_range.split(";")[1:]:
            key, _, value = part.partition("=")
            params[key.strip()] = value.strip()
        if params.get("as") == what and params.get("g", "meta.k8s.io") == "meta.k8s.io":
            return f"meta.k8s.io/{params.get('v', 'v1')}"
    return None


#: Watch events written at most in one chunk.
WATCH_BATCH = 256


def _json_response(
    body: Any, *, status: int = 200, warnings: list[str] | None = None
) -> web.Response:
    response = web.Response(
        body=dumps_body(body),
        status=status,
        content_type=_JSON,
    )
    for warning in warnings or []:
        escaped = warning.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


def _error_response(error: StatusError) -> web.Response:
    # The access log has the code; with --verbose the reason is beside it.
    logger.debug("answered %d %s: %s", error.code, error.reason, error.message)
    return _json_response(error.status(), status=error.code)


class ApiServer:
    """The aiohttp application serving one :class:`Store`."""

    def __init__(
        self,
        store: Store,
        *,
        logs: LogSource | None = None,
        bookmark_interval: float = 5.0,
        token_key: bytes | None = None,
        anonymous_admin: bool = True,
    ) -> None:
        self.store = store
        self.logs = logs
        self.bookmark_interval = bookmark_interval
        #: The key service-account tokens are signed with (None: only the admin token).
        self.token_key = token_key
        #: Whether a request without credentials is the admin (else ``system:anonymous``).
        self.anonymous_admin = anonymous_admin
        #: Run the OwnerReferencesPermissionEnforcement admission plugin (as OpenShift does).
        self.enforce_owner_references = False
        self.authorizer = _rbac.Authorizer(store)
        self._tokens: _tokens.TokenAuthenticator | None = None
        self.address = ""
        self._stopping = asyncio.Event()

    def application(self) -> web.Application:
        """The aiohttp application (one catch-all route)."""
        app = web.Application(client_max_size=_limits.MAX_REQUEST_BODY_BYTES + 1)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    def stop_streams(self) -> None:
        """End watches and log streams (before the HTTP server shuts down)."""
        self._stopping.set()
        self.store.close_watches()

    # -- dispatch ---------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except StatusError as error:
            return _error_response(error)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            logger.exception("internal error serving %s %s", request.method, request.path_qs)
            return _error_response(StatusError(500, "InternalError", f"internal error: {exc}"))

    @property
    def tokens(self) -> _tokens.TokenAuthenticator | None:
        """Authenticates service-account tokens (None without a token key)."""
        if self.token_key is None:
            return None
        if self._tokens is None or self._tokens.key != self.token_key:
            self._tokens = _tokens.TokenAuthenticator(self.token_key, lookup=self._uid)
        return self._tokens

    def _uid(self, plural: str, namespace: str, name: str) -> str | None:
        """The uid of a namespaced core object in the store (a token's bound object)."""
        found = self.store.find(self.store.type_for("", plural), namespace, name)
        return None if found is None else str(meta(found).get("uid") or "")

    def _user(self, request: web.Request) -> _rbac.UserInfo:
        tokens = self.tokens
        user = _rbac.authenticate(request.headers, tokens, anonymous_admin=self.anonymous_admin)
        return _rbac.impersonated(request.headers, user, self.authorizer)

    def _check_path(self, request: web.Request) -> None:
        """Authorize a non-resource request (discovery, version, OpenAPI, health)."""
        user: _rbac.UserInfo = request[_USER]
        verb = {"GET": "get", "HEAD": "head", "POST": "post", "PUT": "put"}.get(
            request.method, request.method.lower()
        )
        attrs = _rbac.Attributes(user, verb, resource_request=False, path=request.path)
        self.authorizer.check(attrs)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        request[_USER] = self._user(request)
        parts = [part for part in request.path.split("/") if part]
        method = request.method
        if parts[:3] == ["apis", "authorization.k8s.io", "v1"] and len(parts) == 4:
            return await self._access_review(request, parts[3])
        if parts == ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]:
            return self._who_am_i(request)
        if parts == ["apis", "authentication.k8s.io", "v1", "tokenreviews"]:
            return await self._token_review(request)
        is_resource = (parts[:1] == ["api"] and len(parts) > 2) or (
            parts[:1] == ["apis"] and len(parts) > 3
        )
        if not is_resource:
            self._check_path(request)
        if not parts:
            paths = ["/api", "/api/v1", "/apis", "/openapi/v2", "/openapi/v3", "/version"]
            return _json_response({"paths": paths})
        if parts in (["healthz"], ["livez"], ["readyz"]):
            return web.Response(text="ok")
        if parts == ["version"]:
            return _json_response(
                {
                    **KUBERNETES_VERSION,
                    "gitCommit": "0000000000000000000000000000000000000000",
                    "gitTreeState": "clean",
                    "buildDate": "2025-01-01T00:00:00Z",
                    "goVersion": "go1.23.0",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                }
            )
        if parts[0] == "openapi":
            return self._openapi(request, parts[1:])
        if parts[0] == "api":
            if len(parts) == 1:
                return _json_response(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": self.address}
                        ],
                    }
                )
            if parts[1] != "v1":
                raise not_found("", "")
            if len(parts) == 2:
                return _json_response(self._resource_list("", "v1"))
            return await self._resource(request, "", "v1", parts[2:], method)
        if parts[0] == "apis":
            groups = self.store.registry.groups()
            if len(parts) == 1:
                return _json_response(
                    {
                        "kind": "APIGroupList",
                        "apiVersion": "v1",
                        "groups": [
                            self._group(name, versions)
                            for name, versions in sorted(groups.items())
                            if name
                        ],
                    }
                )
            group = parts[1]
            if len(parts) > 3 and (group not in groups or parts[2] not in groups[group]):
                if not request[_USER].is_admin:
                    self._authorize_path(request, group, parts[2], parts[3:])
                raise _no_resource()
            if group not in groups:
                raise _no_resource()
            if len(parts) == 2:
                return _json_response(
                    {"kind": "APIGroup", "apiVersion": "v1", **self._group(group, groups[group])}
                )
            version = parts[2]
            if version not in groups[group]:
                raise _no_resource()
            if len(parts) == 3:
                return _json_response(self._resource_list(group, version))
            return await self._resource(request, group, version, parts[3:], method)
        raise _no_resource()

    # -- discovery --------------------------------------------------------------------------

    @staticmethod
    def _group(name: str, versions: list[str]) -> Obj:
        entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": entries, "preferredVersion": entries[0]}

    def _resource_list(self, group: str, version: str) -> Obj:
        resources: list[Obj] = []
        for rt in self.store.registry.resources(group, version):
            entry: Obj = {
                "name": rt.plural,
                "singularName": rt.singular_name,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
                "storageVersionHash": rt.storage_hash(),
            }
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            if rt.categories:
                entry["categories"] = list(rt.categories)
            resources.append(entry)
            for sub in rt.subresources:
                sub_entry: Obj = {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": ["get", "patch", "update"],
                }
                if sub == "scale":
                    sub_entry.update(group="autoscaling", version="v1", kind="Scale")
                elif sub == "log":
                    sub_entry["verbs"] = ["get"]
                elif sub == "finalize":
                    sub_entry["verbs"] = ["update"]
                resources.append(sub_entry)
        api_version = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": api_version,
            "resources": resources,
        }

    def _openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        if parts == ["v2"]:
            accept = request.headers.get("Accept", "")
            if accept and "json" not in accept and "*/*" not in accept:
                raise StatusError(406, "NotAcceptable", "only application/json is served")
            return _json_response(_openapi.swagger_v2(self.store.registry))
        if parts == ["v3"]:
            return _json_response(_openapi.discovery(self.store.registry))
        if parts[:1] == ["v3"]:
            key = "/".join(parts[1:])
            document = _openapi.documents(self.store.registry).get(key)
            if document is None:
                raise _no_resource()
            return _json_response(document)
        raise _no_resource()

    # -- resources --------------------------------------------------------------------------

    def _route(
        self, group: str, version: str, rest: list[str]
    ) -> tuple[ResourceType, str | None, str | None, str | None]:
        registry = self.store.registry
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = registry.lookup(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = registry.lookup(group, version, plural)
        if rt is None or len(rest) > 3:
            raise _no_resource()
        if name is not None and rt.namespaced and namespace is None:
            raise _no_resource()
        if sub is not None and sub not in rt.subresources:
            raise _no_resource()
        return rt, namespace, name, sub

    def _authorize_path(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> None:
        """Authorize a resource path that does not route (RequestInfo from the path alone)."""
        namespace: str | None = None
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        self._authorize(request, group, version, rest[0], namespace, name, sub)

    def _authorize(
        self,
        request: web.Request,
        group: str,
        version: str,
        plural: str,
        namespace: str | None,
        name: str | None,
        sub: str | None,
    ) -> None:
        """Refuse (403) what the request's user may not do, as RBAC decides it."""
        user: _rbac.UserInfo = request[_USER]
        if user.is_admin:
            return
        method = request.method
        query = request.query
        if name is None:
            verb = {
                "GET": "watch" if _truthy(query.get("watch")) else "list",
                "POST": "create",
                "DELETE": "deletecollection",
            }.get(method, method.lower())
            wanted = ""
            if verb in ("list", "watch"):
                wanted = _single_name(query.get("fieldSelector"))
        else:
            verb = {
                "GET": "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
            }.get(method, method.lower())
            wanted = name
        if (group, plural) == ("", "namespaces") and name is not None:
            namespace = name
        attrs = _rbac.Attributes(
            user,
            verb,
            group=group,
            version=version,
            resource=plural,
            subresource=sub or "",
            namespace=namespace or "",
            name=wanted,
        )
        self.authorizer.check(attrs)

    def _admission(self, request: web.Request) -> Admission | None:
        """The admission checks of a write by the request's user (None: nothing to check)."""
        user = request[_USER]
        if user.is_admin:
            return None
        authorizer = self.authorizer
        owner_references = self.enforce_owner_references

        def admit(rt: ResourceType, new: Obj, old: Obj | None) -> None:
            _rbac.check_escalation(authorizer, user, rt, new, old)
            if owner_references:
                _rbac.check_owner_references(authorizer, user, rt, new, old)

        return admit

    def _who_am_i(self, request: web.Request) -> web.Response:
        """``SelfSubjectReview`` (``kubectl auth whoami``): who the request speaks for."""
        if request.method != "POST":
            raise method_not_allowed(f"{request.method} is not supported on selfsubjectreviews")
        return _json_response(_reviews.self_subject_review(request[_USER]), status=201)

    async def _token_review(self, request: web.Request) -> web.Response:
        """``TokenReview``: authenticate a token for some audiences (RBAC: create)."""
        if request.method != "POST":
            raise method_not_allowed(f"{request.method} is not supported on tokenreviews")
        self.authorizer.check(
            _rbac.Attributes(
                request[_USER],
                "create",
                group="authentication.k8s.io",
                version="v1",
                resource="tokenreviews",
            )
        )
        result = _reviews.token_review(self.tokens, await self._body(request))
        return _json_response(result, status=201)

    async def _access_review(self, request: web.Request, plural: str) -> web.Response:
        """``SelfSubjectAccessReview``/``SubjectAccessReview``: what ``kubectl auth can-i`` asks."""
        user: _rbac.UserInfo = request[_USER]
        if plural not in _reviews.REVIEW_KINDS:
            raise _no_resource()
        if request.method != "POST":
            raise method_not_allowed(f"{request.method} is not supported on {plural}")
        self.authorizer.check(
            _rbac.Attributes(
                user, "create", group="authorization.k8s.io", version="v1", resource=plural
            )
        )
        if "protobuf" in _media_type(request.headers.get("Content-Type")):
            try:
                body = _rbac.decode_access_review(
                    await request.read(), rules=plural == "selfsubjectrulesreviews"
                )
            except (ValueError, UnicodeDecodeError) as exc:
                raise bad_request(f"the request body could not be decoded: {exc}") from exc
        else:
            body = await self._body(request)
        result = _reviews.access_review(self.authorizer, user, plural, body)
        return _json_response(result, status=201)

    def _out(self, rt: ResourceType, obj: Obj) -> Obj:
        if obj.get("apiVersion") == rt.api_version:
            return obj
        return {**obj, "apiVersion": rt.api_version}

    async def _body(self, request: web.Request) -> Any:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise _limits.request_too_large() from exc
        media = _media_type(request.headers.get("Content-Type"))
        if not raw:
            return None
        if "protobuf" in media:
            try:
                decoded = _protobuf.decode(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise bad_request(f"the request body could not be decoded: {exc}") from exc
            if decoded is not None:
                return decoded
        if "protobuf" in media or "cbor" in media:
            error = unsupported_media_type(media, [_JSON, "application/yaml"])
            error.message += (
                "; the devcluster speaks JSON only, and kubectl's imperative 'create <kind>' "
                "commands send protobuf: use 'kubectl apply -f' or 'kubectl create -f' instead"
            )
            raise error
        try:
            if media in _YAML_TYPES:
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"the request body could not be decoded: {exc}") from exc

    @staticmethod
    def _write_options(request: web.Request) -> tuple[bool, str]:
        query = request.query
        dry_run = "All" in query.getall("dryRun", [])
        validation = query.get("fieldValidation", "Warn") or "Warn"
        if validation not in {"Strict", "Warn", "Ignore"}:
            raise bad_request(
                f"fieldValidation invalid value {validation!r}: must be Ignore, Warn or Strict"
            )
        return dry_run, validation

    def _fields(self, rt: ResourceType, text: str | None) -> FieldSelector:
        allowed = {"metadata.name", "metadata.namespace", *rt.selectable_fields}
        return parse_field_selector(text, supported=lambda path: path in allowed)

    async def _resource(
        self, request: web.Request, group: str, version: str, rest: list[str], method: str
    ) -> web.StreamResponse:
        try:
            rt, namespace, name, sub = self._route(group, version, rest)
        except StatusError as error:
            # Authorization comes first on a real server: a resource that does not exist
            # (yet) is a 403 for whoever may not touch it, a 404 only for the others.
            if error.code == 404 and not request[_USER].is_admin:
                self._authorize_path(request, group, version, rest)
            raise
        query = request.query
        self._authorize(request, rt.group, rt.version, rt.plural, namespace, name, sub)
        if method in ("POST", "PUT", "PATCH"):
            _limits.check_request_size(request.content_length)
        if name is None:
            if method == "GET":
                labels = parse_label_selector(query.get("labelSelector"))
                fields = self._fields(rt, query.get("fieldSelector"))
                if _truthy(query.get("watch")):
                    return await self._watch(request, rt, namespace, labels, fields)
                limit = int(query["limit"]) if query.get("limit", "").isdigit() else None
                items, list_rv, token = self.store.list_page(
                    rt,
                    namespace,
                    labels=labels,
                    fields=fields,
                    limit=limit,
                    continue_token=query.get("continue"),
                )
                return self._list_response(request, rt, items, list_rv, token)
            if method == "POST":
                dry_run, validation = self._write_options(request)
                result = self.store.create(
                    rt,
                    namespace,
                    await self._body(request),
                    dry_run=dry_run,
                    field_validation=validation,
                    admit=self._admission(request),
                )
                return _json_response(
                    self._out(rt, result.obj), status=201, warnings=result.warnings
                )
            if method == "DELETE":
                return await self._delete_collection(request, rt, namespace)
            raise method_not_allowed(f"{method} is not supported on a collection")
        if sub == "log":
            if method != "GET":
                raise method_not_allowed("pod logs are read-only")
            return await self._logs(request, namespace or "", name)
        if sub == "scale":
            return await self._scale(request, rt, namespace, name, method)
        if method == "GET":
            obj = self.store.find(rt, namespace, name)
            if obj is None:
                raise not_found(rt.plural, name, rt.group)
            return self._object_response(request, rt, obj)
        if method == "PUT":
            dry_run, validation = self._write_options(request)
            if sub == "finalize":
                result = self.store.update(
                    rt, namespace, name, await self._body(request), dry_run=dry_run
                )
                return _json_response(self._out(rt, result.obj))
            result = self.store.update(
                rt,
                namespace,
                name,
                await self._body(request),
                subresource=sub,
                dry_run=dry_run,
                field_validation=validation,
                admit=self._admission(request),
            )
            return _json_response(self._out(rt, result.obj), warnings=result.warnings)
        if method == "PATCH":
            dry_run, validation = self._write_options(request)
            media = _media_type(request.headers.get("Content-Type"))
            if media not in _PATCH_TYPES:
                raise unsupported_media_type(media, sorted(_PATCH_TYPES))
            result = self.store.patch(
                rt,
                namespace,
                name,
                media,
                await self._body(request),
                subresource=sub,
                dry_run=dry_run,
                field_validation=validation,
                admit=self._admission(request),
            )
            return _json_response(self._out(rt, result.obj), warnings=result.warnings)
        if method == "DELETE" and sub is None:
            return await self._delete(request, rt, namespace, name)
        raise method_not_allowed(f"{method} is not supported here")

    def _object_response(self, request: web.Request, rt: ResourceType, obj: Obj) -> web.Response:
        table_version = _accept_as(request, "Table")
        if table_version:
            include = request.query.get("includeObject", "Metadata")
            return _json_response(
                _tables.table(
                    rt,
                    [self._out(rt, obj)],
                    api_version=table_version,
                    include_object=include,
                    resource_version=meta(obj).get("resourceVersion", ""),
                )
            )
        partial = _accept_as(request, "PartialObjectMetadata")
        if partial:
            return _json_response(_tables.partial_metadata(obj, partial))
        return _json_response(self._out(rt, obj))

    def _list_response(
        self, request: web.Request, rt: ResourceType, items: list[Obj], list_rv: str, token: str
    ) -> web.Response:
        table_version = _accept_as(request, "Table")
        if table_version:
            include = request.query.get("includeObject", "Metadata")
            return _json_response(
                _tables.table(
                    rt,
                    [self._out(rt, obj) for obj in items],
                    api_version=table_version,
                    include_object=include,
                    resource_version=list_rv,
                    continue_token=token,
                )
            )
        partial = _accept_as(request, "PartialObjectMetadataList")
        metadata: Obj = {"resourceVersion": list_rv}
        if token:
            metadata["continue"] = token
        if partial:
            return _json_response(
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": partial,
                    "metadata": metadata,
                    "items": [_tables.partial_metadata(obj, partial) for obj in items],
                }
            )
        return _json_response(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": metadata,
                "items": [self._out(rt, obj) for obj in items],
            }
        )

    async def _delete_options(self, request: web.Request) -> Obj:
        body = await self._body(request)
        options: Obj = dict(body) if isinstance(body, dict) else {}
        query = request.query
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "orphanDependents" in query:
            options["orphanDependents"] = _truthy(query["orphanDependents"])
        if "All" in query.getall("dryRun", []):
            options["dryRun"] = ["All"]
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            options["propagationPolicy"] = "Orphan" if options["orphanDependents"] else "Background"
        if options.get("propagationPolicy") not in (None, "Orphan", "Background", "Foreground"):
            raise bad_request(
                f"propagationPolicy {options['propagationPolicy']!r} is not one of Orphan, "
                f"Background, Foreground"
            )
        return options

    async def _delete(
        self, request: web.Request, rt: ResourceType, namespace: str | None, name: str
    ) -> web.Response:
        options = await self._delete_options(request)
        result = self.store.delete(
            rt,
            namespace,
            name,
            propagation=options.get("propagationPolicy"),
            preconditions=options.get("preconditions"),
            dry_run="All" in (options.get("dryRun") or []),
        )
        if result.removed and not (rt.custom or rt.group_resource in _RETURNS_DELETED_OBJECT):
            details = {"name": name, "group": rt.group, "kind": rt.plural}
            details["uid"] = meta(result.obj).get("uid", "")
            return _json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            )
        return _json_response(self._out(rt, result.obj))

    async def _delete_collection(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.Response:
        options = await self._delete_options(request)
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = self._fields(rt, request.query.get("fieldSelector"))
        deleted: list[Obj] = []
        for obj in list(self.store.objects(rt, namespace, labels=labels, fields=fields)):
            result = self.store.delete(
                rt,
                meta(obj).get("namespace"),
                meta(obj)["name"],
                propagation=options.get("propagationPolicy"),
                dry_run="All" in (options.get("dryRun") or []),
            )
            deleted.append(self._out(rt, result.obj))
        return _json_response(
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": deleted,
            }
        )

    # -- scale ------------------------------------------------------------------------------

    @staticmethod
    def _scale_paths(rt: ResourceType) -> tuple[str, str, str]:
        if rt.scale is not None:
            return (
                str(rt.scale.get("specReplicasPath", ".spec.replicas")),
                str(rt.scale.get("statusReplicasPath", ".status.replicas")),
                str(rt.scale.get("labelSelectorPath", "")),
            )
        return (".spec.replicas", ".status.replicas", "")

    def _scale_object(self, rt: ResourceType, obj: Obj) -> Obj:
        spec_path, status_path, selector_path = self._scale_paths(rt)
        spec_found = _tables.jsonpath(obj, spec_path)
        status_found = _tables.jsonpath(obj, status_path)
        if selector_path:
            found = _tables.jsonpath(obj, selector_path)
            selector = str(found[0]) if found else ""
        else:
            selector = selector_to_string((obj.get("spec") or {}).get("selector"))
        metadata = meta(obj)
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                key: metadata[key]
                for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if key in metadata
            },
            "spec": {"replicas": spec_found[0] if spec_found else 0},
            "status": {"replicas": status_found[0] if status_found else 0, "selector": selector},
        }

    async def _scale(
        self,
        request: web.Request,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        method: str,
    ) -> web.Response:
        obj = self.store.find(rt, namespace, name)
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        scale = self._scale_object(rt, obj)
        if method == "GET":
            return _json_response(scale)
        body = await self._body(request)
        if method == "PUT":
            wanted = body
        elif method == "PATCH":
            media = _media_type(request.headers.get("Content-Type"))
            wanted = json_patch(scale, body) if media == JSON_PATCH else merge_patch(scale, body)
        else:
            raise method_not_allowed(f"{method} is not supported on the scale subresource")
        replicas = ((wanted or {}).get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise bad_request("spec.replicas of a Scale must be a non-negative integer")
        spec_path = self._scale_paths(rt)[0]
        updated = clone(obj)
        target = updated
        keys = [key for key in spec_path.split(".") if key]
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = replicas
        written = self.store.write_spec(rt, obj, updated)
        return _json_response(self._scale_object(rt, written or obj))

    # -- watch ------------------------------------------------------------------------------

    async def _watch(
        self,
        request: web.Request,
        rt: ResourceType,
        namespace: str | None,
        labels: Any,
        fields: FieldSelector,
    ) -> web.StreamResponse:
        query = request.query
        table_version = _accept_as(request, "Table")
        include = query.get("includeObject", "Metadata")
        bookmarks = _truthy(query.get("allowWatchBookmarks"))
        send_initial = _truthy(query.get("sendInitialEvents"))
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        response = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        try:
            watcher, initial = self.store.watch(
                rt,
                namespace,
                labels=labels,
                fields=fields,
                resource_version=None if send_initial else query.get("resourceVersion"),
            )
        except StatusError as error:
            if error.code != 410:
                raise
            await response.prepare(request)
            line = json.dumps({"type": "ERROR", "object": error.status()}) + "\n"
            await response.write(line.encode())
            await response.write_eof()
            return response

        def encode(kind: str, obj: Obj) -> bytes:
            shown: Obj = self._out(rt, obj)
            if table_version and kind != "BOOKMARK":
                shown = _tables.table(
                    rt,
                    [shown],
                    api_version=table_version,
                    include_object=include,
                    resource_version=meta(obj).get("resourceVersion", ""),
                )
            return dumps_body({"type": kind, "object": shown}) + b"\n"

        def bookmark(annotations: Mapping[str, str] | None = None) -> bytes:
            metadata: Obj = {"resourceVersion": str(self.store.resource_version)}
            if annotations:
                metadata["annotations"] = dict(annotations)
            obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": metadata}
            return encode("BOOKMARK", obj)

        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            await response.prepare(request)
            for start in range(0, len(initial), WATCH_BATCH):
                await response.write(
                    b"".join(
                        encode(kind, obj) for kind, obj in initial[start : start + WATCH_BATCH]
                    )
                )
            if send_initial:
                await response.write(bookmark({_INITIAL_EVENTS_END: "true"}))
            last_bookmark = time.monotonic()
            while not self._stopping.is_set():
                wait = min(1.0, self.bookmark_interval) if bookmarks else 1.0
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        break
                item: tuple[str, Obj] | None = ("", {})
                try:
                    async with asyncio.timeout(max(wait, 0.001)):
                        item = await watcher.queue.get()
                except TimeoutError:
                    pass
                if item is None:
                    break
                # What else is queued goes in the same write: in a burst, one write (one
                # syscall) per event and watcher was a seventh of the devcluster's CPU.
                chunk = [encode(*item)] if item[0] else []
                while len(chunk) < WATCH_BATCH and not watcher.queue.empty():
                    item = watcher.queue.get_nowait()
                    if item is None:
                        break
                    chunk.append(encode(*item))
                if chunk:
                    await response.write(b"".join(chunk))
                if item is None:
                    break
                if (
                    bookmarks
                    and not table_version
                    and watcher.queue.empty()
                    and time.monotonic() - last_bookmark >= self.bookmark_interval
                ):
                    await response.write(bookmark())
                    last_bookmark = time.monotonic()
                transport = request.transport
                if transport is None or transport.is_closing():
                    break
            await response.write_eof()
        except ConnectionResetError:
            pass
        finally:
            self.store.unwatch(watcher)
        return response

    # -- logs -------------------------------------------------------------------------------

    async def _logs(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pods = self.store.type_for("", "pods")
        pod = self.store.find(pods, namespace, name)
        if pod is None:
            raise not_found("pods", name)
        containers = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
        init = [c.get("name", "") for c in (pod.get("spec") or {}).get("initContainers") or []]
        container = request.query.get("container")
        if not container:
            if len(containers) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(containers)}]"
                )
            container = containers[0]
        if container not in containers + init:
            raise bad_request(f"container {container} is not valid for pod {name}")
        follow = _truthy(request.query.get("follow"))
        tail = request.query.get("tailLines")
        limit = request.query.get("limitBytes")
        previous = _truthy(request.query.get("previous"))
        path = (
            self.logs.log_file(namespace, name, container, previous=previous) if self.logs else None
        )
        if previous and path is None:  # the kubelet's words for a container not restarted
            raise bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'
            )
        data = path.read_bytes() if path is not None and path.exists() else b""
        if tail is not None and tail.lstrip("-").isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(tail) :]) if int(tail) > 0 else b""
        if limit is not None and limit.isdigit():
            data = data[: int(limit)]
        if not follow:
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(data)
            offset = path.stat().st_size if path is not None and path.exists() else 0
            while not self._stopping.is_set():
                running = self.logs is not None and self.logs.is_running(namespace, name, container)
                if path is not None and path.exists():
                    with path.open("rb") as handle:
                        handle.seek(offset)
                        chunk = handle.read()
                    if chunk:
                        offset += len(chunk)
                        await response.write(chunk)
                        continue
                if not running:
                    break
                await asyncio.sleep(0.1)
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response


def _single_name(selector: str | None) -> str:
    """The name a list or watch asks for with ``fieldSelector=metadata.name=X`` (RequestInfo)."""
    if not selector or "," in selector:
        return ""
    for op in ("==", "="):
        key, sep, value = selector.partition(op)
        if sep and key.strip() == "metadata.name" and "!" not in key:
            return value.strip()
    return ""


def _no_resource() -> StatusError:
    return StatusError(404, "NotFound", "the server could not find the requested resource")
