"""An instant stand-in for the worker image's ``kyai generate`` / ``kyai judge``.

``make bench-operator`` at 1,000 runs measures the operator, not 2,000 worker processes on
two cores: the devcluster runs :func:`run` in its own event loop in place of the worker
image's entrypoint (``kyai devcluster --entrypoint-function opbench.standin:run``), so a
worker pod costs no interpreter start-up. It reads the arguments the operator gave the real
worker and, at once, through the run's status subresource and with the pod's own
credentials (the kubeconfig the kubelet wrote for its service-account token):

* ``generate``: reports its progress as done (the real worker's first and last report);
* ``judge``: writes the result a real judge would report for the bench's five-row snapshot
  (``avgScore`` 0.8, one wrong answer).

A refused or failed report is the container's failure (exit 1, the reason in its
termination message), as with the real worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kyai_devcluster._runtime import Launch

#: The bench's snapshot: five rows, four answered right (see opbench.objects.CAPITALS).
SCORES = [1.0, 1.0, 0.0, 1.0, 1.0]


#: Tries of the status PATCH (client-go retries a request 10 times).
ATTEMPTS = 11


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def report(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(namespace/name of the run, the status the worker reports), None: nothing to report."""
    if not argv or argv[0] not in ("generate", "judge"):
        raise ValueError(f"standin: only generate and judge stand in (got {argv[:1]})")
    command = argv[0]
    run = _option(argv, "--report-run")
    if run is None:
        return None
    total = len(SCORES)
    progress = {"phase": command, "done": total, "total": total, "errors": 0, "updatedAt": _now()}
    if command == "generate":
        return run, {"progress": progress}
    key = hashlib.sha256(" ".join(argv).encode()).hexdigest()[:16]
    return run, {
        "progress": progress,
        "avgScore": sum(SCORES) / total,
        "avgLatencyMs": 1.0,
        "questions": total,
        "errors": {},
        "errorCount": 0,
        "comparisonKey": f"standin-{key}",
        "scores": SCORES,
    }


def _credentials(env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The API server and headers of the pod's kubeconfig (its ``server:`` and ``token:``)."""
    path = env.get("KUBECONFIG")
    if not path:
        raise RuntimeError("standin: no $KUBECONFIG")
    config = Path(path).read_text(encoding="utf-8")
    server = re.search(r"^\s*server:\s*['\"]?([^'\"\s]+)", config, re.MULTILINE)
    if server is None:
        raise RuntimeError(f"standin: no server in {path}")
    headers = {"Content-Type": "application/merge-patch+json"}
    token = re.search(r"^\s*token:\s*['\"]?([^'\"\s]+)", config, re.MULTILINE)
    if token is not None:
        headers["Authorization"] = f"Bearer {token.group(1)}"
    return server.group(1).rstrip("/"), headers


async def _patch(url: str, body: bytes, headers: dict[str, str]) -> None:
    """One PATCH over plain HTTP (the devcluster's listener)."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise RuntimeError(f"standin: only plain HTTP API servers ({url})")
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [f"PATCH {parts.path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close",
            f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]  # fmt: skip
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status = answer.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[1].startswith(b"2"):
        raise OSError(f"HTTP {status[1:2]!r}: {answer[-300:]!r}")


async def run(launch: Launch) -> int:
    """The worker container: report as the real worker would; the exit code."""
    found = report(launch.argv)
    if found is None:
        return 0
    return await report_status(launch, *found, who="standin")


async def report_status(launch: Launch, target: str, status: dict[str, Any], *, who: str) -> int:
    """PATCH ``status`` into run ``target`` (namespace/name) as the pod; the exit code.

    A status PATCH is idempotent: sent again after a reset, as client-go's 10 retries. The last
    failure is the container's termination message, ``who`` naming the stand-in.
    """
    namespace, name = target.split("/", 1)
    server, headers = _credentials(launch.env)
    url = f"{server}/apis/kyai.io/v1alpha1/namespaces/{namespace}/evaluationruns/{name}/status"
    body = json.dumps({"status": status}).encode()
    for attempt in range(ATTEMPTS):
        try:
            await _patch(url, body, headers)
            return 0
        except OSError as exc:
            if attempt == ATTEMPTS - 1:
                launch.termination_path.write_text(f"{who}: cannot report to {url}: {exc}")
                return 1
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
    return 1
