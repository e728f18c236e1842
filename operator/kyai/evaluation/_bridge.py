"""``ctx.responses_create`` / ``ctx.embeddings_create`` for model-backed graders.

The grader code runs sandboxed with no network; its model calls come out through the
sandbox's channel and are made here, against the judge endpoint, with the judge's key. A
Responses-style request is sent as a chat completion (every OpenAI-compatible server has
that route); the answer comes back in the Responses shape with ``output_text`` filled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from kyai.evaluation._client import ChatClient
from kyai.graders import ModelBridge

#: Request fields passed through to the chat completion as they are.
_PASSED = ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")


def _messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    given = request.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        for item in given:
            if not isinstance(item, Mapping):
                continue
            content = item.get("content")
            if isinstance(content, list):  # Responses content parts → text
                content = "".join(
                    str(part.get("text", "")) for part in content if isinstance(part, Mapping)
                )
            messages.append({"role": str(item.get("role", "user")), "content": content or ""})
    else:
        raise ValueError("responses_create needs 'input' (a string or a list of messages)")
    return messages


def model_bridge(
    client: ChatClient,
    *,
    judge_model: str,
    embedding_model: str | None = None,
    max_tokens: int | None = None,
) -> ModelBridge:
    """A bridge that answers graders' model calls with ``client`` (the judge endpoint)."""

    def pick(requested: Any, default: str | None, what: str) -> str:
        if isinstance(requested, str) and requested and requested != "auto":
            return requested
        if default is None:
            raise ValueError(f"the grader asked for the run's {what} model, but none is configured")
        return default

    async def responses_create(**request: Any) -> dict[str, Any]:
        model = pick(request.get("model"), judge_model, "judge")
        extra: dict[str, Any] = {key: request[key] for key in _PASSED if key in request}
        text_format = ((request.get("text") or {}).get("format") or {}).get("type")
        if text_format in ("json_object", "json_schema"):
            extra["response_format"] = {"type": "json_object"}
        result = await client.chat(
            model,
            _messages(request),
            max_tokens=request.get("max_output_tokens") or max_tokens,
            extra=extra,
        )
        text = result.content or ""
        return {
            "id": result.response_id,
            "object": "response",
            "model": result.model or model,
            "status": "completed",
            "output_text": text,
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }
            ],
            "usage": dict(result.usage) if result.usage else None,
        }

    async def embeddings_create(**request: Any) -> dict[str, Any]:
        model = pick(request.get("model"), embedding_model, "embedding")
        http: httpx.AsyncClient = client.http
        response = await http.post("/embeddings", json={**request, "model": model})
        if response.status_code != 200:
            raise RuntimeError(
                f"the embeddings endpoint answered HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        body: dict[str, Any] = response.json()
        return body

    return ModelBridge(responses_create=responses_create, embeddings_create=embeddings_create)
