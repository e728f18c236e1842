"""Shared helpers of the devcluster tests: a Widget CRD and a small JSON client."""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
import time
from collections.abc import Callable
from typing import Any

import aiohttp

Obj = dict[str, Any]

KUBECTL = shutil.which("kubectl")

WIDGET_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                    "color": {
                                        "type": "string",
                                        "enum": ["red", "blue"],
                                        "default": "red",
                                    },
                                    "label": {
                                        "type": "string",
                                        "pattern": "^[a-z]+$",
                                        "maxLength": 8,
                                    },
                                    "tags": {
                                        "type": "array",
                                        "items": {"type": "string"},
                                        "maxItems": 3,
                                    },
                                    "limits": {
                                        "type": "object",
                                        "properties": {
                                            "cpu": {"type": "number", "default": 0.5},
                                            "memory": {"x-kubernetes-int-or-string": True},
                                        },
                                        "default": {},
                                    },
                                    "extra": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    }
                },
            }
        ],
    },
}


def widget(name: str, size: int = 3, **spec: Any) -> Obj:
    """A Widget manifest."""
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, **spec},
    }


class Api:
    """A minimal JSON client for the devcluster (what the tests need, nothing more)."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        all_headers = {"Content-Type": content_type, **(headers or {})}
        async with self.session.request(
            method, self.base + path, data=data, params=params, headers=all_headers
        ) as response:
            text = await response.text()
            if response.content_type != "application/json":
                return response.status, text
            return response.status, json.loads(text)

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("POST", path, body, **kwargs)

    async def put(self, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("PUT", path, body, **kwargs)

    async def patch(
        self, path: str, body: Any, kind: str = "merge", **kwargs: Any
    ) -> tuple[int, Any]:
        content_type = {
            "merge": "application/merge-patch+json",
            "json": "application/json-patch+json",
            "strategic": "application/strategic-merge-patch+json",
        }[kind]
        return await self.request("PATCH", path, body, content_type=content_type, **kwargs)

    async def delete(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        return await self.request("DELETE", path, body, **kwargs)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, result = await self.request(method, path, body, **kwargs)
        assert status < 300, (status, result)
        return result

    async def create_crd(self, crd: Obj | None = None) -> Obj:
        created: Obj = await self.ok(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            copy.deepcopy(crd or WIDGET_CRD),
        )
        return created

    async def wait_for(
        self, path: str, predicate: Callable[[Any], bool], *, timeout: float = 15.0
    ) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            status, last = await self.get(path)
            if status == 200 and predicate(last):
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting on {path}; last: {last}")


#: The project's image in the devcluster tests (a default local-image pattern).
IMAGE = "ghcr.io/kyai-io/kyai-operator:test"


def job(name: str, *, backoff: int = 0, image: str = IMAGE, **container: Any) -> Obj:
    """A Job with one container ``main`` (``container``'s fields; ``volumes`` go to the pod)."""
    spec: Obj = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": image, **container}],
    }
    for key in ("volumes",):
        if key in container:
            spec[key] = spec["containers"][0].pop(key)
    return {
        "metadata": {"name": name},
        "spec": {"backoffLimit": backoff, "template": {"spec": spec}},
    }
