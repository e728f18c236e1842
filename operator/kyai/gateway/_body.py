"""What the gateway reads and changes in requests and answers.

* A chat request must name the default judge's model: another model is refused (403) rather
  than rewritten, so that no caller believes it was judged by a model it was not; a missing
  model is a 400. A streamed request gets ``stream_options.include_usage: true`` (the last
  event then carries ``usage``, as OpenAI's API sends it) so that streamed use is charged
  too; a request that is not streamed is forwarded byte for byte.
* ``usage`` is read from a whole JSON answer, or from the ``data:`` events of a streamed one
  as they pass (:class:`StreamUsage`, whatever the chunking).
* ``/v1/models`` is filtered to the default judge's model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kyai._json import dumps_body, loads

#: A streamed line longer than this is not looked into for usage (the stream still passes).
MAX_EVENT_BYTES = 1 << 20


class BodyError(Exception):
    """The request's body cannot be forwarded: ``status`` and a message naming the field."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


def prepare_chat(raw: bytes, model: str) -> tuple[bytes, bool]:
    """The body to send upstream for a chat request, and whether it asks for a stream."""
    try:
        body = loads(raw)
    except ValueError:
        raise BodyError(400, "InvalidBody", "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise BodyError(400, "InvalidBody", "the request body must be a JSON object")
    requested = body.get("model")
    if requested is None:
        raise BodyError(400, "MissingModel", f"model is required (the default judge is {model!r})")
    if requested != model:
        raise BodyError(
            403,
            "ModelNotAllowed",
            f"model {requested!r} is not served here: the gateway serves only the default "
            f"judge's model {model!r}",
        )
    if body.get("stream") is not True:
        return raw, False
    options = body.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    if options.get("include_usage") is not True:
        options["include_usage"] = True
        body["stream_options"] = options
        return dumps_body(body), True
    return raw, True


def usage_of(raw: bytes) -> Mapping[str, Any] | None:
    """The ``usage`` object of a JSON answer, if any."""
    try:
        body = loads(raw)
    except ValueError:
        return None
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else None


def only_model(raw: bytes, model: str) -> bytes | None:
    """A ``/v1/models`` list keeping only ``model``'s card (None when ``raw`` is not a list)."""
    try:
        body = loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return None
    body["data"] = [
        card for card in body["data"] if isinstance(card, dict) and card.get("id") == model
    ]
    return dumps_body(body)


class StreamUsage:
    """Finds ``usage`` in a server-sent event stream fed chunk by chunk (the last one wins)."""

    def __init__(self) -> None:
        self.usage: Mapping[str, Any] | None = None
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        """Look at the next chunk of the stream."""
        data = self._partial + chunk if self._partial else chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_EVENT_BYTES:
            self._partial = b""
        for line in lines:
            if b'"usage"' in line:
                self._line(line)

    def close(self) -> None:
        """The stream ended: look at what is left."""
        if self._partial and b'"usage"' in self._partial:
            self._line(self._partial)
        self._partial = b""

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        usage = usage_of(line[5:].strip())
        if usage:
            self.usage = usage
