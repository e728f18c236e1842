"""The gateway's HTTP servers: the proxy (worker pods only) and the admin port.

The proxy serves exactly two routes, both for verified judge workers only:

* ``POST /v1/chat/completions``: the body must name the default judge's model; the caller's
  ``Authorization`` is dropped and the judge's key put in its place; the answer (whole or
  streamed) passes through, its ``usage`` counted for the caller's namespace;
* ``GET /v1/models``: the judge's model list, filtered to the default judge's model.

Anything else is a 404 (405 for another method), answered without looking at the token.
Every answer is counted in ``kyai_judge_gateway_requests_total{namespace,code}``; errors are
OpenAI-shaped (``{"error": {"message", "type", "code"}}``) so that clients show the message.

The admin port (``metrics_port``, open to every pod: Prometheus and the probes use it)
serves ``/metrics``, ``/healthz``, ``/readyz`` and ``GET /upstream/v1/models``: the default
judge's model list exactly as a judge worker gets it from ``GET /v1/models`` (the same
upstream request with the platform's key, the same filtering, the same errors), with no
token, so that the operator can check the judge before a run generates anything. Its
answers are shared: one upstream request at a time, each answer reused for
:data:`UPSTREAM_CHECK_CACHE_SECONDS`; they are counted in
``kyai_judge_gateway_upstream_checks_total{code}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from kyai import __version__
from kyai._json import dumps_body
from kyai.constants import GATEWAY_REFUSED_KEY
from kyai.gateway._auth import (
    UNKNOWN_NAMESPACE,
    Caller,
    RefusedError,
    TokenVerifier,
    WorkerRule,
    bearer_token,
)
from kyai.gateway._body import BodyError, StreamUsage, only_model, prepare_chat, usage_of
from kyai.gateway._files import FileUnreadableError, WatchedFile
from kyai.gateway._kube import ClusterAPI
from kyai.gateway._limits import Limiter, LimitExceededError, NamespaceLimiter
from kyai.gateway._metrics import CONTENT_TYPE, GatewayMetrics
from kyai.gateway._redact import Redactor
from kyai.gateway._settings import GatewaySettings
from kyai.gateway._shared import SharedAnswer

log = logging.getLogger("kyai.gateway")

#: The routes the proxy serves.
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"

#: The admin port's check of the default judge: a base URL for an OpenAI client
#: (``http://<gateway>:<metrics port>/upstream/v1``) and the one route under it.
UPSTREAM_CHECK_BASE = "/upstream/v1"
UPSTREAM_CHECK_PATH = UPSTREAM_CHECK_BASE + "/models"

#: Seconds an answer of the check is reused for every caller (from its arrival): the admin
#: port is open to every pod, so however many call, the judge sees at most one model-list
#: request per this time from the check (and one at a time).
UPSTREAM_CHECK_CACHE_SECONDS = 5.0

#: Upstream answer headers passed on to the caller (no cookies, no hop-by-hop headers).
PASSED_HEADERS = ("Content-Type", "Retry-After", "X-Request-Id")

#: The request key holding the caller's namespace (the metrics' label).
_NAMESPACE = web.RequestKey("namespace", str)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _passed_headers(upstream: aiohttp.ClientResponse) -> dict[str, str]:
    """The upstream answer's headers that the caller gets (:data:`PASSED_HEADERS`)."""
    return {name: value for name in PASSED_HEADERS if (value := upstream.headers.get(name))}


class GatewayError(Exception):
    """An answer the gateway gives instead of the judge's."""

    def __init__(
        self, status: int, reason: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


@dataclass(frozen=True)
class Answer:
    """An answer kept to be sent again (a :class:`~aiohttp.web.Response` is sent once)."""

    status: int
    body: bytes
    headers: Mapping[str, str]

    @classmethod
    def of(cls, response: web.Response) -> Answer:
        """The answer ``response`` gives (its body must be bytes)."""
        body = response.body
        assert isinstance(body, bytes), "only a whole answer is kept"
        return cls(response.status, body, dict(response.headers))

    def response(self) -> web.Response:
        """A new response giving this answer."""
        return web.Response(status=self.status, body=self.body, headers=self.headers)


def error_response(
    status: int, reason: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    """An OpenAI-shaped error answer."""
    body = {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "api_error"),
            "code": reason,
        }
    }
    return web.Response(
        status=status, body=dumps_body(body), content_type="application/json", headers=headers
    )


class Gateway:
    """The judge gateway: verification, limits, forwarding and accounting.

    ``api`` is how tokens and pods are checked (:class:`~kyai.gateway.KubernetesAPI` in a
    cluster). :meth:`start` listens on ``settings.port`` and ``settings.metrics_port``
    (0: a free port; :attr:`port` and :attr:`metrics_port` say which).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        api: ClusterAPI,
        *,
        metrics: GatewayMetrics | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.settings = settings
        self.api = api
        self.limiter = Limiter(settings.limits_for)
        self.metrics = metrics or GatewayMetrics(in_flight=self.limiter.in_flight)
        self.redactor = redactor or Redactor()
        self.verifier = TokenVerifier(
            api,
            audience=settings.audience,
            rule=WorkerRule(
                run_label=settings.run_label,
                component_label=settings.component_label,
                components=settings.worker_components,
            ),
            namespace_selector=settings.namespace_selector,
            success_ttl_s=settings.token_cache_seconds,
            failure_ttl_s=settings.failure_cache_seconds,
            max_concurrent_reviews=settings.max_concurrent_reviews,
            on_review=self.metrics.review,
        )
        self.key = (
            WatchedFile(
                settings.api_key_file,
                what="the judge's API key",
                check_seconds=settings.file_check_seconds,
            )
            if settings.api_key_file
            else None
        )
        self._session: aiohttp.ClientSession | None = None
        self._checks = SharedAnswer(self._check_answer, UPSTREAM_CHECK_CACHE_SECONDS)
        self._runners: list[web.AppRunner] = []
        self.port: int | None = None
        self.metrics_port: int | None = None

    # -- applications --------------------------------------------------------------------

    def proxy_app(self) -> web.Application:
        """The proxy: the two judge routes behind verification and limits."""
        app = web.Application(
            client_max_size=self.settings.max_body_bytes, middlewares=[self._account]
        )
        app.router.add_post(CHAT_PATH, self._chat)
        app.router.add_get(MODELS_PATH, self._models, allow_head=False)
        return app

    def admin_app(self) -> web.Application:
        """The admin port: open to every pod, so nothing on it needs or reads a token.

        ``/metrics``, ``/healthz`` (the process answers), ``/readyz`` (the key is readable),
        and ``GET /upstream/v1/models`` (:data:`UPSTREAM_CHECK_PATH`): the default judge's
        model list as a judge worker gets it from the proxy's ``GET /v1/models`` (filtered
        to the default judge's model; 502 ``UpstreamUnreachable``, 504 ``UpstreamTimeout``,
        502 ``UpstreamRefusedKey`` when the judge refuses the platform's key, 503
        ``KeyUnavailable`` when the key file cannot be read; another status of the judge's
        passed on), for the operator to check the judge before a run. One upstream request
        at a time serves every caller, and its answer is reused for
        :data:`UPSTREAM_CHECK_CACHE_SECONDS`.
        """
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get(UPSTREAM_CHECK_PATH, self._check, allow_head=False)
        return app

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the upstream pool and listen."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=60),
            timeout=aiohttp.ClientTimeout(total=self.settings.upstream_timeout_seconds),
            headers={"User-Agent": f"kyai-judge-gateway/{__version__}"},
        )
        self.port = await self._listen(self.proxy_app(), self.settings.port)
        self.metrics_port = await self._listen(self.admin_app(), self.settings.metrics_port)

    async def _listen(self, app: web.Application, port: int) -> int:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self.settings.bind_address, port)
        await site.start()
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening (in-flight requests get a short grace), close the pools."""
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.api.close()

    # -- accounting ----------------------------------------------------------------------

    @web.middleware
    async def _account(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        request[_NAMESPACE] = UNKNOWN_NAMESPACE
        try:
            response = await handler(request)
        except GatewayError as exc:
            response = error_response(exc.status, exc.reason, str(exc), exc.headers)
        except web.HTTPNotFound:
            response = error_response(
                404,
                "NotFound",
                f"the judge gateway serves only POST {CHAT_PATH} and GET {MODELS_PATH}",
            )
        except web.HTTPMethodNotAllowed as exc:
            response = error_response(
                405, "MethodNotAllowed", f"{request.path} takes {', '.join(exc.allowed_methods)}"
            )
        except Exception:
            log.exception("failed to serve %s %s", request.method, request.path)
            response = error_response(500, "InternalError", "the judge gateway failed")
        self.metrics.answered(request[_NAMESPACE], response.status)
        return response

    # -- handlers ------------------------------------------------------------------------

    async def _caller(self, request: web.Request) -> Caller:
        token = bearer_token(request.headers.get("Authorization"))
        if token is None:
            raise GatewayError(
                401,
                "NoToken",
                "no bearer token: send the judge pod's projected ServiceAccount token "
                f"(audience {self.settings.audience}) as Authorization: Bearer <token>",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            caller = await self.verifier.verify(token)
        except RefusedError as exc:
            refusal = exc.refusal
            if refusal.namespace is not None:
                request[_NAMESPACE] = refusal.namespace
            # A tenant's misconfigured worker (403) is worth a line; unauthenticated noise is not.
            log.log(
                logging.INFO if refusal.namespace is not None else logging.DEBUG,
                "refused %s %s from %s: %s %s",
                request.method,
                request.path,
                refusal.namespace or "an unauthenticated caller",
                refusal.reason,
                refusal.message,
            )
            headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
            raise GatewayError(refusal.status, refusal.reason, refusal.message, headers) from None
        request[_NAMESPACE] = caller.namespace
        return caller

    def _upstream_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.key is not None:
            try:
                key = self.key.read()
            except FileUnreadableError as exc:
                log.error("%s", exc)
                raise GatewayError(
                    503, "KeyUnavailable", "the gateway cannot read the default judge's API key"
                ) from None
            self.redactor.add(key)
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _models_headers(self) -> dict[str, str]:
        """The headers of a ``GET /models`` upstream (the key; GatewayError 503 without it)."""
        headers = self._upstream_headers()
        del headers["Content-Type"]
        return headers

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        caller = await self._caller(request)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise GatewayError(
                413,
                "BodyTooLarge",
                f"the request body is larger than {self.settings.max_body_bytes} bytes",
            ) from None
        try:
            body, _ = prepare_chat(raw, self.settings.model)
        except BodyError as exc:
            raise GatewayError(exc.status, exc.reason, str(exc)) from None
        headers = self._upstream_headers()
        headers["Accept"] = request.headers.get("Accept", "application/json")
        return await self._limited(request, caller, started, "/chat/completions", body, headers)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        caller = await self._caller(request)
        headers = self._models_headers()
        return await self._limited(request, caller, started, "/models", None, headers)

    async def _limited(
        self,
        request: web.Request,
        caller: Caller,
        started: float,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
    ) -> web.StreamResponse:
        waited = time.perf_counter()
        try:
            async with self.limiter.admit(caller.namespace) as limiter:
                waited = time.perf_counter() - waited
                return await self._forward(
                    request, caller, limiter, path, body, headers, started + waited
                )
        except LimitExceededError as exc:
            raise GatewayError(
                429, "LimitExceeded", str(exc), {"Retry-After": str(exc.retry_after)}
            ) from None

    # -- forwarding ----------------------------------------------------------------------

    @asynccontextmanager
    async def _upstream(
        self, path: str, body: bytes | None, headers: dict[str, str]
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request to the default judge (POST with ``body``, else GET), its answer open.

        A time-out is a GatewayError 504 ``UpstreamTimeout`` and a failed connection a 502
        ``UpstreamUnreachable``, whether sending or reading the answer inside the block.
        """
        assert self._session is not None, "the gateway is not started"
        try:
            async with self._session.request(
                "POST" if body is not None else "GET",
                self.settings.upstream_url + path,
                data=body,
                headers=headers,
                allow_redirects=False,
            ) as upstream:
                yield upstream
        except TimeoutError:
            raise GatewayError(
                504,
                "UpstreamTimeout",
                f"the default judge did not answer within "
                f"{self.settings.upstream_timeout_seconds:g} s",
            ) from None
        except aiohttp.ClientError as exc:
            log.warning("the default judge cannot be reached: %s", self.redactor.text(str(exc)))
            raise GatewayError(
                502,
                "UpstreamUnreachable",
                f"the gateway cannot reach the default judge ({type(exc).__name__})",
            ) from None

    def _passed_on(
        self, path: str, upstream: aiohttp.ClientResponse, data: bytes, on_behalf: str
    ) -> web.Response:
        """The caller's answer for the judge's whole answer ``data`` to ``path``.

        The judge refusing the platform's key (401, 403) is a GatewayError 502
        ``UpstreamRefusedKey`` (counted, logged naming ``on_behalf``); a model list is
        filtered to the default judge's model; the key is redacted.
        """
        status = upstream.status
        if status in (401, 403):
            # The platform's key, not the caller's token: the caller can do nothing about it,
            # so the judge's refusal is never passed through as if the caller were refused.
            self.metrics.refused_key(status)
            log.error(
                "the default judge refused the platform's API key (HTTP %s) on %s: fix "
                "defaultJudge.apiKeySecret",
                status,
                on_behalf,
            )
            raise GatewayError(
                502,
                GATEWAY_REFUSED_KEY,
                f"the default judge refused the platform's API key (HTTP {status}); the "
                "platform team must fix defaultJudge.apiKeySecret",
            )
        if status == 200 and path == "/models":
            data = only_model(data, self.settings.model) or data
        return web.Response(
            status=status, body=self.redactor.bytes(data), headers=_passed_headers(upstream)
        )

    async def _forward(
        self,
        request: web.Request,
        caller: Caller,
        limiter: NamespaceLimiter,
        path: str,
        body: bytes | None,
        headers: dict[str, str],
        started: float,
    ) -> web.StreamResponse:
        upstream_started = time.perf_counter()
        async with self._upstream(path, body, headers) as upstream:
            if "text/event-stream" in upstream.headers.get("Content-Type", ""):
                return await self._stream(
                    request,
                    upstream,
                    _passed_headers(upstream),
                    caller,
                    started,
                    upstream_started,
                    limiter,
                )
            data = await upstream.read()
        upstream_s = time.perf_counter() - upstream_started
        limiter.observe(upstream_s)
        response = self._passed_on(
            path, upstream, data, f"a request of namespace {caller.namespace}"
        )
        if response.status == 200 and path == "/chat/completions":
            self.metrics.usage(caller.namespace, usage_of(data))
        self.metrics.overhead.observe(max(0.0, time.perf_counter() - started - upstream_s))
        return response

    async def _stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        caller: Caller,
        started: float,
        upstream_started: float,
        limiter: NamespaceLimiter,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        usage = StreamUsage()
        upstream_s = 0.0
        try:
            async for chunk in upstream.content.iter_any():
                usage.feed(chunk)
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:
            log.info("a caller of namespace %s left during a streamed answer", caller.namespace)
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = self.redactor.text(str(exc)) or type(exc).__name__
            log.warning("the default judge's stream broke: %s", reason)
        finally:
            usage.close()
            upstream_s = time.perf_counter() - upstream_started
            limiter.observe(upstream_s)
            self.metrics.usage(caller.namespace, usage.usage)
        self.metrics.overhead.observe(max(0.0, time.perf_counter() - started - upstream_s))
        return response

    # -- admin ---------------------------------------------------------------------------

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _check(self, _: web.Request) -> web.Response:
        answer = await self._checks.get()
        self.metrics.checked(answer.status)
        return answer.response()

    async def _check_answer(self) -> Answer:
        """The check's next shared answer: the proxy's ``GET /v1/models`` without a caller.

        The same upstream request, filtering and errors; a GatewayError becomes its answer
        (kept like any other), a bug a counted 500 as on the proxy.
        """
        try:
            headers = self._models_headers()
            async with self._upstream("/models", None, headers) as upstream:
                data = await upstream.read()
            response = self._passed_on(
                "/models", upstream, data, f"the admin port's check ({UPSTREAM_CHECK_PATH})"
            )
        except GatewayError as exc:
            response = error_response(exc.status, exc.reason, str(exc), exc.headers)
        except Exception:
            log.exception("failed to check the default judge")
            response = error_response(500, "InternalError", "the judge gateway failed")
        return Answer.of(response)

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._session is None:
            return web.Response(status=503, text="not started\n")
        if self.key is not None:
            try:
                self.key.read()
            except FileUnreadableError as exc:
                return web.Response(status=503, text=f"{exc}\n")
        return web.Response(text="ready\n")
