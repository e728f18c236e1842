"""Watches: events from a resource version, bookmarks, timeouts, 410, selectors, shutdown."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from devcluster.helpers import Api, widget
from kyai_devcluster import DevCluster

CM = "/api/v1/namespaces/default/configmaps"


async def events(
    api: Api, path: str, params: dict[str, str], *, headers: dict[str, str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON lines of a watch stream until it ends."""
    async with api.session.get(
        api.base + path, params={"watch": "true", **params}, headers=headers or {}
    ) as response:
        assert response.status == 200
        async for line in response.content:
            if line.strip():
                yield json.loads(line)


async def collect(
    api: Api, path: str, params: dict[str, str], count: int, *, timeout: float = 10.0
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def run() -> None:
        async for event in events(api, path, params):
            if event["type"] != "BOOKMARK":
                found.append(event)
            if len(found) >= count:
                return

    await asyncio.wait_for(run(), timeout)
    return found


def summary(found: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["type"], event["object"]["metadata"]["name"]) for event in found]


async def test_watch_from_resource_version_sees_changes_in_order(api: Api) -> None:
    listing = await api.ok("GET", CM)
    since = listing["metadata"]["resourceVersion"]
    await api.ok("POST", CM, {"metadata": {"name": "a"}, "data": {"x": "1"}})
    await api.ok(
        "PATCH", f"{CM}/a", {"data": {"x": "2"}}, content_type="application/merge-patch+json"
    )
    await api.ok("DELETE", f"{CM}/a")
    found = await collect(api, CM, {"resourceVersion": since, "timeoutSeconds": "5"}, 3)
    assert summary(found) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert found[1]["object"]["data"] == {"x": "2"}
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in found]
    assert versions == sorted(versions) and versions[0] > int(since)


async def test_watch_streams_live_changes(api: Api) -> None:
    listing = await api.ok("GET", CM)

    async def change() -> None:
        await asyncio.sleep(0.2)
        await api.ok("POST", CM, {"metadata": {"name": "live"}})
        await api.ok(
            "PATCH",
            f"{CM}/live",
            {"metadata": {"labels": {"a": "b"}}},
            content_type="application/merge-patch+json",
        )

    task = asyncio.create_task(change())
    found = await collect(api, CM, {"resourceVersion": listing["metadata"]["resourceVersion"]}, 2)
    await task
    assert summary(found) == [("ADDED", "live"), ("MODIFIED", "live")]


async def test_watch_without_version_starts_with_current_objects(api: Api) -> None:
    await api.ok("POST", CM, {"metadata": {"name": "existing"}})
    found = await collect(api, CM, {"timeoutSeconds": "2"}, 1)
    assert summary(found) == [("ADDED", "existing")]


async def test_selector_transitions_become_added_and_deleted(api: Api) -> None:
    listing = await api.ok("GET", CM)
    await api.ok("POST", CM, {"metadata": {"name": "s", "labels": {"app": "x"}}})
    await api.ok(
        "PATCH",
        f"{CM}/s",
        {"metadata": {"labels": {"app": "y"}}},
        content_type="application/merge-patch+json",
    )
    await api.ok(
        "PATCH",
        f"{CM}/s",
        {"metadata": {"labels": {"app": "x"}}},
        content_type="application/merge-patch+json",
    )
    params = {"resourceVersion": listing["metadata"]["resourceVersion"], "labelSelector": "app=x"}
    found = await collect(api, CM, params, 3)
    assert summary(found) == [("ADDED", "s"), ("DELETED", "s"), ("ADDED", "s")]


async def test_bookmarks_and_timeout(api: Api) -> None:
    listing = await api.ok("GET", CM)
    started = time.monotonic()
    seen: list[dict[str, Any]] = []
    params = {
        "resourceVersion": listing["metadata"]["resourceVersion"],
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
    }

    async def read() -> None:
        async for event in events(api, CM, params):
            seen.append(event)

    # The server ends the watch at timeoutSeconds (1 s), not before. Nothing else ends the
    # stream: a server ignoring timeoutSeconds fails the 10 s safety net.
    await asyncio.wait_for(read(), 10)
    assert time.monotonic() - started >= 0.9
    bookmarks = [event for event in seen if event["type"] == "BOOKMARK"]
    assert bookmarks, seen
    assert bookmarks[0]["object"]["kind"] == "ConfigMap"
    assert int(bookmarks[0]["object"]["metadata"]["resourceVersion"]) >= int(
        listing["metadata"]["resourceVersion"]
    )


async def test_send_initial_events_ends_with_annotated_bookmark(api: Api) -> None:
    await api.ok("POST", CM, {"metadata": {"name": "first"}})
    params = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "2",
    }
    seen = []
    async for event in events(api, CM, params):
        seen.append(event)
        if event["type"] == "BOOKMARK":
            break
    assert [e["type"] for e in seen] == ["ADDED", "BOOKMARK"]
    assert seen[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_too_old_resource_version_is_410_expired(tmp_path: Path) -> None:
    async with DevCluster(workdir=tmp_path, history_limit=5) as small, aiohttp.ClientSession() as s:
        api = Api(s, small.url)
        first = await api.ok("POST", CM, {"metadata": {"name": "c0"}})
        for index in range(1, 10):
            await api.ok("POST", CM, {"metadata": {"name": f"c{index}"}})
        found = []
        async for event in events(
            api, CM, {"resourceVersion": first["metadata"]["resourceVersion"]}
        ):
            found.append(event)
        assert len(found) == 1 and found[0]["type"] == "ERROR"
        status = found[0]["object"]
        assert status["kind"] == "Status" and status["code"] == 410
        assert status["reason"] == "Expired"
        assert status["message"].startswith("too old resource version")


async def test_table_watch(api: Api) -> None:
    await api.create_crd()
    listing = await api.ok("GET", "/apis/example.com/v1/namespaces/default/widgets")
    await api.ok("POST", "/apis/example.com/v1/namespaces/default/widgets", widget("t", size=4))
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    params = {"resourceVersion": listing["metadata"]["resourceVersion"], "timeoutSeconds": "2"}
    async for event in events(
        api, "/apis/example.com/v1/namespaces/default/widgets", params, headers=headers
    ):
        assert event["type"] == "ADDED"
        table = event["object"]
        assert table["kind"] == "Table"
        assert table["rows"][0]["cells"][:2] == ["t", 4]
        break


async def test_stop_ends_open_watches_promptly(tmp_path: Path) -> None:
    cluster = DevCluster(workdir=tmp_path)
    await cluster.start()
    async with aiohttp.ClientSession() as session:
        api = Api(session, cluster.url)
        reader = asyncio.create_task(collect(api, CM, {}, 1000, timeout=30))
        await asyncio.sleep(0.3)
        assert cluster.store.watch_count == 1
        # A safety net (stopping takes well under a second), below the reader's own 30 s: a
        # stop that waited for the watch to end by itself would time out here.
        await asyncio.wait_for(cluster.stop(), 20)
        result = await asyncio.wait_for(asyncio.gather(reader, return_exceptions=True), 5)
        assert not isinstance(result[0], asyncio.TimeoutError)
    assert cluster.store.watch_count == 0


async def test_client_disconnect_releases_the_watch(cluster: DevCluster, api: Api) -> None:
    task = asyncio.create_task(collect(api, CM, {}, 1000, timeout=30))
    await asyncio.sleep(0.3)
    assert cluster.store.watch_count == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    deadline = time.monotonic() + 5
    while cluster.store.watch_count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert cluster.store.watch_count == 0
