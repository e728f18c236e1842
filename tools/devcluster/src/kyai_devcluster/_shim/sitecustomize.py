"""Resolve devcluster Service names, and bind wildcard addresses to the pod's own IP.

Python imports ``sitecustomize`` at start-up when it is on ``sys.path``; the devcluster puts
this directory on ``PYTHONPATH`` of pod processes (and tests do the same for processes they
start, through ``kyai_devcluster.network_env``). When ``KYAI_DEVCLUSTER_HOSTS`` names a hosts
file, ``socket.getaddrinfo``, ``gethostbyname`` and ``gethostbyname_ex`` look names up there
first (``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.cluster.local``) and fall back to the
system resolver. The file is reread when it changes, as glibc rereads ``/etc/hosts``.

Pods share the host's network here, so a server binding ``0.0.0.0:8080`` would take that
port on every loopback address, clashing with other pods and with Service forwarders on
the same port. When ``KYAI_DEVCLUSTER_POD_IP`` is set (pod processes and containers), a
bind to the IPv4 wildcard (or ``::``) binds the pod's IP instead, as if the pod had its own
network namespace. A pod's own ``127.0.0.1`` is then not served; use its pod IP.
"""

from __future__ import annotations

import os
import socket
from typing import Any

_PATH = os.environ.get("KYAI_DEVCLUSTER_HOSTS", "")
_cache: dict[str, str] = {}
_stamp: tuple[float, int] | None = None


def _table() -> dict[str, str]:
    global _cache, _stamp
    try:
        status = os.stat(_PATH)
    except OSError:
        return {}
    stamp = (status.st_mtime, status.st_size)
    if stamp != _stamp:
        table: dict[str, str] = {}
        try:
            with open(_PATH, encoding="utf-8") as hosts:
                for line in hosts:
                    fields = line.split("#", 1)[0].split()
                    for name in fields[1:]:
                        table.setdefault(name.lower(), fields[0])
        except OSError:
            return _cache
        _cache, _stamp = table, stamp
    return _cache


def lookup(host: Any) -> str | None:
    """The address the hosts file gives ``host``, or None."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str) or not host:
        return None
    return _table().get(host.lower().rstrip("."))


if _PATH:
    _getaddrinfo = socket.getaddrinfo
    _gethostbyname = socket.gethostbyname
    _gethostbyname_ex = socket.gethostbyname_ex

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        """``socket.getaddrinfo`` that consults the devcluster's hosts file first."""
        return _getaddrinfo(lookup(host) or host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        """``socket.gethostbyname`` that consults the devcluster's hosts file first."""
        return lookup(host) or _gethostbyname(host)

    def gethostbyname_ex(host: str) -> tuple[str, list[str], list[str]]:
        """``socket.gethostbyname_ex`` that consults the devcluster's hosts file first."""
        address = lookup(host)
        if address is None:
            return _gethostbyname_ex(host)
        return host, [], [address]

    socket.getaddrinfo = getaddrinfo
    socket.gethostbyname = gethostbyname
    socket.gethostbyname_ex = gethostbyname_ex

_POD_IP = os.environ.get("KYAI_DEVCLUSTER_POD_IP", "")

if _POD_IP:
    _bind = socket.socket.bind

    def bind(self: socket.socket, address: Any) -> None:
        """``socket.bind`` that binds the pod's IP for a wildcard address."""
        if isinstance(address, tuple) and address and address[0] in ("", "0.0.0.0", "::"):
            if self.family == socket.AF_INET:
                address = (_POD_IP, *address[1:])
            elif self.family == socket.AF_INET6:
                address = (f"::ffff:{_POD_IP}", *address[1:])
        _bind(self, address)

    socket.socket.bind = bind  # type: ignore[method-assign,assignment]


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows (e.g. a distribution's), if any."""
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken shadowed hook must not break the process
        print(f"sitecustomize {spec.origin}: {exc!r}", file=sys.stderr)


_chain()
