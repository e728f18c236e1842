"""A small kopf operator for the devcluster's kopf test (run with ``kopf run --standalone``).

It handles ``Widget`` objects (``example.com/v1``, see conftest's CRD):

* create: returns the size, stored by kopf in ``status.create_widget``;
* update of ``spec.size``: records the old and new size in ``status.resized``;
* delete: creates a ConfigMap ``<name>-deleted`` (proof that the handler ran under the
  finalizer, while the object still existed), then kopf removes its finalizer.
"""

from __future__ import annotations

from typing import Any

import kopf
import kubernetes


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.watching.server_timeout = 30
    settings.watching.client_timeout = 40
    settings.watching.connect_timeout = 5
    settings.networking.request_timeout = 10
    settings.batching.idle_timeout = 0.5
    settings.batching.batch_window = 0.05
    settings.posting.level = 0
    settings.posting.loggers = True
    kubernetes.config.load_kube_config()


@kopf.on.create("example.com", "v1", "widgets")
def create_widget(spec: kopf.Spec, body: kopf.Body, **_: Any) -> dict[str, Any]:
    kopf.info(body, reason="WidgetCreated", message=f"size {spec['size']}")
    return {"size": spec["size"], "message": "created"}


@kopf.on.update("example.com", "v1", "widgets", field="spec.size")
def resize_widget(old: Any, new: Any, patch: kopf.Patch, **_: Any) -> None:
    patch.status["resized"] = {"from": old, "to": new}


@kopf.on.delete("example.com", "v1", "widgets")
def delete_widget(name: str, namespace: str, **_: Any) -> None:
    api = kubernetes.client.CoreV1Api()
    body = {"metadata": {"name": f"{name}-deleted"}, "data": {"widget": name}}
    api.create_namespaced_config_map(namespace, body)
