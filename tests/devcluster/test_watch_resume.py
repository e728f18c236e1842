"""A watch resumed from the last resource version it saw (an event's or a bookmark's) gets
every change once, in order, while several writers commit at once.

As client-go's reflector and the operator bench's watch client do: each stream ends (the
server's ``timeoutSeconds``, or the client hanging up mid-stream as a reset does) and the
next starts from the last ``resourceVersion`` seen, bookmarks included. The store's own
listener is the record of what was committed.
"""

from __future__ import annotations

import asyncio
import itertools
import json

from devcluster.helpers import Api
from kyai_devcluster import DevCluster
from kyai_devcluster._store import Event

CM = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
WRITERS = 4
ROUNDS = 15


async def http_writer(api: Api, writer: int) -> None:
    """Create, change and (every other one) delete ConfigMaps, with pauses between."""
    for index in range(ROUNDS):
        name = f"w{writer}-{index}"
        await api.ok("POST", CM, {"metadata": {"name": name}, "data": {"n": "0"}})
        await api.ok("PATCH", f"{CM}/{name}", {"data": {"n": "1"}}, content_type=MERGE)
        if index % 2:
            await api.ok("DELETE", f"{CM}/{name}")
        await asyncio.sleep(0.01 * (writer + 1))


async def store_writer(cluster: DevCluster) -> None:
    """Writes straight into the store, between the HTTP writes, as its controllers do; its
    Secrets (not watched) move the store's resource version past the watched events, so
    that bookmarks run ahead of the last event."""
    store = cluster.store
    configmaps = store.type_for("", "configmaps")
    secrets = store.type_for("", "secrets")
    for index in range(ROUNDS):
        created = store.create(configmaps, "default", {"metadata": {"name": f"ctl-{index}"}})
        store.write_spec(configmaps, created.obj, {**created.obj, "data": {"n": "1"}})
        await asyncio.sleep(0.15)
        store.create(secrets, "default", {"metadata": {"name": f"unwatched-{index}"}})
        await asyncio.sleep(0.15)


class Resuming:
    """A watch client that reconnects from the last resource version it saw (as the bench's
    ``opbench.observe.watch`` does)."""

    def __init__(self, api: Api, since: str) -> None:
        self.api = api
        self.last = since
        self.events: list[tuple[int, str, str]] = []  # (resourceVersion, type, name)
        self.bookmarks: list[tuple[int, int]] = []  # (bookmark RV, last event RV before it)
        self.resumed_from_bookmark = 0
        self.hung_up = 0
        self.streams = 0

    async def stream(self, hang_up: str) -> None:
        """One watch request from ``self.last``, until the server ends it (``timeoutSeconds``),
        or hung up (as a reset does) after three events or at a bookmark ahead of them."""
        params = {
            "watch": "true",
            "resourceVersion": self.last,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "1",
        }
        self.streams += 1
        if self.bookmarks and str(self.bookmarks[-1][0]) == self.last:
            # Resumed from a bookmark ahead of every event seen (not one at the same RV).
            self.resumed_from_bookmark += self.bookmarks[-1][0] > self.bookmarks[-1][1]
        received = 0
        async with self.api.session.get(self.api.base + CM, params=params) as response:
            assert response.status == 200
            async for line in response.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                assert event["type"] != "ERROR", event
                version = event["object"]["metadata"]["resourceVersion"]
                ahead = False
                if event["type"] == "BOOKMARK":
                    last_event = self.events[-1][0] if self.events else 0
                    self.bookmarks.append((int(version), last_event))
                    ahead = int(version) > last_event
                else:
                    name = event["object"]["metadata"]["name"]
                    self.events.append((int(version), event["type"], name))
                    received += 1
                self.last = version
                if (hang_up == "events" and received >= 3) or (hang_up == "bookmark" and ahead):
                    self.hung_up += 1
                    return  # the connection closes mid-stream

    async def follow(self, done: asyncio.Event, until: list[int]) -> None:
        """Streams until the writers are done and their last change was seen (or 10 s more)."""
        turn = 0
        loop = asyncio.get_running_loop()
        deadline = None
        while not (done.is_set() and self.events and self.events[-1][0] >= until[0]):
            if done.is_set():
                deadline = deadline or loop.time() + 10
                if loop.time() > deadline:
                    return
            turn += 1
            await self.stream(("events", "bookmark", "timeout")[turn % 3])


async def test_resumed_watches_get_every_change_once_in_order(
    cluster: DevCluster, api: Api
) -> None:
    committed: list[Event] = []

    def record(event: Event) -> None:
        if event.group_resource == ("", "configmaps"):
            committed.append(event)

    cluster.store.subscribe(record)
    listing = await api.ok("GET", CM)
    client = Resuming(api, listing["metadata"]["resourceVersion"])
    done = asyncio.Event()
    newest = [0]
    reader = asyncio.create_task(client.follow(done, newest))
    await asyncio.gather(*(http_writer(api, w) for w in range(WRITERS)), store_writer(cluster))
    newest[0] = committed[-1].resource_version
    done.set()
    await asyncio.wait_for(reader, 30)

    expected = [
        (event.resource_version, event.type, event.obj["metadata"]["name"]) for event in committed
    ]
    assert len(expected) == WRITERS * ROUNDS * 2 + WRITERS * (ROUNDS // 2) + ROUNDS * 2
    versions = [version for version, _, _ in client.events]
    # Nothing twice (a replay), nothing lost, in commit order across every reconnect.
    assert all(a < b for a, b in itertools.pairwise(versions)), versions
    assert client.events == expected
    # A bookmark is a safe resume point: never behind an event already delivered.
    assert all(bookmark >= last_event for bookmark, last_event in client.bookmarks)
    # Both ways of resuming were taken: from a bookmark, and after hanging up mid-stream.
    assert client.resumed_from_bookmark >= 1 and client.hung_up >= 1, vars(client)
    assert client.streams >= 3
