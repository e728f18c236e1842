"""What real OpenAI-compatible servers answer when a request does not fit, word for word.

Each function returns ``(http_status, json_body)`` in the shape and wording of one server
family, so that a client's context-length handling can be tested against the real strings.
Sources (read from the servers' own code, quoted verbatim):

``vllm``
    Current vLLM (the renderer refactor, ``vllm/renderers/params.py``; the wording of 0.32 and
    0.34, seen from 0.32's own server): ``max_tokens`` over the window is refused ("cannot be
    greater than max_model_len=N"); a prompt over it too, tokenized with truncation at
    ``max_input_tokens + 1``, hence "at least"; the message ends with the
    ``(parameter=…, value=…)`` suffix that ``VLLMValidationError.__str__`` appends
    (``vllm/exceptions.py``); the body is ``{"error": ErrorInfo}`` with ``code`` the HTTP
    status (``ErrorInfo``/``ErrorResponse`` in ``vllm/entrypoints/openai/engine/protocol.py``).
    0.32 answers a prompt that fits with ``max_tokens`` over the rest, clamping ``max_tokens``:
    pair the style with ``clamp_max_tokens=True`` to imitate it (without, the refusal an earlier
    renderer gave, "you requested M output tokens and your prompt contains at least P").
``vllm_v0_10``
    vLLM ≈0.6–0.11 (``OpenAIServing._validate_input`` in
    ``vllm/entrypoints/openai/serving_engine.py``): "'max_tokens' or 'max_completion_tokens' is
    too large: …" and "However, your request has N input tokens", nested error body.
``vllm_legacy``
    vLLM ≤0.5 (``_validate_prompt_and_tokenize`` in the same file): "However, you requested M
    tokens (P in the messages, C in the completion)", flat ``{"object": "error", …}`` body.
``sglang``
    SGLang (``TokenizerManager._validate_one_request`` in
    ``python/sglang/srt/managers/tokenizer_manager.py``; flat body from
    ``OpenAIServingBase.create_error_response`` in
    ``python/sglang/srt/entrypoints/openai/serving_base.py``).
``llamacpp``
    llama.cpp's ``llama-server`` (``tools/server/server-context.cpp``: "request (%d tokens)
    exceeds the available context size (%d tokens), try increasing it";
    ``format_error_response`` in ``tools/server/server-common.cpp`` gives type
    ``exceed_context_size_error`` and code 400; ``server_task_result_error::to_json`` in
    ``tools/server/server-task.cpp`` adds ``n_prompt_tokens`` and ``n_ctx``). llama-server
    never rejects an oversized ``max_tokens``: it stops generating when the context is full, so
    pair this style with ``clamp_max_tokens=True``.
``llama_cpp_python``
    llama-cpp-python's server (``ErrorResponseFormatters.context_length_exceeded`` in
    ``llama_cpp/server/errors.py``): code ``context_length_exceeded``, param ``messages``; its
    ``Llama`` clamps an oversized ``max_tokens`` and raises only when the prompt alone does not
    fit, and the message then prints the request's ``max_tokens`` as given (``None`` if absent).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Literal, TypeAlias

OverflowStyle: TypeAlias = Literal[
    "vllm", "vllm_v0_10", "vllm_legacy", "sglang", "llamacpp", "llama_cpp_python"
]

#: Every accepted ``overflow_style``, in documentation order.
OVERFLOW_STYLES: tuple[OverflowStyle, ...] = (
    "vllm",
    "vllm_v0_10",
    "vllm_legacy",
    "sglang",
    "llamacpp",
    "llama_cpp_python",
)

#: ``owned_by`` on the ``/v1/models`` card, per style.
OWNED_BY: dict[OverflowStyle, str] = {
    "vllm": "vllm",
    "vllm_v0_10": "vllm",
    "vllm_legacy": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "llama_cpp_python": "me",
}

Answer: TypeAlias = tuple[int, dict[str, Any]]

# vLLM/SGLang name error types after OpenAI's Python exception classes.
_PYTHON_ERROR_TYPES: dict[int, str] = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    501: "NotImplementedError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}

# llama.cpp's format_error_response (tools/server/server-common.cpp).
_LLAMACPP_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}

# OpenAI's own error types, which llama-cpp-python imitates.
_OPENAI_ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "internal_server_error",
    503: "service_unavailable",
}


def status_phrase(status: int) -> str:
    """The reason phrase of an HTTP status ("Service Unavailable"), or "Error N"."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"Error {status}"


def default_error_type(style: OverflowStyle, status: int) -> str:
    """The ``type`` a server of ``style`` puts in an error body for ``status``."""
    if style == "llamacpp":
        return _LLAMACPP_ERROR_TYPES.get(status, "server_error")
    if style == "llama_cpp_python":
        return _OPENAI_ERROR_TYPES.get(
            status, "invalid_request_error" if status < 500 else "internal_server_error"
        )
    return _PYTHON_ERROR_TYPES.get(status, status_phrase(status).replace(" ", "") + "Error")


def error_answer(
    style: OverflowStyle,
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    param: str | None = None,
    code: str | int | None = None,
    extra: dict[str, Any] | None = None,
) -> Answer:
    """An error body in the envelope a server of ``style`` uses."""
    err_type = error_type or default_error_type(style, status)
    body: dict[str, Any]
    if style in ("vllm_legacy", "sglang"):
        # Flat: ErrorResponse(object="error", message, type, param, code=status).
        body = {"object": "error", "message": message, "type": err_type, "param": param}
        body["code"] = status if code is None else code
        return status, body
    if style == "llamacpp":
        # {"error": {"code", "message", "type"}} plus per-type extras.
        inner: dict[str, Any] = {"code": status if code is None else code}
        inner.update(message=message, type=err_type)
    elif style == "llama_cpp_python":
        inner = {"message": message, "type": err_type, "param": param, "code": code}
    else:
        # vLLM ≥0.10: {"error": ErrorInfo(message, type, param, code=status)}.
        inner = {"message": message, "type": err_type, "param": param}
        inner["code"] = status if code is None else code
    if extra:
        inner.update(extra)
    return status, {"error": inner}


def unauthorized_answer(style: OverflowStyle) -> Answer:
    """The 401 a server started with ``--api-key`` sends for a missing or wrong key."""
    if style == "llamacpp":
        return error_answer(style, 401, "Invalid API Key")
    # vLLM's (and SGLang's copy of its) api-key middleware: JSONResponse({"error": "Unauthorized"}).
    return 401, {"error": "Unauthorized"}


def model_not_found_answer(style: OverflowStyle, model: str) -> Answer:
    """The vLLM 404 for a model it does not serve (``OpenAIServing._check_model``)."""
    message = f"The model `{model}` does not exist."
    if style in ("vllm", "vllm_v0_10"):
        return error_answer(style, 404, message, error_type="NotFoundError", param="model")
    return error_answer(style, 404, message, error_type="NotFoundError")


def prompt_overflow_answer(
    style: OverflowStyle,
    *,
    prompt_tokens: int,
    max_model_len: int,
    max_tokens: int | None,
    max_tokens_param: str = "max_tokens",
) -> Answer:
    """The 400 for a prompt that alone fills the context (``prompt_tokens >= max_model_len``)."""
    p, n = prompt_tokens, max_model_len
    if style == "vllm":
        return _vllm_current(p, n, max_tokens, max_tokens_param)
    if style == "vllm_v0_10":
        message = (
            f"This model's maximum context length is {n} tokens. However, your request has "
            f"{p} input tokens. Please reduce the length of the input messages."
        )
        return error_answer(style, 400, message)
    if style == "vllm_legacy":
        if max_tokens is not None:
            return total_overflow_answer(
                style, prompt_tokens=p, max_model_len=n, max_tokens=max_tokens
            )
        # Sic: the comma before "Please" is vLLM's.
        message = (
            f"This model's maximum context length is {n} tokens. However, you requested "
            f"{p} tokens in the messages, Please reduce the length of the messages."
        )
        return error_answer(style, 400, message)
    if style == "sglang":
        message = f"The input ({p} tokens) is longer than the model's context length ({n} tokens)."
        return error_answer(style, 400, message)
    if style == "llamacpp":
        return _llamacpp(p, n)
    return _llama_cpp_python(p, n, max_tokens)


def total_overflow_answer(
    style: OverflowStyle,
    *,
    prompt_tokens: int,
    max_model_len: int,
    max_tokens: int,
    max_tokens_param: str = "max_tokens",
) -> Answer:
    """The 400 for a prompt that fits but not with ``max_tokens`` on top."""
    p, n, m = prompt_tokens, max_model_len, max_tokens
    if style == "vllm":
        return _vllm_current(p, n, m, max_tokens_param)
    if style == "vllm_v0_10":
        message = (
            f"'max_tokens' or 'max_completion_tokens' is too large: {m}. This model's maximum "
            f"context length is {n} tokens and your request has {p} input tokens "
            f"({m} > {n} - {p})."
        )
        return error_answer(style, 400, message)
    if style == "vllm_legacy":
        message = (
            f"This model's maximum context length is {n} tokens. However, you requested "
            f"{m + p} tokens ({p} in the messages, {m} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        return error_answer(style, 400, message)
    if style == "sglang":
        message = (
            f"Requested token count exceeds the model's maximum context length of {n} tokens. "
            f"You requested a total of {p + m} tokens: {p} tokens from the input messages and "
            f"{m} tokens for the completion. Please reduce the number of tokens in the input "
            "messages or the completion to fit within the limit."
        )
        return error_answer(style, 400, message)
    if style == "llamacpp":
        # Not something llama-server says (it clamps); the nearest message it has.
        return _llamacpp(p + m, n, n_prompt_tokens=p)
    return _llama_cpp_python(p, n, m)


def _vllm_current(p: int, n: int, m: int | None, param_name: str) -> Answer:
    requested = m or 0
    if requested > n:
        # TokenizeParams.__post_init__, max_total_tokens_param overridden to max_model_len
        # (vLLM 0.32 and 0.34, read from vllm/renderers/params.py and seen from 0.32's server).
        message = (
            f"{param_name}={requested} cannot be greater than max_model_len={n}. Please "
            "request fewer output tokens."
        )
        return error_answer(
            "vllm", 400, f"{message} (parameter={param_name}, value={requested})", param=param_name
        )
    if p >= n:
        # TokenizeParams._token_len_check: the tokenizer truncates at max_input_tokens + 1, so
        # vLLM only knows a lower bound ("at least") once the prompt is over.
        seen = min(p, n + 1)
        qualifier = "at least " if seen == n + 1 else ""
        message = (
            f"This model's maximum context length is {n} tokens. However, your prompt "
            f"contains {qualifier}{seen} input tokens, which exceeds this limit even without "
            "any output tokens. Please reduce the length of the input prompt. "
            f"(parameter=input_tokens, value={seen})"
        )
        return error_answer("vllm", 400, message, param="input_tokens")
    # A prompt that fits, with max_tokens on top over the window: vLLM 0.32 answers and clamps
    # (pair the style with clamp_max_tokens=True for that); an earlier renderer refused it so.
    seen = min(p, n - requested + 1)
    message = (
        f"This model's maximum context length is {n} tokens. However, you requested "
        f"{requested} output tokens and your prompt contains at least {seen} input tokens, "
        f"for a total of at least {seen + requested} tokens. Please reduce the length of the "
        "input prompt or the number of requested output tokens. "
        f"(parameter=input_tokens, value={seen})"
    )
    return error_answer("vllm", 400, message, param="input_tokens")


def _llamacpp(requested: int, n: int, *, n_prompt_tokens: int | None = None) -> Answer:
    message = (
        f"request ({requested} tokens) exceeds the available context size ({n} tokens), "
        "try increasing it"
    )
    extra = {"n_prompt_tokens": requested if n_prompt_tokens is None else n_prompt_tokens}
    extra["n_ctx"] = n
    return error_answer(
        "llamacpp", 400, message, error_type="exceed_context_size_error", extra=extra
    )


def _llama_cpp_python(p: int, n: int, m: int | None) -> Answer:
    message = (
        f"This model's maximum context length is {n} tokens. However, you requested "
        f"{(m or 0) + p} tokens ({p} in the messages, {m} in the completion). "
        "Please reduce the length of the messages or completion."
    )
    return error_answer(
        "llama_cpp_python",
        400,
        message,
        error_type="invalid_request_error",
        param="messages",
        code="context_length_exceeded",
    )
