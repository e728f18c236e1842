"""Probes the simulated kubelet runs: ``httpGet``, ``tcpSocket`` and ``exec``.

Semantics follow the kubelet: ``initialDelaySeconds``, ``periodSeconds`` (default 10),
``timeoutSeconds`` (1), ``successThreshold`` (1) and ``failureThreshold`` (3); an HTTP status
from 200 to 399 passes. The devcluster may cap the period (``max_period``) so that tests and
demos do not wait ten seconds per probe; thresholds and initial delays stay as written.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import aiohttp

from kyai_devcluster._runtime import Handle

Obj = dict[str, Any]


@dataclass(frozen=True)
class ProbeTiming:
    """The timing fields of one probe (defaults as in Kubernetes)."""

    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, probe: Obj, *, max_period: float | None) -> ProbeTiming:
        """Timing of ``probe``, its period capped at ``max_period``."""
        period = float(probe.get("periodSeconds") or 10)
        delay = float(probe.get("initialDelaySeconds") or 0)
        if max_period is not None:
            # Only the period: initialDelaySeconds is how long the program needs to start.
            period = min(period, max_period)
        return cls(
            initial_delay=delay,
            period=period,
            timeout=float(probe.get("timeoutSeconds") or 1),
            success_threshold=int(probe.get("successThreshold") or 1),
            failure_threshold=int(probe.get("failureThreshold") or 3),
        )


def resolve_port(container: Obj, port: Any) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is not a number nor a named port of the container")


async def run_probe(
    probe: Obj, *, container: Obj, pod_ip: str, handle: Handle, timeout: float
) -> tuple[bool, str]:
    """Run one probe once: (passed, message)."""
    try:
        if "httpGet" in probe:
            return await _http(probe["httpGet"], container, pod_ip, timeout)
        if "tcpSocket" in probe:
            action = probe["tcpSocket"]
            host = str(action.get("host") or pod_ip)
            port = resolve_port(container, action.get("port"))
            try:
                async with asyncio.timeout(timeout):
                    _, writer = await asyncio.open_connection(host, port)
            except (OSError, TimeoutError) as exc:
                return False, f"dial tcp {host}:{port}: {exc or 'timeout'}"
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return True, ""
        if "exec" in probe:
            command = [str(part) for part in probe["exec"].get("command") or []]
            code, output = await handle.exec(command, timeout)
            if code == -1:
                return False, f"command timed out: {output}"
            return code == 0, output.strip()[-1024:]
        if "grpc" in probe:
            return False, "grpc probes are not supported by the devcluster kubelet"
    except ValueError as exc:
        return False, str(exc)
    return False, "probe has no handler (httpGet, tcpSocket or exec)"


async def _http(action: Obj, container: Obj, pod_ip: str, timeout: float) -> tuple[bool, str]:
    host = str(action.get("host") or pod_ip)
    port = resolve_port(container, action.get("port"))
    scheme = str(action.get("scheme") or "HTTP").lower()
    path = str(action.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    headers = {str(h.get("name")): str(h.get("value", "")) for h in action.get("httpHeaders") or []}
    headers.setdefault("User-Agent", "kube-probe/1.31")
    url = f"{scheme}://{host}:{port}{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url, headers=headers, ssl=False, allow_redirects=False) as response,
        ):
            await response.read()
            if 200 <= response.status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {response.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return False, f'Get "{url}": {type(exc).__name__}: {exc}'
