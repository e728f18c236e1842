"""kubectl and the operator process, for the system tests."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKER_IMAGE = "ghcr.io/kyai-io/kyai-operator:e2e"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _list_items(listed: dict[str, Any]) -> list[dict[str, Any]]:
    """A list's items with their ``apiVersion`` and ``kind`` (``kubectl get -o json`` adds them)."""
    kind = str(listed.get("kind", "")).removesuffix("List")
    items: list[dict[str, Any]] = listed.get("items") or []
    for item in items:
        item.setdefault("apiVersion", listed.get("apiVersion"))
        item.setdefault("kind", kind)
    return items


@dataclass(frozen=True)
class Resource:
    """One resource of the API server's discovery: where its objects are."""

    group: str
    version: str
    plural: str
    namespaced: bool


class KubeApi:
    """GETs against the API server of a kubeconfig, resolving names the way kubectl does.

    Names are resolved from the server's discovery: the plural, the singular, a short name,
    the kind in lower case, each alone or followed by ``.GROUP``. A name that two groups
    answer to is the core group's if one is core (kubectl's first choice); otherwise it is
    left to kubectl (:meth:`path` returns None).
    """

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port, self.headers = host, port, headers
        self.names: dict[str, list[Resource]] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeApi | None:
        """The API of the kubeconfig's current context; None for credentials not read here."""
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}

        def named(key: str, name: Any) -> dict[str, Any] | None:
            for item in config.get(key) or []:
                if item.get("name") == name:
                    found: dict[str, Any] = item.get(key[:-1]) or {}
                    return found
            return None

        context = named("contexts", config.get("current-context"))
        if context is None:
            return None
        cluster = named("clusters", context.get("cluster"))
        user = named("users", context.get("user")) or {}
        if cluster is None or not cluster.get("server"):
            return None
        if set(user) - {"token"} or set(cluster) - {"server"}:
            return None  # certificates, exec plugins, CA data: kubectl reads those
        server = urllib.parse.urlsplit(cluster["server"])
        if server.scheme != "http" or server.hostname is None or server.path not in ("", "/"):
            return None  # TLS: kubectl's
        headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        return cls(server.hostname, server.port or 80, headers)

    def get(self, path: str, params: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        """GET ``path``: the status and the JSON body (one connection, closed after)."""
        if params:
            path += "?" + urllib.parse.urlencode(params)
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            connection.request("GET", path, headers=self.headers)
            response = connection.getresponse()
            text = response.read().decode("utf-8", errors="replace")
        finally:
            connection.close()
        try:
            body: dict[str, Any] = json.loads(text)
        except ValueError:
            body = {"message": text}
        return response.status, body

    def discover(self) -> None:
        names: dict[str, list[Resource]] = {}
        versions = [("", "v1", "/api/v1")]
        for group in self.get("/apis")[1].get("groups") or []:
            preferred = (group.get("preferredVersion") or {}).get("version")
            if preferred:
                versions.append((group["name"], preferred, f"/apis/{group['name']}/{preferred}"))
        for group_name, version, path in versions:
            for resource in self.get(path)[1].get("resources") or []:
                if "/" in resource["name"]:
                    continue  # a subresource
                found = Resource(group_name, version, resource["name"], resource["namespaced"])
                aliases = {
                    resource["name"],
                    resource.get("singularName") or "",
                    str(resource.get("kind", "")).lower(),
                    *(resource.get("shortNames") or []),
                }
                for alias in aliases - {""}:
                    names.setdefault(alias, []).append(found)
                    if group_name:
                        names.setdefault(f"{alias}.{group_name}", []).append(found)
        self.names = names

    def path(self, kind: str, namespace: str, name: str | None) -> str | None:
        """The URL path of ``kind`` (a name kubectl takes) in ``namespace``, of ``name`` or all."""
        if kind.lower() not in self.names:
            self.discover()  # a CRD installed since
        found = self.names.get(kind.lower()) or []
        if len(found) > 1:
            found = [resource for resource in found if resource.group == ""]
        if len(found) != 1:
            return None
        resource = found[0]
        base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
        where = f"/namespaces/{namespace}" if resource.namespaced else ""
        return f"{base}{where}/{resource.plural}" + (f"/{name}" if name else "")


@dataclass
class Kubectl:
    kubeconfig: Path
    _api: KubeApi | None = field(default=None, init=False, repr=False, compare=False)
    _no_api: bool = field(default=False, init=False, repr=False, compare=False)

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        completed = subprocess.run(
            ["kubectl", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        if check and completed.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {completed.stderr}")
        return completed

    def apply(
        self, *objects: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(objects), check=check)

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        found = self._read(kind, namespace, name)
        if found is not None:
            if found[0] != 200:
                raise AssertionError(f"get {kind} {name} -n {namespace} failed: {found[1]}")
            return found[1]
        result: dict[str, Any] = json.loads(
            self.run("get", kind, name, "-n", namespace, "-o", "json").stdout
        )
        return result

    def items(self, kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
        found = self._read(kind, namespace, None, selector)
        if found is not None:
            if found[0] != 200:
                raise AssertionError(f"get {kind} -n {namespace} failed: {found[1]}")
            return _list_items(found[1])
        out = self.run("get", kind, "-n", namespace, "-o", "json", *selector).stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def _read(
        self, kind: str, namespace: str, name: str | None, selector: tuple[str, ...] = ()
    ) -> tuple[int, dict[str, Any]] | None:
        """GET the object (or list) from the API server itself, as ``kubectl get -o json`` would.

        A poll through ``kubectl`` costs a process (about 40 ms of CPU: the suite's system
        tests poll thousands of times); this reads the same JSON over one kept-alive
        connection. None where it cannot do exactly what kubectl would (a kubeconfig with
        credentials it does not read, a name two resources answer to, a selector other than
        ``-l``): the caller runs kubectl then.
        """
        if self._api is None and not self._no_api:
            self._api = KubeApi.from_kubeconfig(self.kubeconfig)
            self._no_api = self._api is None
        if self._api is None:
            return None
        params: dict[str, str] = {}
        if selector:
            if len(selector) != 2 or selector[0] not in ("-l", "--selector"):
                return None
            params["labelSelector"] = selector[1]
        path = self._api.path(kind, namespace, name)
        if path is None:
            return None
        return self._api.get(path, params)

    def wait_for(
        self,
        kind: str,
        name: str,
        namespace: str,
        predicate: Callable[[dict[str, Any]], bool],
        *,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = self._read(kind, namespace, name)
            if found is None:
                completed = self.run("get", kind, name, "-n", namespace, "-o", "json", check=False)
                if completed.returncode == 0:
                    found = 200, json.loads(completed.stdout)
            if found is not None and found[0] == 200:
                last = found[1]
                if predicate(last):
                    return last
            time.sleep(0.3)
        raise AssertionError(f"{kind}/{name} never matched; last status: {last.get('status')}")

    def wait_items(
        self,
        kind: str,
        namespace: str,
        predicate: Callable[[list[dict[str, Any]]], bool],
        *selector: str,
        timeout: float = 60.0,
        what: str = "",
    ) -> list[dict[str, Any]]:
        """The objects of ``kind`` (``-l`` ``selector``) once ``predicate`` holds of them."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.items(kind, namespace, *selector)
            if predicate(found):
                return found
            if time.monotonic() >= deadline:
                names = [item["metadata"]["name"] for item in found]
                said = what or f"{kind} never matched"
                raise AssertionError(f"{said} (within {timeout:g} s): {kind} {names}")
            time.sleep(0.3)

    def wait_gone(self, kind: str, name: str, namespace: str, *, timeout: float = 30.0) -> bool:
        """Whether the object is gone (``kubectl get`` fails) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.run("get", kind, name, "-n", namespace, check=False).returncode != 0:
                return True
            time.sleep(0.3)
        return False


def finished(kubectl: Kubectl, name: str, namespace: str, timeout: float = 120) -> dict[str, Any]:
    """The EvaluationRun once it has Succeeded or Failed."""
    return kubectl.wait_for(
        "evaluationrun", name, namespace, phase_is("Succeeded", "Failed"), timeout=timeout
    )


def events_of(
    kubectl: Kubectl, name: str, namespace: str, reason: str, text: str = "", timeout: float = 10
) -> list[dict[str, Any]]:
    """The Events of object ``name`` with ``reason`` whose message names ``text``, waited for
    ``timeout`` seconds (the operator posts events beside its status writes); [] if none came."""

    def matching(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            event
            for event in events
            if event["involvedObject"].get("name") == name
            and event.get("reason") == reason
            and text in (event.get("message") or "")
        ]

    deadline = time.monotonic() + timeout  # then no match is the answer, not a failure
    found = kubectl.wait_items(
        "events",
        namespace,
        lambda events: bool(matching(events)) or time.monotonic() >= deadline,
        timeout=timeout + 30,
    )
    return matching(found)


def condition(obj: dict[str, Any], type_: str = "Ready") -> dict[str, Any]:
    """The object's condition ``type_``, or {} when it has none."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((found for found in conditions if found.get("type") == type_), {})


def phase_is(*phases: str) -> Callable[[dict[str, Any]], bool]:
    """For :meth:`Kubectl.wait_for`: the object's ``status.phase`` is one of ``phases``."""
    return lambda obj: (obj.get("status") or {}).get("phase") in phases


def reason_is(*reasons: str, type_: str = "Ready") -> Callable[[dict[str, Any]], bool]:
    """For :meth:`Kubectl.wait_for`: the reason of condition ``type_`` is one of ``reasons``."""
    return lambda obj: condition(obj, type_).get("reason") in reasons


def progress(obj: dict[str, Any]) -> int:
    """How many rows a run has answered (``status.progress.done``)."""
    return int(((obj.get("status") or {}).get("progress") or {}).get("done", 0))


class Operator:
    """``kyai operator`` as a subprocess; restartable."""

    def __init__(
        self, kubeconfig: Path, log_dir: Path, *, env: dict[str, str] | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.extra_env = dict(env or {})
        self.log_dir = log_dir
        self.metrics_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "KYAI_WORKER_IMAGE": WORKER_IMAGE,
            "KYAI_METRICS_PORT": str(self.metrics_port),
            "KYAI_HEALTH_PORT": "0",
            **self.extra_env,
        }
        with (self.log_dir / f"operator-{self.starts}.log").open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kyai.cli", "operator", "--all-namespaces"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1)
                return
            except httpx.HTTPError:
                assert self.process.poll() is None, self.logs()
                time.sleep(0.2)
        raise AssertionError("the operator did not start:\n" + self.logs())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        self.process = None

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def logs(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-4000:]
            for path in sorted(self.log_dir.glob("operator-*.log"))
        )


def secret(name: str, namespace: str, **data: str) -> dict[str, Any]:
    """A Secret manifest with ``data`` as its stringData."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": data,
    }


def keyed_judge(endpoint: str, secret: str = "judge-key", key: str = "token") -> dict[str, Any]:
    """An EvaluationRun's ``spec.judge``: the LLM judge at ``endpoint`` with a key Secret."""
    return {
        "type": "llm",
        "llm": {
            "endpoint": endpoint,
            "model": "judge",
            "apiKeySecretRef": {"name": secret, "key": key},
        },
    }


def pod_network_operator(
    cluster: Any, kubeconfig: Path, log_dir: Path, judge_url: str, **env: str
) -> Operator:
    """The operator as a process that resolves Service names as a pod does (the devcluster's
    ``network_env``), the double as default judge, offline; ``env`` added."""
    return Operator(
        kubeconfig,
        log_dir,
        env=cluster.network_env(
            {
                **os.environ,
                "KYAI_DEFAULT_JUDGE_ENDPOINT": judge_url,
                "KYAI_DEFAULT_JUDGE_MODEL": "judge",
                "HF_HUB_OFFLINE": "1",
                **env,
            }
        ),
    )
