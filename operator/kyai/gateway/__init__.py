"""The judge gateway (``kyai judge-gateway``): the default judge without its key in tenants' hands.

An OpenAI-compatible proxy that the operator's release runs in its own namespace. Judge
workers authenticate with their pod's projected ServiceAccount token; the gateway verifies it
with a TokenReview, checks that the pod is an EvaluationRun's judge worker, applies the
namespace's limits, puts the judge's key on the request and forwards only
``/v1/chat/completions`` and ``/v1/models`` for the default judge's model, counting requests
and tokens per namespace. Its admin port also answers ``GET /upstream/v1/models``, the judge's
model list as a worker would get it, for the operator to check the judge before a run. See
:mod:`kyai.gateway._proxy` and docs/how-to/share-the-judge.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kyai._lazy import lazy_exports

if TYPE_CHECKING:
    from kyai.gateway._auth import (
        UNKNOWN_NAMESPACE,
        Caller,
        Refusal,
        RefusedError,
        TokenVerifier,
        WorkerRule,
        bearer_token,
        unverified_claims,
    )
    from kyai.gateway._body import BodyError, StreamUsage, only_model, prepare_chat, usage_of
    from kyai.gateway._files import FileUnreadableError, WatchedFile
    from kyai.gateway._kube import (
        EXTRA_POD_NAME,
        EXTRA_POD_UID,
        ApiServerConfig,
        ClusterAPI,
        ClusterAPIError,
        ClusterConfigError,
        KubernetesAPI,
        TokenReviewStatus,
    )
    from kyai.gateway._limits import (
        Limiter,
        LimitExceededError,
        NamespaceLimiter,
        TokenBucket,
        retry_after_seconds,
    )
    from kyai.gateway._metrics import GatewayMetrics
    from kyai.gateway._proxy import (
        CHAT_PATH,
        MODELS_PATH,
        UPSTREAM_CHECK_BASE,
        UPSTREAM_CHECK_CACHE_SECONDS,
        UPSTREAM_CHECK_PATH,
        Gateway,
        GatewayError,
    )
    from kyai.gateway._redact import REDACTED, RedactingFilter, Redactor
    from kyai.gateway._settings import (
        DEFAULT_AUDIENCE,
        ENV_PREFIX,
        JUDGE_COMPONENT,
        GatewaySettings,
        LimitOverride,
        Limits,
        describe_errors,
        env_variable,
        normalise_upstream,
    )
    from kyai.gateway._shared import SharedAnswer
    from kyai.gateway._worker import (
        MIN_TOKEN_EXPIRATION_SECONDS,
        TOKEN_MOUNT_PATH,
        TOKEN_VOLUME,
        token_mount,
        token_volume,
    )

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._auth": (
            "UNKNOWN_NAMESPACE",
            "Caller",
            "Refusal",
            "RefusedError",
            "TokenVerifier",
            "WorkerRule",
            "bearer_token",
            "unverified_claims",
        ),
        "._body": (
            "BodyError",
            "StreamUsage",
            "only_model",
            "prepare_chat",
            "usage_of",
        ),
        "._files": (
            "FileUnreadableError",
            "WatchedFile",
        ),
        "._kube": (
            "EXTRA_POD_NAME",
            "EXTRA_POD_UID",
            "ApiServerConfig",
            "ClusterAPI",
            "ClusterAPIError",
            "ClusterConfigError",
            "KubernetesAPI",
            "TokenReviewStatus",
        ),
        "._limits": (
            "Limiter",
            "LimitExceededError",
            "NamespaceLimiter",
            "TokenBucket",
            "retry_after_seconds",
        ),
        "._metrics": ("GatewayMetrics",),
        "._proxy": (
            "CHAT_PATH",
            "MODELS_PATH",
            "UPSTREAM_CHECK_BASE",
            "UPSTREAM_CHECK_CACHE_SECONDS",
            "UPSTREAM_CHECK_PATH",
            "Gateway",
            "GatewayError",
        ),
        "._redact": (
            "REDACTED",
            "RedactingFilter",
            "Redactor",
        ),
        "._settings": (
            "DEFAULT_AUDIENCE",
            "ENV_PREFIX",
            "JUDGE_COMPONENT",
            "GatewaySettings",
            "LimitOverride",
            "Limits",
            "describe_errors",
            "env_variable",
            "normalise_upstream",
        ),
        "._shared": ("SharedAnswer",),
        "._worker": (
            "MIN_TOKEN_EXPIRATION_SECONDS",
            "TOKEN_MOUNT_PATH",
            "TOKEN_VOLUME",
            "token_mount",
            "token_volume",
        ),
    },
)

__all__ = [
    "CHAT_PATH",
    "DEFAULT_AUDIENCE",
    "ENV_PREFIX",
    "EXTRA_POD_NAME",
    "EXTRA_POD_UID",
    "JUDGE_COMPONENT",
    "MIN_TOKEN_EXPIRATION_SECONDS",
    "MODELS_PATH",
    "REDACTED",
    "TOKEN_MOUNT_PATH",
    "TOKEN_VOLUME",
    "UNKNOWN_NAMESPACE",
    "UPSTREAM_CHECK_BASE",
    "UPSTREAM_CHECK_CACHE_SECONDS",
    "UPSTREAM_CHECK_PATH",
    "ApiServerConfig",
    "BodyError",
    "Caller",
    "ClusterAPI",
    "ClusterAPIError",
    "ClusterConfigError",
    "FileUnreadableError",
    "Gateway",
    "GatewayError",
    "GatewayMetrics",
    "GatewaySettings",
    "KubernetesAPI",
    "LimitExceededError",
    "LimitOverride",
    "Limiter",
    "Limits",
    "NamespaceLimiter",
    "RedactingFilter",
    "Redactor",
    "Refusal",
    "RefusedError",
    "SharedAnswer",
    "StreamUsage",
    "TokenBucket",
    "TokenReviewStatus",
    "TokenVerifier",
    "WatchedFile",
    "WorkerRule",
    "bearer_token",
    "describe_errors",
    "env_variable",
    "normalise_upstream",
    "only_model",
    "prepare_chat",
    "retry_after_seconds",
    "token_mount",
    "token_volume",
    "unverified_claims",
    "usage_of",
]
