"""The stand-in's HTTP server: the engine's routes around the LLM double's chat handler.

Health and ``/v1/models`` are the engine's own; chat completions are answered by an
:class:`~kyai_testing.LLMDouble` (never started itself: its request handler is mounted here),
so scripted rules, the tokenizer and the context-length wording are the double's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from kyai_testing._double import LLMDouble
from kyai_testing._model import DEFAULT_CONTENT, ModelSpec, Rule, count_prompt_tokens
from kyai_testing._servers import error_answer
from kyai_testing.engines._common import DEFAULT_REASONING, EngineStandin, ServeConfig

#: Seconds in-flight requests get when the stand-in stops.
SHUTDOWN_TIMEOUT_S = 1.0

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class StandinServer:
    """One engine stand-in: loads for ``load_seconds`` (health 503), then serves (200).

    ``rules`` script the answers (the double's :class:`~kyai_testing.Rule`); when none
    matches, the answer is ``answer``. Answers stream when asked, their first token
    ``ttft_s`` after the request and one every ``token_s`` after it; the engine's serving
    metrics (``EngineStandin.metrics``) are on ``/metrics``. When the command line enables a
    reasoning parser, every answer without scripted reasoning carries ``reasoning`` as
    ``reasoning_content``.
    """

    def __init__(
        self,
        standin: EngineStandin,
        config: ServeConfig,
        *,
        load_seconds: float = 0.0,
        rules: Sequence[Rule] = (),
        answer: str = DEFAULT_CONTENT,
        reasoning: str = DEFAULT_REASONING,
        host: str | None = None,
        ttft_s: float = 0.0,
        token_s: float = 0.0,
    ) -> None:
        self.standin = standin
        self.config = config
        self.load_seconds = load_seconds
        self.host = config.bind_host() if host is None else host
        models = [
            ModelSpec(
                name,
                max_model_len=config.max_model_len if config.enforce_window else None,
                overflow_style=config.settings.get("overflow_style", standin.overflow_style),
                clamp_max_tokens=config.clamp_max_tokens,
            )
            for name in config.served_names
        ]
        scripted = [*rules, Rule(content=answer)]
        if config.reasoning_parser:
            # The parser splits the model's thinking off: every answer carries some.
            field = config.settings.get("reasoning_field", "reasoning_content")
            for rule in scripted:
                if rule.reasoning_content is None and rule.reasoning is None:
                    if field == "reasoning":
                        rule.reasoning = reasoning
                    else:
                        rule.reasoning_content = reasoning
        # The API key is checked by the stand-in's middleware, on the engine's own routes.
        self.metrics_family = standin.metrics(config)
        self.double = LLMDouble(
            models=models,
            rules=scripted,
            ttft_s=ttft_s,
            token_s=token_s,
            metrics=self.metrics_family or "vllm",
        )
        self._runner: web.AppRunner | None = None
        self._ready_at = 0.0
        self._port: int | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the command line's, or the one picked for port 0)."""
        if self._port is None:
            raise RuntimeError("The stand-in is not running.")
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` of the running stand-in."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def loading(self) -> bool:
        """Whether the simulated model load is still under way."""
        return time.monotonic() < self._ready_at

    async def start(self) -> StandinServer:
        """Listen on the configured address; the load timer starts now."""
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self._authenticate])
        for path in self.standin.health_paths:
            app.router.add_get(path, self._health)
        app.router.add_get("/v1/models", self._loaded(self._models))
        app.router.add_post("/v1/chat/completions", self._loaded(self._chat))
        if self.metrics_family is not None:
            app.router.add_get("/metrics", self.double.metrics_handler)
        extra = self.standin.extra_routes(self.config) if self.standin.extra_routes else {}
        for path, body in extra.items():
            app.router.add_get(path, self._loaded(_json_handler(body)))
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.config.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        self._ready_at = time.monotonic() + self.load_seconds
        return self

    async def stop(self) -> None:
        """Stop listening (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def serve_until(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()

    # -- handlers ------------------------------------------------------------------------

    async def _health(self, _: web.Request) -> web.Response:
        return web.Response(status=503 if self.loading else 200)

    def _loaded(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            if self.loading:
                status, body = error_answer(
                    self.double.style, 503, "The server is still loading the model."
                )
                return web.json_response(body, status=status)
            return await handler(request)

        return guarded

    def _authorized(self, request: web.Request) -> bool:
        if not self.config.api_keys or self.standin.auth_exempt(request.path):
            return True
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        # Compare every key in constant time, as vLLM does.
        matched = False
        for key in self.config.api_keys:
            matched |= hmac.compare_digest(token.encode(), key.encode())
        return matched

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" and not self._authorized(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def _models(self, _: web.Request) -> web.Response:
        cards = self.standin.model_cards(self.config, int(time.time()))
        return web.json_response({"object": "list", "data": cards})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.standin.refusal is not None:
            refused = await self._refusal(request)
            if refused is not None:
                return refused
        # The double's own handler: rules, tokenizer, errors and the request record.
        return await self.double._chat(request)

    async def _refusal(self, request: web.Request) -> web.Response | None:
        """The engine's own refusal of a request too long for it (engines the double lacks)."""
        assert self.standin.refusal is not None
        try:
            body: Any = json.loads(await request.read())
        except ValueError:
            return None  # the double words the malformed body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return None
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if requested is not None and (
            isinstance(requested, bool) or not isinstance(requested, int)
        ):
            return None
        message = self.standin.refusal(self.config, count_prompt_tokens(messages), requested)
        if message is None:
            return None
        status, payload = error_answer(self.standin.overflow_style, 400, message)
        return web.json_response(payload, status=status)


def _json_handler(body: Any) -> Handler:
    async def handler(_: web.Request) -> web.Response:
        return web.json_response(body)

    return handler
