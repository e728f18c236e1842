"""Leader election on a ``coordination.k8s.io/v1`` Lease: of two replicas, one reconciles.

controller-runtime's behaviour (client-go's ``leaderelection``), in asyncio:

* a candidate reads the Lease every retry period and takes it when it does not exist, when it
  has no holder, or when its record has not changed for the lease duration *as this process
  observed it* (client-go's rule: no clock of another node is trusted);
* every write is a create or an update under the ``resourceVersion`` read, so of two
  candidates only one succeeds (the other gets 409 Conflict and stays a standby);
* the holder renews every retry period, and when no renew has succeeded for the renew
  deadline (shorter than the lease duration, so before anyone else may take the Lease), or
  the Lease names another holder, the process exits at once (``os._exit``, as
  controller-runtime exits): no reconcile can run after. The pod restarts as a standby.

The deadline is also enforced outside the event loop: a watchdog thread, and a ``SIGCONT``
handler that runs before any other Python code of the main thread once a frozen (``SIGSTOP``)
process resumes. The clock is ``CLOCK_BOOTTIME`` where there is one, which keeps counting
while the machine is suspended.

The Kubernetes Python client's ``leaderelection`` module is not used: it is thread-based,
keeps working for up to a renew deadline after it has seen another holder, and calls back
instead of stopping the process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from prometheus_client import CollectorRegistry, Gauge

from kyai.controllers._kube import KubeClient, KubeError

log = logging.getLogger(__name__)

#: A candidate waits between one and this many retry periods between two tries (a jitter, so
#: that candidates started together do not ask together).
JITTER_FACTOR = 1.2
#: How often the watchdog thread compares the clock with the renew deadline.
WATCHDOG_SECONDS = 0.1
#: Exit status of a leader that lost its Lease (controller-runtime's ``os.Exit(1)``).
EXIT_LOST = 1
#: Where a pod's service account tells its namespace.
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def clock() -> float:
    """Seconds of a clock that counts time suspended or frozen: ``CLOCK_BOOTTIME`` on Linux."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def micro_time(when: datetime | None = None) -> str:
    """A Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The candidate's name: the pod's (``$POD_NAME``), else the host's and a random suffix."""
    pod = os.environ.get("POD_NAME", "").strip()
    if pod:
        return pod
    return f"{socket.gethostname()}_{random.randbytes(4).hex()}"


def default_namespace() -> str:
    """The operator's namespace: its service account's in a pod, else ``default``."""
    for value in (os.environ.get("POD_NAMESPACE", ""), _read(_SERVICE_ACCOUNT_NAMESPACE)):
        if value.strip():
            return value.strip()
    return "default"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


@dataclass(frozen=True)
class LeaseConfig:
    """Which Lease, who is asking, and controller-runtime's three timings."""

    namespace: str
    name: str
    identity: str
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_seconds > self.renew_deadline_seconds > self.retry_seconds > 0:
            raise ValueError(
                "leader election needs lease duration > renew deadline > retry period > 0, got "
                f"{self.lease_seconds:g} s, {self.renew_deadline_seconds:g} s and "
                f"{self.retry_seconds:g} s"
            )

    @property
    def path(self) -> str:
        """The REST path of the Lease collection of the namespace."""
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"


def leader_gauge(registry: CollectorRegistry) -> Gauge:
    """``kyai_operator_leader`` on ``registry``: 1 while this process reconciles."""
    return Gauge(
        "kyai_operator_leader",
        "1 while this replica holds the leader Lease and reconciles (always 1 without leader "
        "election), 0 on a standby.",
        registry=registry,
    )


def lease_client() -> KubeClient:
    """A client of its own for the Lease (its connections never wait behind reconciles)."""
    return KubeClient.from_environment()


def exit_now(message: str) -> NoReturn:
    """Write ``message`` to standard error and end the process at once (no clean-up runs).

    ``os.write``, not logging: it may run in a signal handler or while another thread holds
    the logging lock.
    """
    os.write(2, f"kyai operator: {message}; exiting\n".encode(errors="replace"))
    os._exit(EXIT_LOST)


class LeaseElector:
    """Acquire, keep and release one Lease; stop the process when it may be someone else's."""

    def __init__(
        self,
        client: KubeClient,
        config: LeaseConfig,
        *,
        on_lost: Callable[[str], NoReturn] = exit_now,
        on_leading: Callable[[bool], None] | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self._on_lost = on_lost
        self._on_leading = on_leading
        #: The Lease's spec as last read or written, and when (:func:`clock`) it was seen to change.
        self._observed: tuple[dict[str, Any], float] | None = None
        #: The clock at the start of the last write that made or kept this process the holder.
        self.renewed_at: float | None = None
        self.holder: str | None = None

    @property
    def leading(self) -> bool:
        """Whether this process holds the Lease (as of its last successful write)."""
        return self.renewed_at is not None

    def expired(self) -> bool:
        """Whether this holder's renew deadline has passed (then the Lease may be taken)."""
        return (
            self.renewed_at is not None
            and clock() - self.renewed_at > self.config.renew_deadline_seconds
        )

    def check(self) -> None:
        """Stop the process when the renew deadline has passed."""
        if self.renewed_at is not None and self.expired():
            late = clock() - self.renewed_at
            self._lose(
                f"the Lease {self.config.namespace}/{self.config.name} was last renewed "
                f"{late:.1f} s ago, beyond the renew deadline of "
                f"{self.config.renew_deadline_seconds:g} s"
            )

    def _lose(self, message: str) -> NoReturn:
        self._set_leading(False)
        self._on_lost(message)

    def _set_leading(self, leading: bool) -> None:
        if self._on_leading is not None:
            self._on_leading(leading)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this process holds the Lease afterwards."""
        started = clock()
        try:
            lease = await self.client.request("GET", f"{self.config.path}/{self.config.name}")
        except KubeError as exc:
            if exc.status != 404:
                log.warning("Could not read the Lease: %s", exc)
                return False
            return await self._create(started)
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        if self._observed is None or self._observed[0] != spec:
            self._observed = (spec, clock())  # when seen, not when asked (client-go's rule)
        self.holder = spec.get("holderIdentity") or None
        mine = self.holder == self.config.identity
        if self.holder and not mine:
            seen = self._observed[1]
            # The holder's word and this candidate's own, whichever is longer (the record has
            # whole seconds).
            duration = max(float(spec.get("leaseDurationSeconds") or 0), self.config.lease_seconds)
            if clock() < seen + duration:
                if self.leading:
                    self._lose(
                        f"the Lease {self.config.namespace}/{self.config.name} is held by "
                        f"{self.holder}"
                    )
                return False
        now = micro_time()
        renewed = {
            **spec,
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": int(self.config.lease_seconds),
            "renewTime": now,
        }
        if not mine or not spec.get("acquireTime"):
            renewed["acquireTime"] = now
            renewed["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if self.holder else 0
            )
        body = {**lease, "spec": renewed}
        try:
            written = await self.client.request(
                "PUT", f"{self.config.path}/{self.config.name}", body=body
            )
        except KubeError as exc:
            if exc.status != 409:
                log.warning("Could not update the Lease: %s", exc)
            elif self.leading:  # written by someone else since it was read: a failed renew
                log.warning("Could not renew the Lease: it changed since it was read (409)")
            return False
        return self._won(written, started, acquired=not mine)

    async def _create(self, started: float) -> bool:
        now = micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.config.name, "namespace": self.config.namespace},
            "spec": {
                "holderIdentity": self.config.identity,
                "leaseDurationSeconds": int(self.config.lease_seconds),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self.client.request("POST", self.config.path, body=body)
        except KubeError as exc:
            if exc.status != 409:
                log.warning("Could not create the Lease: %s", exc)
            return False
        return self._won(created, started, acquired=True)

    def _won(self, lease: dict[str, Any], started: float, *, acquired: bool) -> bool:
        self._observed = (dict(lease.get("spec") or {}), started)
        self.holder = self.config.identity
        first = self.renewed_at is None
        self.renewed_at = started
        if acquired or first:
            log.info(
                "Holding the Lease %s/%s as %s",
                self.config.namespace,
                self.config.name,
                self.config.identity,
            )
            self._set_leading(True)
        return True

    async def acquire(self) -> None:
        """Return once this process holds the Lease (a standby waits here)."""
        log.info(
            "Waiting for the Lease %s/%s as %s (standby)",
            self.config.namespace,
            self.config.name,
            self.config.identity,
        )
        reported: str | None = None
        while not await self._attempt():
            if self.holder != reported and self.holder:
                log.info("The Lease is held by %s", self.holder)
                reported = self.holder
            await asyncio.sleep(self.config.retry_seconds * random.uniform(1.0, JITTER_FACTOR))

    async def _attempt(self) -> bool:
        """One try, abandoned after a retry period (a hung request counts as failed).

        A renew that hangs (a connection the server no longer answers on) is cut after a
        retry period, within what is left of the renew deadline, so that the next try, on a
        new connection, still comes before the deadline: as client-go retries every retry
        period until the renew deadline, never waiting on one request for all of it.
        """
        limit = max(self.config.retry_seconds, 1.0)
        if self.renewed_at is not None:
            left = self.renewed_at + self.config.renew_deadline_seconds - clock()
            limit = max(0.0, min(limit, left))
        try:
            async with asyncio.timeout(limit):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.warning("The Lease's API call took longer than %.1f s: trying again", limit)
            return False

    async def keep(self) -> NoReturn:
        """Renew every retry period; stop the process once the renew deadline passes."""
        while True:
            await asyncio.sleep(self.config.retry_seconds)
            self.check()
            if not await self._attempt():
                log.info(
                    "A renew of the Lease failed; trying again in %g s", self.config.retry_seconds
                )
                self.check()

    def guard(self) -> None:
        """Enforce the renew deadline outside the event loop: a watchdog thread and SIGCONT.

        Call from the main thread once leading.
        """
        signal.signal(signal.SIGCONT, lambda _signum, _frame: self.check())
        threading.Thread(target=self._watch, name="lease-watchdog", daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(WATCHDOG_SECONDS)
            self.check()

    async def release(self) -> None:
        """Give the Lease up (after reconciling stopped), so a standby takes it at once."""
        if self.renewed_at is None or self.expired():
            return
        try:
            lease = await self.client.request("GET", f"{self.config.path}/{self.config.name}")
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.config.identity:
                return
            now = micro_time()
            spec.pop("holderIdentity", None)  # no holder: client-go's release
            lease["spec"] = {
                **spec,
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
            }
            await self.client.request("PUT", f"{self.config.path}/{self.config.name}", body=lease)
        except KubeError as exc:
            log.warning("Could not release the Lease: %s", exc)
            return
        self.renewed_at = None
        self._set_leading(False)
        log.info("Released the Lease %s/%s", self.config.namespace, self.config.name)
