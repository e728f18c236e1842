"""The kubeconfig as kubectl finds it, read when asked.

The kubernetes client reads ``$KUBECONFIG`` once, when it is imported: a process that sets it
later (a test, a wrapper script, a CLI embedded in a longer-lived program) would get
``~/.kube/config`` or nothing. Every loader here reads the variable when it is called.
"""

from __future__ import annotations

import os
from typing import Any


def kubeconfig_path() -> str:
    """``$KUBECONFIG`` now (a path list is kept whole), else ``~/.kube/config``."""
    return os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def load_kube_config(**kwargs: Any) -> None:
    """``kubernetes.config.load_kube_config`` with ``$KUBECONFIG`` read at this call."""
    from kubernetes import config

    if kwargs.get("config_file") is None:
        kwargs["config_file"] = kubeconfig_path()
    config.load_kube_config(**kwargs)


def list_kube_config_contexts() -> tuple[Any, Any]:
    """``kubernetes.config.list_kube_config_contexts`` of the same file."""
    from kubernetes import config

    contexts, current = config.list_kube_config_contexts(config_file=kubeconfig_path())
    return contexts, current
