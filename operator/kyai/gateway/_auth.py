"""Who is calling: a judge worker of an EvaluationRun, proven by its pod's projected token.

A caller sends its pod's projected ServiceAccount token (audience :data:`DEFAULT_AUDIENCE`,
short-lived, rotated by the kubelet). The gateway

1. refuses at once what cannot be a valid token for it, reading the JWT's claims without
   checking the signature (not a JWT, another audience, past its ``exp``): refusing on
   unverified claims never lets anyone in, and spares the API server a flood of bad tokens;
2. asks the API server with a TokenReview for its audience: the review is what
   authenticates (signature, expiry, and that the pod the token is bound to still exists);
3. checks the answer: ``status.audiences`` holds its audience, the user is a ServiceAccount
   (``system:serviceaccount:NS:SA``) and the token is bound to a pod (``extra`` names the pod
   and its uid);
4. when a namespace selector is set, reads the namespace and checks its labels;
5. reads the pod: it has the token's uid, runs as the token's ServiceAccount and carries the
   run label and a worker component label (``judge``).

Outcomes are cached by the SHA-256 of the token (never the token itself): a caller for
``token_cache_seconds`` and never past the token's ``exp``, a refusal for
``failure_cache_seconds``. Concurrent first requests with one token share one review, and at
most ``max_concurrent_reviews`` reviews run at once. When the API server cannot answer, the
caller gets 503 and nothing is cached.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kyai.gateway._kube import EXTRA_POD_NAME, EXTRA_POD_UID, ClusterAPI, ClusterAPIError
from kyai.label_selector import LabelSelector

#: The ``namespace`` label of requests whose caller is not known (no token, a refused one).
UNKNOWN_NAMESPACE = "unknown"

#: Tokens longer than this are refused unread (projected tokens are about 1 KB).
MAX_TOKEN_LENGTH = 16 * 1024

#: Verified tokens (and refusals) kept at most; the oldest go first.
MAX_CACHE_ENTRIES = 10_000


@dataclass(frozen=True)
class Caller:
    """A verified judge worker."""

    namespace: str
    service_account: str
    pod: str
    run: str


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: HTTP status, a CamelCase reason and a message for the caller.

    ``namespace`` is the caller's namespace when the API server authenticated the token
    (the metrics' label), else None.
    """

    status: int
    reason: str
    message: str
    namespace: str | None = None


class RefusedError(Exception):
    """Raised by :meth:`TokenVerifier.verify`; carries the :class:`Refusal`."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass(frozen=True)
class WorkerRule:
    """What makes a pod an EvaluationRun's worker that may call the judge."""

    run_label: str
    component_label: str
    components: tuple[str, ...]

    def problem(
        self,
        pod: Mapping[str, Any] | None,
        *,
        namespace: str,
        name: str,
        uid: str,
        service_account: str,
    ) -> str | None:
        """Why ``pod`` is not the token's worker pod, or None when it is."""
        where = f"pod {namespace}/{name}"
        if pod is None:
            return f"{where} does not exist"
        metadata = pod.get("metadata") or {}
        if str(metadata.get("uid") or "") != uid:
            return f"{where} is not the pod the token was issued to (its uid differs)"
        labels = metadata.get("labels") or {}
        if not labels.get(self.run_label):
            return f"{where} is not an EvaluationRun's worker: it has no {self.run_label} label"
        component = labels.get(self.component_label)
        if component not in self.components:
            allowed = " or ".join(self.components)
            return (
                f"{where} is not a judge worker: its {self.component_label} label is "
                f"{component!r}, not {allowed}"
            )
        spec = pod.get("spec") or {}
        account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        if account != service_account:
            return f"{where} runs as ServiceAccount {account}, the token is {service_account}'s"
        return None


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, read without checking its signature (None if it is not one)."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    payload = parts[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:  # binascii.Error, JSONDecodeError and UnicodeDecodeError all are
        return None
    return claims if isinstance(claims, dict) else None


def precheck(token: str, audience: str, now: float) -> float | None:
    """Refuse (RefusedError, 401) what cannot be a valid token for ``audience``; its ``exp``.

    Only the claims are read here; the TokenReview authenticates.
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise RefusedError(Refusal(401, "Malformed", "the bearer token is too long"))
    claims = unverified_claims(token)
    if claims is None:
        raise RefusedError(
            Refusal(
                401,
                "Malformed",
                "the bearer token is not a JWT: send the pod's projected ServiceAccount token",
            )
        )
    raw = claims.get("aud")
    audiences = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    if audience not in audiences:
        raise RefusedError(
            Refusal(
                401,
                "WrongAudience",
                f"the token's audiences are {json.dumps(audiences)}, not {audience!r}: mount a "
                f"projected ServiceAccount token with audience {audience}",
            )
        )
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        if exp <= now:
            when = datetime.fromtimestamp(exp, UTC).isoformat(timespec="seconds")
            raise RefusedError(Refusal(401, "Expired", f"the token expired at {when}"))
        return float(exp)
    return None


def service_account_of(username: str) -> tuple[str, str] | None:
    """(namespace, name) of ``system:serviceaccount:NS:NAME``, else None."""
    parts = username.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not all(parts[2:]):
        return None
    return parts[2], parts[3]


@dataclass
class _Entry:
    expires: float
    outcome: Caller | Refusal


class TokenVerifier:
    """Turns a bearer token into a :class:`Caller` or a :class:`Refusal` (see the module)."""

    def __init__(
        self,
        api: ClusterAPI,
        *,
        audience: str,
        rule: WorkerRule,
        namespace_selector: LabelSelector | None = None,
        success_ttl_s: float = 60.0,
        failure_ttl_s: float = 10.0,
        max_concurrent_reviews: int = 16,
        max_entries: int = MAX_CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_review: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.audience = audience
        self.rule = rule
        self.selector = namespace_selector or LabelSelector()
        self.success_ttl_s = success_ttl_s
        self.failure_ttl_s = failure_ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._wall = wall_clock
        self._on_review = on_review
        self._slots = asyncio.Semaphore(max_concurrent_reviews)
        self._cache: dict[bytes, _Entry] = {}
        self._pending: dict[bytes, asyncio.Future[Caller | Refusal]] = {}

    def __len__(self) -> int:
        return len(self._cache)

    async def verify(self, token: str) -> Caller:
        """The caller ``token`` proves (RefusedError otherwise)."""
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        entry = self._cache.get(key)
        if entry is not None:
            if entry.expires > self._clock():
                return _outcome(entry.outcome)
            del self._cache[key]
        exp = precheck(token, self.audience, self._wall())
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._review(key, token, exp))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        # Shielded: a caller that goes away does not cancel the review others wait for.
        return _outcome(await asyncio.shield(pending))

    async def _review(self, key: bytes, token: str, exp: float | None) -> Caller | Refusal:
        async with self._slots:
            try:
                outcome = await self._decide(token)
            except ClusterAPIError as exc:
                self._count("error")
                return Refusal(503, "ReviewUnavailable", f"the gateway cannot verify tokens: {exc}")
        self._count("accepted" if isinstance(outcome, Caller) else "refused")
        ttl = self.success_ttl_s if isinstance(outcome, Caller) else self.failure_ttl_s
        if exp is not None:
            ttl = min(ttl, exp - self._wall())
        if ttl > 0:
            self._store(key, _Entry(self._clock() + ttl, outcome))
        return outcome

    def _count(self, result: str) -> None:
        if self._on_review is not None:
            self._on_review(result)

    def _store(self, key: bytes, entry: _Entry) -> None:
        if len(self._cache) >= self.max_entries:
            now = self._clock()
            for stale in [k for k, e in self._cache.items() if e.expires <= now]:
                del self._cache[stale]
            while len(self._cache) >= self.max_entries:
                del self._cache[next(iter(self._cache))]
        self._cache[key] = entry

    async def _decide(self, token: str) -> Caller | Refusal:
        status = await self.api.review_token(token, [self.audience])
        if not status.authenticated:
            reason = status.error or "no reason given"
            return Refusal(401, "Unauthenticated", f"the API server refused the token: {reason}")
        if self.audience not in status.audiences:
            return Refusal(
                401,
                "WrongAudience",
                f"the TokenReview did not confirm audience {self.audience!r} "
                f"(status.audiences: {json.dumps(list(status.audiences))})",
            )
        account = service_account_of(status.username)
        if account is None:
            return Refusal(
                403,
                "NotAServiceAccount",
                f"{status.username or 'the caller'} is not a ServiceAccount: only "
                "EvaluationRun judge workers may use the default judge",
            )
        namespace, name = account
        pod_name, pod_uid = status.extra_value(EXTRA_POD_NAME), status.extra_value(EXTRA_POD_UID)
        if not pod_name or not pod_uid:
            return Refusal(
                403,
                "NotBoundToPod",
                f"the token of {status.username} is not bound to a pod (a judge pod's projected "
                "token is; a token from `kubectl create token` without a pod is not)",
                namespace,
            )
        refusal = await self._namespace_refusal(namespace)
        if refusal is not None:
            return refusal
        pod = await self.api.get_pod(namespace, pod_name)
        problem = self.rule.problem(
            pod, namespace=namespace, name=pod_name, uid=pod_uid, service_account=name
        )
        if problem is not None:
            return Refusal(403, "NotAWorker", problem, namespace)
        assert pod is not None
        run = str(((pod.get("metadata") or {}).get("labels") or {})[self.rule.run_label])
        return Caller(namespace=namespace, service_account=name, pod=pod_name, run=run)

    async def _namespace_refusal(self, namespace: str) -> Refusal | None:
        if self.selector.empty:
            return None
        found = await self.api.get_namespace(namespace)
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        if found is not None and self.selector.matches(labels):
            return None
        return Refusal(
            403,
            "NamespaceNotSelected",
            f"namespace {namespace} is not selected by the default judge's namespace selector "
            f"(defaultJudge.namespaceSelector: {self.selector.describe()})",
            namespace,
        )


def _outcome(outcome: Caller | Refusal) -> Caller:
    if isinstance(outcome, Refusal):
        raise RefusedError(outcome)
    return outcome
