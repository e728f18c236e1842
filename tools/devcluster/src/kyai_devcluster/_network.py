"""Pod and Service networking of the devcluster, all on loopback.

* every pod gets its own address in :data:`POD_NETWORK` (``status.podIP``), so two pods can
  listen on the same port;
* every Service (but a headless one) gets a ``clusterIP`` in :data:`SERVICE_NETWORK` and,
  per TCP port, an asyncio forwarder ``clusterIP:port`` → ``podIP:targetPort`` of a *ready*
  pod its selector picks (round robin; a named ``targetPort`` is looked up in the pod's
  container ports), so ``port`` ≠ ``targetPort`` and readiness work as in a cluster;
* the names ``svc``, ``svc.ns``, ``svc.ns.svc`` and ``svc.ns.svc.cluster.local`` map to the
  clusterIP (a headless Service's to its first ready pod) in a hosts file kept in the
  workdir. A pod with ``spec.hostname`` and ``spec.subdomain`` naming a headless Service
  of its namespace that selects it (ready, or any with ``publishNotReadyAddresses``) also
  gets ``hostname.subdomain[.ns[.svc[.cluster.local]]]`` (a StatefulSet's or
  LeaderWorkerSet's pods: ``LWS_LEADER_ADDRESS``), as cluster DNS gives it. Containers get
  it as ``/etc/hosts`` (glibc rereads it per lookup); Python processes get a
  ``sitecustomize`` shim (:func:`network_env`) that consults it first. A short name
  resolves only from a pod of its namespace in a real cluster; here every short name is
  global (first Service wins), so tests should prefer ``svc.ns`` forms.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import random
import socket
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kyai_devcluster._store import Event, Store, meta

Obj = dict[str, Any]
logger = logging.getLogger("kyai_devcluster")

#: Pod addresses (one per pod, released when the pod goes).
POD_NETWORK = ipaddress.IPv4Network("127.10.0.0/16")
#: Service cluster IPs.
SERVICE_NETWORK = ipaddress.IPv4Network("127.96.0.0/16")
CLUSTER_DOMAIN = "cluster.local"
SERVICES = ("", "services")
PODS = ("", "pods")
#: The directory to put on PYTHONPATH for the name-resolution shim.
SHIM_DIR = Path(__file__).parent / "_shim"
HOSTS_VARIABLE = "KYAI_DEVCLUSTER_HOSTS"


def _close_all(claims: list[socket.socket]) -> None:
    for claim in claims:
        claim.close()
    claims.clear()


class AddressPool:
    """Hands out addresses of a network to keys, reusing released ones last.

    Addresses come a /24 block at a time, from a random block on. On Linux each block is
    held for this pool by an abstract Unix socket named after it, so devclusters running
    side by side (parallel test workers, several sessions) never hand out the same address:
    a block another pool holds is skipped. The sockets go with the pool (:meth:`close`) or
    with the process.
    """

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self._network = network
        self._next: Iterator[ipaddress.IPv4Address] = self._candidates()
        self._by_key: dict[str, str] = {}
        self._free: list[str] = []
        self._claims: list[socket.socket] = []
        # Closed with the pool even when nobody calls close() (no ResourceWarning).
        self._release = weakref.finalize(self, _close_all, self._claims)

    def _candidates(self) -> Iterator[ipaddress.IPv4Address]:
        size = self._network.num_addresses
        blocks = max(size // 256, 1)
        start = random.randrange(blocks)
        for index in range(blocks):
            first = self._network.network_address + ((start + index) % blocks) * 256
            if not self._claim(first):
                continue
            for offset in range(min(size, 256)):
                address = first + offset
                if int(address) & 0xFF not in (0, 1, 255):
                    yield address

    def _claim(self, first: ipaddress.IPv4Address) -> bool:
        """Hold the block starting at ``first``; False when another pool holds it."""
        if not sys.platform.startswith("linux"):
            return True  # no abstract sockets: the random start keeps collisions rare
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(f"\0kyai-devcluster/{first}")
        except OSError:
            claim.close()
            return False
        self._claims.append(claim)
        return True

    def close(self) -> None:
        """Give the held blocks back."""
        _close_all(self._claims)

    def allocate(self, key: str) -> str:
        """The address of ``key`` (a new one on first use)."""
        if key not in self._by_key:
            address = next((str(a) for a in self._next), None)
            if address is None:
                if not self._free:
                    raise RuntimeError(f"no free address left in {self._network}")
                address = self._free.pop(0)
            self._by_key[key] = address
        return self._by_key[key]

    def get(self, key: str) -> str | None:
        """The address of ``key``, if it has one."""
        return self._by_key.get(key)

    def release(self, key: str) -> None:
        """Give ``key``'s address back."""
        address = self._by_key.pop(key, None)
        if address is not None:
            self._free.append(address)


def service_names(name: str, namespace: str) -> list[str]:
    """The DNS names a Service answers to, shortest first."""
    return [
        name,
        f"{name}.{namespace}",
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.{CLUSTER_DOMAIN}",
    ]


class HostsFile:
    """A hosts file rewritten in place (bind mounts keep seeing the same inode)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, tuple[str, list[str]]] = {}
        self.write()

    def set(self, key: str, address: str, names: list[str]) -> None:
        """Map ``names`` to ``address`` under ``key`` (replacing what ``key`` had)."""
        if self._entries.get(key) != (address, names):
            self._entries[key] = (address, names)
            self.write()

    def remove(self, key: str) -> None:
        """Drop ``key``'s names."""
        if self._entries.pop(key, None) is not None:
            self.write()

    def render(self) -> str:
        """The file's text."""
        lines = [
            "# kyai devcluster: Service names (rewritten as Services change)",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
        ]
        lines += [
            f"{address}\t{' '.join(names)}" for _, (address, names) in sorted(self._entries.items())
        ]
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        """Rewrite the file in place."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("r+" if self.path.exists() else "w", encoding="utf-8") as out:
            out.seek(0)
            out.write(self.render())
            out.truncate()
        self.path.chmod(0o644)


def network_env(hosts_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a Python process that should resolve devcluster Service names.

    ``base`` (default: this process's environment) gets the shim directory first on
    ``PYTHONPATH`` and ``KYAI_DEVCLUSTER_HOSTS`` pointing at the hosts file.
    """
    env = dict(os.environ if base is None else base)
    path = [str(SHIM_DIR), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    env[HOSTS_VARIABLE] = str(hosts_path)
    return env


def pod_ready(pod: Obj) -> bool:
    """Whether a pod's Ready condition is True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _selects(selector: Obj, pod: Obj) -> bool:
    labels = meta(pod).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _target_port(pod: Obj, target: Any) -> int | None:
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port.get("containerPort", 0)) or None
    return None


class ServiceProxy:
    """Cluster IPs, names and TCP forwarders for Services (a store listener)."""

    def __init__(self, store: Store, *, hosts: HostsFile) -> None:
        self.store = store
        self.hosts = hosts
        self.addresses = AddressPool(SERVICE_NETWORK)
        self._servers: dict[str, list[asyncio.Server]] = {}
        self._ports: dict[str, list[tuple[str, int]]] = {}
        self._round_robin = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        #: The uids of the headless Services, by namespace: a pod event looks at the pods
        #: behind them only where there are some (at 20,000 pods and 1,000 Services, every
        #: pod event listed the Services).
        self._headless: dict[str, set[str]] = {}
        #: The hosts-file keys of pods' ``hostname.subdomain`` names, by namespace.
        self._pod_records: dict[str, set[str]] = {}

    def on_event(self, event: Event) -> None:
        """Store listener: follow Services (and pod readiness for headless names)."""
        if event.group_resource == SERVICES:
            namespace = str(meta(event.obj).get("namespace", ""))
            uids = self._headless.setdefault(namespace, set())
            uid = str(meta(event.obj).get("uid"))
            if event.type != "DELETED" and (event.obj.get("spec") or {}).get("clusterIP") == "None":
                uids.add(uid)
            else:
                uids.discard(uid)
            self._spawn(self._sync(event))
        elif event.group_resource == PODS:
            self._refresh_headless(meta(event.obj).get("namespace", ""))

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _pods(self, namespace: str) -> list[Obj]:
        return list(self.store.objects(self.store.type_for(*PODS), namespace))

    def endpoints(self, service: Obj, port: Obj) -> list[tuple[str, int]]:
        """``(podIP, targetPort)`` of the ready pods behind one port of a Service."""
        selector = (service.get("spec") or {}).get("selector") or {}
        found: list[tuple[str, int]] = []
        for pod in self._pods(meta(service)["namespace"]):
            address = (pod.get("status") or {}).get("podIP")
            if meta(pod).get("deletionTimestamp") or not address or not pod_ready(pod):
                continue
            if not _selects(selector, pod):
                continue
            target = _target_port(pod, port.get("targetPort", port.get("port")))
            if target:
                found.append((str(address), target))
        return found

    async def _sync(self, event: Event) -> None:
        async with self._lock:
            await self._sync_locked(event)

    async def _sync_locked(self, event: Event) -> None:
        service = event.obj
        uid = str(meta(service).get("uid"))
        name, namespace = meta(service)["name"], meta(service)["namespace"]
        if event.type == "DELETED":
            await self._close(uid)
            self.addresses.release(uid)
            self.hosts.remove(uid)
            return
        spec = service.get("spec") or {}
        if spec.get("clusterIP") in ("None",) or spec.get("type") == "ExternalName":
            self._refresh_headless(namespace)
            return
        address = spec.get("clusterIP") or ""
        if not address:
            address = self.addresses.allocate(uid)
            current = self.store.find(self.store.type_for(*SERVICES), namespace, name)
            if current is None or meta(current).get("uid") != uid:
                return
            updated = {**current, "spec": {**(current.get("spec") or {}), "clusterIP": address}}
            updated["spec"]["clusterIPs"] = [address]
            self.store.write_spec(self.store.type_for(*SERVICES), current, updated)
            return  # the MODIFIED event brings us back with the address set
        if not ipaddress.ip_address(address).is_loopback:
            logger.warning("service %s/%s: clusterIP %s is not loopback", namespace, name, address)
            return
        self.hosts.set(uid, address, service_names(name, namespace))
        wanted = sorted(
            (address, int(port["port"]))
            for port in spec.get("ports") or []
            if port.get("protocol", "TCP") == "TCP" and port.get("port")
        )
        if self._ports.get(uid) == wanted:
            return
        await self._close(uid)
        self._ports[uid] = wanted
        servers: list[asyncio.Server] = []
        for host, port_number in wanted:
            handler = self._handler(namespace, name, port_number)
            try:
                servers.append(await asyncio.start_server(handler, host, port_number))
            except OSError as exc:
                logger.warning(
                    "service %s/%s: cannot listen on %s:%s: %s",
                    namespace,
                    name,
                    host,
                    port_number,
                    exc,
                )
        self._servers[uid] = servers

    def _refresh_headless(self, namespace: str) -> None:
        if not self._headless.get(namespace) and not self._pod_records.get(namespace):
            return
        records: dict[str, tuple[str, list[str]]] = {}
        for service in self.store.objects(self.store.type_for(*SERVICES), namespace):
            spec = service.get("spec") or {}
            if spec.get("clusterIP") != "None":
                continue
            records.update(self._pod_names(service, namespace))
            uid = str(meta(service).get("uid"))
            ready = [
                str(pod["status"]["podIP"])
                for pod in self._pods(namespace)
                if pod_ready(pod)
                and (pod.get("status") or {}).get("podIP")
                and _selects(spec.get("selector") or {}, pod)
            ]
            if ready:
                self.hosts.set(uid, ready[0], service_names(meta(service)["name"], namespace))
            else:
                self.hosts.remove(uid)
        for key in self._pod_records.get(namespace, set()) - set(records):
            self.hosts.remove(key)
        for key, (address, names) in records.items():
            self.hosts.set(key, address, names)
        self._pod_records[namespace] = set(records)

    def _pod_names(self, service: Obj, namespace: str) -> dict[str, tuple[str, list[str]]]:
        """``hostname.subdomain`` records of the pods a headless Service publishes."""
        spec = service.get("spec") or {}
        name = meta(service)["name"]
        records: dict[str, tuple[str, list[str]]] = {}
        for pod in self._pods(namespace):
            pod_spec = pod.get("spec") or {}
            address = (pod.get("status") or {}).get("podIP")
            hostname = pod_spec.get("hostname")
            if not hostname or pod_spec.get("subdomain") != name or not address:
                continue
            if meta(pod).get("deletionTimestamp") or not _selects(spec.get("selector") or {}, pod):
                continue
            if not spec.get("publishNotReadyAddresses") and not pod_ready(pod):
                continue
            names = [f"{hostname}.{n}" for n in service_names(name, namespace)]
            records[f"pod/{meta(pod).get('uid')}"] = (str(address), names)
        return records

    def _handler(
        self, namespace: str, name: str, port_number: int
    ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                self._connections.add(task)
            try:
                await self._forward(namespace, name, port_number, reader, writer)
            finally:
                if task is not None:
                    self._connections.discard(task)

        return handle

    async def _forward(
        self,
        namespace: str,
        name: str,
        port_number: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        service = self.store.find(self.store.type_for(*SERVICES), namespace, name)
        ports = [
            p
            for p in ((service or {}).get("spec") or {}).get("ports") or []
            if int(p.get("port", 0)) == port_number
        ]
        targets = self.endpoints(service, ports[0]) if service and ports else []
        if not targets:
            writer.close()  # no ready endpoint: the connection is refused, as by kube-proxy
            return
        host, target = targets[next(self._round_robin) % len(targets)]
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, target)
        except OSError:
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                with contextlib.suppress(OSError, RuntimeError):
                    if sink.can_write_eof():
                        sink.write_eof()

        try:
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        finally:
            for stream in (writer, upstream_writer):
                stream.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await stream.wait_closed()

    async def _close(self, uid: str) -> None:
        self._ports.pop(uid, None)
        for server in self._servers.pop(uid, []):
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)

    async def close(self) -> None:
        """Stop every forwarder and open connection."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._connections):
            task.cancel()
        for uid in list(self._servers):
            await self._close(uid)
        self.addresses.close()
