"""The ``kubernetes`` Python client and kopf, unmodified, against the devcluster."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from devcluster.helpers import WIDGET_CRD, widget
from kyai_devcluster import DevClusterThread

EXAMPLE_OPERATOR = Path(__file__).with_name("example_operator.py")


@pytest.fixture(scope="module")
def client(thread_cluster: DevClusterThread) -> Iterator[kubernetes.client.ApiClient]:
    api_client = kubernetes.config.new_client_from_config(
        config_file=str(thread_cluster.kubeconfig_path)
    )
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    extensions.create_custom_resource_definition(copy.deepcopy(WIDGET_CRD))
    yield api_client
    api_client.close()


def eventually(check: Callable[[], Any], *, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except (AssertionError, kubernetes.client.ApiException):
            if time.monotonic() > deadline:
                raise
        else:
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout}s: {check}")
        time.sleep(0.1)


def test_typed_client_crud_and_watch(client: kubernetes.client.ApiClient) -> None:
    core = kubernetes.client.CoreV1Api(client)
    body = kubernetes.client.V1ConfigMap(
        metadata=kubernetes.client.V1ObjectMeta(name="typed", labels={"app": "x"}),
        data={"a": "1"},
    )
    created = core.create_namespaced_config_map("default", body)
    assert created.metadata.uid and created.metadata.creation_timestamp is not None
    patched = core.patch_namespaced_config_map("typed", "default", {"data": {"b": "2"}})
    assert patched.data == {"a": "1", "b": "2"}
    listing = core.list_namespaced_config_map("default", label_selector="app in (x)")
    assert [item.metadata.name for item in listing.items] == ["typed"]

    def change() -> None:
        time.sleep(0.3)
        core.patch_namespaced_config_map("typed", "default", {"data": {"c": "3"}})
        core.delete_namespaced_config_map("typed", "default")

    thread = threading.Thread(target=change)
    thread.start()
    seen = []
    watch = kubernetes.watch.Watch()
    for event in watch.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=10,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            watch.stop()
    thread.join()
    assert seen == [("MODIFIED", "typed"), ("DELETED", "typed")]
    with pytest.raises(kubernetes.client.ApiException) as caught:
        core.read_namespaced_config_map("typed", "default")
    assert caught.value.status == 404


def test_custom_objects_api(client: kubernetes.client.ApiClient) -> None:
    custom = kubernetes.client.CustomObjectsApi(client)
    args = ("example.com", "v1", "default", "widgets")
    custom.create_namespaced_custom_object(*args, widget("py", size=2))
    with pytest.raises(kubernetes.client.ApiException) as caught:
        custom.create_namespaced_custom_object(*args, widget("toolarge", size=11))
    assert caught.value.status == 422 and "spec.size" in str(caught.value.body)
    status = custom.patch_namespaced_custom_object_status(*args, "py", {"status": {"phase": "A"}})
    assert status["status"] == {"phase": "A"}
    updated = custom.patch_namespaced_custom_object(*args, "py", {"spec": {"size": 3}})
    assert updated["metadata"]["generation"] == 2 and updated["status"] == {"phase": "A"}
    listing = custom.list_namespaced_custom_object(*args)
    assert [item["metadata"]["name"] for item in listing["items"]] == ["py"]
    custom.delete_namespaced_custom_object(*args, "py")


def test_kopf_operator_handles_lifecycle(
    client: kubernetes.client.ApiClient, thread_cluster: DevClusterThread, tmp_path: Path
) -> None:
    core = kubernetes.client.CoreV1Api(client)
    custom = kubernetes.client.CustomObjectsApi(client)
    core.create_namespace({"metadata": {"name": "kopf"}})
    args = ("example.com", "v1", "kopf", "widgets")
    env = {**os.environ, "KUBECONFIG": str(thread_cluster.kubeconfig_path)}
    log_path = tmp_path / "kopf.log"
    kopf_bin = Path(sys.executable).with_name("kopf")
    with log_path.open("w") as log:
        operator = subprocess.Popen(
            [
                str(kopf_bin),
                "run",
                "--standalone",
                "--namespace",
                "kopf",
                "--verbose",
                str(EXAMPLE_OPERATOR),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            custom.create_namespaced_custom_object(*args, widget("managed", size=2))

            def handled_create() -> Any:
                obj = custom.get_namespaced_custom_object(*args, "managed")
                assert obj.get("status", {}).get("create_widget") == {
                    "size": 2,
                    "message": "created",
                }, obj
                return obj

            obj = eventually(handled_create)
            assert "kopf.zalando.org/KopfFinalizerMarker" in obj["metadata"]["finalizers"]

            custom.patch_namespaced_custom_object(*args, "managed", {"spec": {"size": 7}})
            eventually(
                lambda: (
                    custom.get_namespaced_custom_object(*args, "managed")
                    .get("status", {})
                    .get("resized")
                    == {"from": 2, "to": 7}
                )
            )

            events = eventually(
                lambda: (
                    core.list_namespaced_event(
                        "kopf", field_selector=f"involvedObject.uid={obj['metadata']['uid']}"
                    ).items
                )
            )
            assert "WidgetCreated" in {event.reason for event in events}

            custom.delete_namespaced_custom_object(*args, "managed")
            eventually(lambda: core.read_namespaced_config_map("managed-deleted", "kopf"))

            def gone() -> bool:
                try:
                    custom.get_namespaced_custom_object(*args, "managed")
                except kubernetes.client.ApiException as error:
                    return error.status == 404
                return False

            eventually(gone)
        finally:
            operator.terminate()
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                operator.kill()
                operator.wait()
    text = log_path.read_text()
    assert "Handler 'create_widget' succeeded" in text
    assert "Handler 'resize_widget/spec.size' succeeded" in text
    assert "Handler 'delete_widget' succeeded" in text
    assert "Traceback" not in text, text
