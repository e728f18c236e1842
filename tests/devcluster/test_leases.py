"""``coordination.k8s.io/v1`` Leases in the devcluster, and the operator's Lease elector on them.

The devcluster serves Leases as the API server does (a stale ``resourceVersion`` on update is
409 Conflict), which is what makes one of two candidates win. The elector
(:mod:`kyai.controllers.leader`) is driven here with short timings and an ``on_lost`` that
records instead of exiting the process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import NoReturn

import pytest

from devcluster.helpers import Api
from kyai.controllers._kube import KubeClient
from kyai.controllers.leader import LeaseConfig, LeaseElector, clock
from kyai_devcluster import DevCluster

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


class Lost(Exception):
    """What the test's ``on_lost`` raises instead of ending the process."""


def raise_lost(message: str) -> NoReturn:
    raise Lost(message)


def config(identity: str, **timings: float) -> LeaseConfig:
    values = {"lease_seconds": 1.5, "renew_deadline_seconds": 1.0, "retry_seconds": 0.2}
    return LeaseConfig("default", "kyai-operator", identity, **{**values, **timings})


@pytest.fixture
async def client(cluster: DevCluster) -> AsyncIterator[KubeClient]:
    kube = KubeClient(cluster.url)
    yield kube
    await kube.aclose()


async def holder(api: Api) -> str | None:
    status, lease = await api.get(f"{LEASES}/kyai-operator")
    assert status == 200, lease
    return lease["spec"].get("holderIdentity")


async def test_a_lease_update_with_a_stale_resource_version_conflicts(api: Api) -> None:
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l", "namespace": "default"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    status, created = await api.post(LEASES, body)
    assert status == 201, created
    status, updated = await api.put(f"{LEASES}/l", {**created, "spec": {"holderIdentity": "b"}})
    assert status == 200, updated
    status, refused = await api.put(f"{LEASES}/l", {**created, "spec": {"holderIdentity": "c"}})
    assert status == 409 and refused["reason"] == "Conflict", refused
    status, again = await api.post(LEASES, body)
    assert status == 409 and again["reason"] == "AlreadyExists", again


async def test_one_of_two_candidates_leads_and_the_other_waits(
    client: KubeClient, api: Api
) -> None:
    first = LeaseElector(client, config("a"), on_lost=raise_lost)
    second = LeaseElector(client, config("b"), on_lost=raise_lost)
    won = await asyncio.gather(first.try_acquire_or_renew(), second.try_acquire_or_renew())
    assert sorted(won) == [False, True]
    leader, standby = (first, second) if won[0] else (second, first)
    assert await holder(api) == leader.config.identity
    waiting = asyncio.create_task(standby.acquire())
    for _ in range(10):  # renewed beyond the lease duration: the standby still waits
        await asyncio.sleep(0.2)
        assert await leader.try_acquire_or_renew()
    assert not waiting.done() and not standby.leading
    started = clock()
    await asyncio.wait_for(waiting, 10)  # the leader stopped renewing
    assert clock() - started >= 1.5 - 0.2  # not before the lease duration (as it observed)
    assert standby.leading and await holder(api) == standby.config.identity
    _, lease = await api.get(f"{LEASES}/kyai-operator")
    assert lease["spec"]["leaseTransitions"] == 1, lease


async def test_a_holder_that_sees_another_holder_stops_at_once(
    client: KubeClient, api: Api
) -> None:
    elector = LeaseElector(client, config("a"), on_lost=raise_lost)
    assert await elector.try_acquire_or_renew()
    status, lease = await api.get(f"{LEASES}/kyai-operator")
    lease["spec"]["holderIdentity"] = "b"
    status, taken = await api.put(f"{LEASES}/kyai-operator", lease)
    assert status == 200, taken
    with pytest.raises(Lost, match="held by b"):
        await elector.try_acquire_or_renew()


async def test_a_holder_that_cannot_renew_stops_at_the_renew_deadline(
    client: KubeClient, cluster: DevCluster
) -> None:
    elector = LeaseElector(client, config("a"), on_lost=raise_lost)
    assert await elector.try_acquire_or_renew()
    elector.client = KubeClient("http://127.0.0.1:9")  # nothing listens: every renew fails
    started = clock()
    with pytest.raises(Lost, match="beyond the renew deadline of 1 s"):
        await asyncio.wait_for(elector.keep(), 10)
    assert 1.0 <= clock() - started < 3.0
    await elector.client.aclose()


async def test_release_lets_the_standby_take_the_lease_at_once(
    client: KubeClient, api: Api
) -> None:
    leader = LeaseElector(client, config("a", lease_seconds=30, renew_deadline_seconds=20))
    standby = LeaseElector(client, config("b", lease_seconds=30, renew_deadline_seconds=20))
    assert await leader.try_acquire_or_renew()
    assert not await standby.try_acquire_or_renew()
    await leader.release()
    assert not leader.leading and await holder(api) is None
    assert await standby.try_acquire_or_renew()


def test_config_refuses_timings_that_let_two_lead() -> None:
    with pytest.raises(ValueError, match="lease duration > renew deadline > retry period"):
        LeaseConfig("default", "kyai-operator", "a", 10, 10, 2)


#: A process that leads (per its elector: renewed once, then its renew deadline of 5 s runs)
#: and works in Python, holding the GIL, as a reconciling event loop would.
FROZEN = textwrap.dedent(
    """
    import sys
    from kyai.controllers.leader import LeaseConfig, LeaseElector, clock

    elector = LeaseElector(None, LeaseConfig("d", "l", "me", 8, 5, 1))
    elector.renewed_at = clock()
    elector.guard()
    print("leading", flush=True)
    while True:
        if elector.expired():
            print("worked past the renew deadline", file=sys.stderr, flush=True)
    """
)


def test_a_frozen_holder_exits_as_soon_as_it_resumes() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", FROZEN], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        try:
            assert process.stdout is not None and process.stdout.readline() == b"leading\n"
            os.kill(process.pid, signal.SIGSTOP)
            asyncio.run(asyncio.sleep(6))  # beyond the deadline
            os.kill(process.pid, signal.SIGCONT)
            _, stderr = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1
    assert b"beyond the renew deadline" in stderr
    assert b"worked past" not in stderr  # the handler ran before any other code
