"""The operator's REST client against the devcluster: paged LISTs, a rotated token."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kyai.controllers import _kube
from kyai.controllers._kube import KubeClient, KubeError
from kyai_devcluster import DevCluster
from kyai_devcluster._tokens import ADMIN_TOKEN, issue


async def test_a_list_is_read_in_pages_and_whole(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_kube, "LIST_PAGE_SIZE", 2)
    kube = KubeClient(cluster.url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    calls: list[dict[str, str]] = []
    request = kube.request

    async def counted(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        calls.append(dict(kwargs.get("params") or {}))
        return await request(method, path, **kwargs)

    monkeypatch.setattr(kube, "request", counted)
    try:
        for index in range(5):
            labels = {"team": "a" if index % 2 else "b"}
            await kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": f"cm-{index}", "namespace": "default",
                                            "labels": labels}})  # fmt: skip
        calls.clear()
        listed = await kube.list("ConfigMap", "default")
        names = [item["metadata"]["name"] for item in listed]
        assert [name for name in names if name.startswith("cm-")] == [f"cm-{i}" for i in range(5)]
        assert len(calls) >= 3 and all(call["limit"] == "2" for call in calls)
        assert "continue" not in calls[0] and all("continue" in call for call in calls[1:])
        selected = await kube.list("ConfigMap", "default", label_selector="team=a")
        assert [item["metadata"]["name"] for item in selected] == ["cm-1", "cm-3"]
    finally:
        await kube.aclose()


async def test_the_token_file_is_read_again_after_a_while(
    cluster: DevCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_kube, "TOKEN_REREAD_SECONDS", 0.3)
    token = tmp_path / "token"
    token.write_text("not-a-token\n")
    kube = KubeClient(cluster.url, token_file=token)
    path = "/api/v1/namespaces/default/configmaps"
    try:
        with pytest.raises(KubeError) as refused:
            await kube.request("GET", path)
        assert refused.value.status == 401
        # Rotated: a real service-account token (allowed nothing: 403, not 401)...
        token.write_text(issue(cluster.token_key, "default", "default") + "\n")
        with pytest.raises(KubeError) as still:
            await kube.request("GET", path)
        assert still.value.status == 401  # ...is not read on every request,
        await asyncio.sleep(0.35)
        with pytest.raises(KubeError) as rotated:
            await kube.request("GET", path)
        assert rotated.value.status == 403  # ...but once the re-read interval is over.
        token.unlink()  # gone for a moment: the last token read is used
        await asyncio.sleep(0.35)
        with pytest.raises(KubeError) as kept:
            await kube.request("GET", path)
        assert kept.value.status == 403
    finally:
        await kube.aclose()
