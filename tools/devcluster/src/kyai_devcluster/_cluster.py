"""The devcluster as one object: store, HTTP server, controllers and kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from kyai_devcluster._builtins import NODE_NAME
from kyai_devcluster._controllers import (
    Controller,
    CRDController,
    DeploymentController,
    GarbageCollector,
    JobController,
    NamespaceController,
    PersistentVolumeClaimController,
    ReplicaSetController,
)
from kyai_devcluster._images import (
    DEFAULT_ENTRYPOINT,
    DEFAULT_LOCAL_IMAGES,
    DEFAULT_PROJECT_IMAGE,
    DEFAULT_STANDIN_IMAGE,
)
from kyai_devcluster._kubelet import Kubelet, RuntimeName
from kyai_devcluster._kueue import KueueController, install_crds, kueue_webhook
from kyai_devcluster._lws import LeaderWorkerSetController, lws_webhook
from kyai_devcluster._lws import install_crds as install_lws_crds
from kyai_devcluster._network import HostsFile, ServiceProxy, network_env
from kyai_devcluster._pki import Pki, PkiError, make_pki
from kyai_devcluster._runtime import EntryFunction, PodmanRuntime, ProcessRuntime, Runtime
from kyai_devcluster._server import KUBERNETES_VERSION, ApiServer
from kyai_devcluster._store import NAMESPACES, Store, now_rfc3339
from kyai_devcluster._tokens import ADMIN_TOKEN, new_signing_key

logger = logging.getLogger("kyai_devcluster")

#: Connections the listeners queue before they are accepted (the kernel caps it at
#: net.core.somaxconn, 4096 on current kernels). aiohttp's default, 128, overflowed under a
#: burst of thousands of pods and clients: the kernel then resets new connections ("SYN
#: flooding" in its log), where a real API server's Go listener asks for somaxconn.
LISTEN_BACKLOG = 4096

Obj = dict[str, Any]

#: Namespaces that exist from the start.
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class DevClusterError(RuntimeError):
    """The devcluster could not start or stop as asked."""


def kubeconfig(
    url: str,
    *,
    namespace: str = "default",
    name: str = "kyai-devcluster",
    token: str = ADMIN_TOKEN,
) -> Obj:
    """A kubeconfig document pointing at ``url`` with ``namespace`` as the current one.

    ``token`` is the admin token by default; pod processes get their service account's, or
    none (an empty string: anonymous) when no token is mounted.
    """
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": url}}],
        "users": [{"name": name, "user": {"token": token} if token else {}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
        "preferences": {},
    }


#: Stands for the token in a cached kubeconfig text (a plain YAML scalar, as tokens are).
_TOKEN_SLOT = "kyai-devcluster-token-slot"
_PLAIN_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


@functools.lru_cache(maxsize=256)
def _kubeconfig_template(url: str, namespace: str) -> str:
    return yaml.safe_dump(kubeconfig(url, namespace=namespace, token=_TOKEN_SLOT), sort_keys=False)


def _kubeconfig_text(url: str, namespace: str, token: str) -> str:
    """The YAML of :func:`kubeconfig`.

    Every pod has its own (its own token): the document is dumped once per namespace and
    the token put in place, when the token is a plain scalar (a JWT or the admin's is).
    """
    if not token or not _PLAIN_TOKEN.fullmatch(token):
        return yaml.safe_dump(kubeconfig(url, namespace=namespace, token=token), sort_keys=False)
    return _kubeconfig_template(url, namespace).replace(_TOKEN_SLOT, token)


def write_kubeconfig(
    path: Path, url: str, *, namespace: str = "default", token: str = ADMIN_TOKEN
) -> Path:
    """Write a kubeconfig for ``url`` to ``path`` (parents created, mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_kubeconfig_text(url, namespace, token))
    path.chmod(0o600)
    return path


class DevCluster:
    """A local Kubernetes API server with simulated controllers and kubelet.

    Use it as an async context manager::

        async with DevCluster(workdir=tmp_path) as cluster:
            ...  # cluster.url, cluster.kubeconfig_path

    ``workdir`` holds the volumes, pod logs and per-namespace kubeconfigs of pod processes
    (a temporary directory, removed on stop, when not given). ``port=0`` picks a free port.
    ``runtime`` is ``process`` (pods as local processes) or ``podman`` (pods as containers;
    ``image`` is the project image it runs for the project's images, ``standin_image`` the
    stand-in image it runs for the stand-ins' and serving engines' images).
    ``https_port`` is the HTTPS listener's port (0: a free one; None: no HTTPS listener),
    which in-cluster configuration of containers uses. ``engine_command`` replaces the
    engine stand-in (``python -m kyai_testing.engines``) that serving engines' images run;
    ``engine_commands`` does so per image pattern (fnmatch, first match wins, before
    ``engine_command``; its patterns count as engine images): ``{"vllm/vllm-openai*":
    [python, launcher]}`` runs a real ``vllm serve`` for vLLM's images, the stand-in for
    the others. Either command is followed by the container's command and args.
    ``entrypoint_function`` (process runtime) replaces ``entrypoint``: a local-image
    container without a command runs as that coroutine in the devcluster's event loop.
    ``kueue`` installs Kueue's CRDs and runs the Kueue emulation (:mod:`kyai_devcluster._kueue`).
    ``lws`` installs LeaderWorkerSet's CRD and runs its emulation (:mod:`kyai_devcluster._lws`).
    """

    def __init__(
        self,
        *,
        workdir: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: Path | None = None,
        local_images: Sequence[str] = DEFAULT_LOCAL_IMAGES,
        entrypoint: Sequence[str] = DEFAULT_ENTRYPOINT,
        history_limit: int = 10_000,
        bookmark_interval: float = 5.0,
        job_backoff_seconds: float = 0.2,
        access_log: bool = False,
        runtime: RuntimeName = "process",
        image: str = DEFAULT_PROJECT_IMAGE,
        standin_image: str = DEFAULT_STANDIN_IMAGE,
        https_port: int | None = 0,
        max_probe_period: float | None = 1.0,
        engine_command: Sequence[str] | None = None,
        entrypoint_function: EntryFunction | None = None,
        kueue: bool = False,
        lws: bool = False,
        engine_commands: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if runtime not in ("process", "podman"):
            raise DevClusterError(f"runtime must be 'process' or 'podman', not {runtime!r}")
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path()
        self.host = host
        self.port = port
        self._kubeconfig_path = kubeconfig_path
        self.local_images = tuple(local_images)
        self.entrypoint = tuple(entrypoint)
        self.store = Store(history_limit=history_limit)
        #: Signs the service-account tokens pods get; the API server checks them.
        self.token_key = new_signing_key()
        self.server = ApiServer(
            self.store, bookmark_interval=bookmark_interval, token_key=self.token_key
        )
        self._job_backoff_seconds = job_backoff_seconds
        self._access_log = access_log
        self._runner: web.AppRunner | None = None
        self._controllers: list[Controller] = []
        self._kubelet: Kubelet | None = None
        self.url = ""
        self.runtime_name: RuntimeName = runtime
        self.image = image
        self.standin_image = standin_image
        self.https_port = https_port
        self.https_url = ""
        self.max_probe_period = max_probe_period
        self.engine_command = tuple(engine_command) if engine_command else None
        self.engine_commands = {
            pattern: tuple(command) for pattern, command in (engine_commands or {}).items()
        }
        self.entrypoint_function = entrypoint_function
        self.kueue = kueue
        self.lws = lws
        self.pki: Pki | None = None
        self._https_runner: web.AppRunner | None = None
        self._proxy: ServiceProxy | None = None
        self._hosts: HostsFile | None = None

    @property
    def kubeconfig_path(self) -> Path:
        """The kubeconfig that points at this server (``default`` namespace)."""
        return self._kubeconfig_path or self.workdir / "kubeconfig"

    def kubeconfig_for(self, namespace: str, token: str | None = None) -> Path:
        """A kubeconfig whose current namespace is ``namespace`` (what pod processes get).

        With ``token`` (a service-account token) it authenticates as that account; with an
        empty one, not at all (a pod without a mounted token); without, as the admin.
        """
        if token is None:
            path = self.workdir / "kubeconfigs" / f"{namespace}.yaml"
        elif not token:
            path = self.workdir / "kubeconfigs" / f"{namespace}-anonymous.yaml"
        else:
            digest = hashlib.sha256(token.encode()).hexdigest()[:16]
            path = self.workdir / "kubeconfigs" / f"{namespace}-{digest}.yaml"
        if not path.exists():
            if token is None:
                write_kubeconfig(path, self.url, namespace=namespace)
            else:
                write_kubeconfig(path, self.url, namespace=namespace, token=token)
        return path

    @property
    def hosts_path(self) -> Path:
        """The hosts file with Service names (``/etc/hosts`` of containers)."""
        return self.workdir / "hosts"

    def network_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a Python process that resolves Service names like a pod does.

        ``base`` (default: this process's environment) with the name-resolution shim on
        ``PYTHONPATH``; give it to processes a test starts itself (e.g. the operator).
        """
        return network_env(self.hosts_path, base)

    def claim_dir(self, namespace: str, claim: str) -> Path:
        """The directory that backs a PersistentVolumeClaim (the same for every pod)."""
        path = self.workdir / "volumes" / namespace / claim
        path.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def kubelet(self) -> Kubelet:
        """The simulated kubelet (after start)."""
        if self._kubelet is None:
            raise DevClusterError("The devcluster is not started.")
        return self._kubelet

    async def start(self) -> None:
        """Bind the port, write the kubeconfig and start the controllers."""
        if self._runner is not None:
            raise DevClusterError("The devcluster is already started.")
        if self._own_workdir:
            self.workdir = Path(tempfile.mkdtemp(prefix="kyai-devcluster-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        runtime: Runtime
        try:
            runtime = PodmanRuntime() if self.runtime_name == "podman" else ProcessRuntime()
        except RuntimeError as exc:
            raise DevClusterError(str(exc)) from exc
        if self.https_port is not None:
            try:
                self.pki = await asyncio.to_thread(make_pki, self.workdir / "pki")
            except (PkiError, OSError, subprocess.SubprocessError) as exc:
                if self.runtime_name == "podman":
                    raise DevClusterError(f"Cannot make the HTTPS certificates: {exc}") from exc
                logger.warning("no HTTPS listener: %s", exc)
        self._hosts = HostsFile(self.hosts_path)
        self._proxy = ServiceProxy(self.store, hosts=self._hosts)
        self._kubelet = Kubelet(
            self.store,
            workdir=self.workdir,
            local_images=self.local_images,
            entrypoint=self.entrypoint,
            kubeconfig_for=self.kubeconfig_for,
            claim_dir=self.claim_dir,
            runtime=runtime,
            token_key=self.token_key,
            project_image=self.image,
            standin_image=self.standin_image,
            hosts_path=self.hosts_path,
            ca_file=self.pki.ca_cert if self.pki is not None else None,
            max_probe_period=self.max_probe_period,
            engine_command=self.engine_command,
            entrypoint_function=self.entrypoint_function,
            engine_commands=self.engine_commands,
        )
        self.server.logs = self._kubelet
        self._controllers = [
            GarbageCollector(self.store),
            NamespaceController(self.store),
            CRDController(self.store),
            PersistentVolumeClaimController(self.store, claim_dir=self.claim_dir),
            DeploymentController(self.store),
            ReplicaSetController(self.store),
            JobController(self.store, backoff_seconds=self._job_backoff_seconds),
        ]
        if self.kueue:
            self._controllers.append(KueueController(self.store))
            self.store.mutators.append(kueue_webhook)
        if self.lws:
            self._controllers.append(LeaderWorkerSetController(self.store))
            self.store.mutators.append(lws_webhook)
        for controller in self._controllers:
            self.store.subscribe(controller.on_event)
            controller.start()
        self.store.subscribe(self._kubelet.on_event)
        self.store.subscribe(self._proxy.on_event)
        self._bootstrap()
        runner = web.AppRunner(
            self.server.application(),
            handle_signals=False,
            access_log=logging.getLogger("kyai_devcluster.access") if self._access_log else None,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await runner.setup()
        if self.pki is not None:
            # Before the HTTP listener: no pod can be created before containers can learn
            # where the in-cluster endpoint is.
            await self._start_https(self.pki)
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True, backlog=LISTEN_BACKLOG)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            if self._https_runner is not None:
                await self._https_runner.cleanup()
                self._https_runner = None
            raise DevClusterError(f"Cannot listen on {self.host}:{self.port}: {exc}.") from exc
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        self.url = f"http://{self.host}:{self.port}"
        self.server.address = f"{self.host}:{self.port}"
        write_kubeconfig(self.kubeconfig_path, self.url)

    async def _start_https(self, pki: Pki) -> None:
        runner = web.AppRunner(
            self.server.application(),
            handle_signals=False,
            access_log=logging.getLogger("kyai_devcluster.access") if self._access_log else None,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await runner.setup()
        site = web.TCPSite(
            runner,
            self.host,
            self.https_port or 0,
            reuse_address=True,
            ssl_context=pki.server_context(),
            backlog=LISTEN_BACKLOG,
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise DevClusterError(
                f"Cannot listen on {self.host}:{self.https_port} (HTTPS): {exc}."
            ) from exc
        self._https_runner = runner
        self.https_port = int(runner.addresses[0][1])
        endpoint = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        self.https_url = f"https://{endpoint}:{self.https_port}"
        self.kubelet.service_endpoint = (endpoint, self.https_port)

    def _bootstrap(self) -> None:
        namespaces = self.store.type_for(*NAMESPACES)
        for name in INITIAL_NAMESPACES:
            self.store.create(namespaces, None, {"metadata": {"name": name}})
        if self.kueue:
            install_crds(self.store)
        if self.lws:
            install_lws_crds(self.store)
        nodes = self.store.type_for("", "nodes")
        node = self.store.create(
            nodes,
            None,
            {
                "metadata": {
                    "name": NODE_NAME,
                    "labels": {
                        "kubernetes.io/hostname": NODE_NAME,
                        "kubernetes.io/os": "linux",
                        "node-role.kubernetes.io/control-plane": "",
                    },
                }
            },
        ).obj
        now = now_rfc3339()
        self.store.write_status(
            nodes,
            node,
            {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status (simulated)",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": NODE_NAME},
                ],
                "nodeInfo": {
                    "kubeletVersion": KUBERNETES_VERSION["gitVersion"],
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "containerRuntimeVersion": f"{self.runtime_name}://1",
                },
            },
        )

    async def stop(self) -> None:
        """Close watches, kill pod processes, stop the controllers and the server."""
        self.server.stop_streams()
        if self._kubelet is not None:
            await self._kubelet.close()
        if self._proxy is not None:
            await self._proxy.close()
        for controller in self._controllers:
            await controller.stop()
        self._controllers = []
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._https_runner is not None:
            await self._https_runner.cleanup()
            self._https_runner = None
        if self._own_workdir and self.workdir != Path():
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def __aenter__(self) -> DevCluster:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class DevClusterThread:
    """A :class:`DevCluster` on its own event loop in a background thread.

    For synchronous code and subprocess-driven tests::

        with DevClusterThread(workdir=tmp_path) as cluster:
            subprocess.run(["kubectl", "--kubeconfig", cluster.kubeconfig_path, ...])

    The keyword arguments are those of :class:`DevCluster`.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.cluster = DevCluster(**kwargs)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return self.cluster.url

    @property
    def kubeconfig_path(self) -> Path:
        """The kubeconfig that points at the server."""
        return self.cluster.kubeconfig_path

    @property
    def workdir(self) -> Path:
        """The working directory (volumes, logs)."""
        return self.cluster.workdir

    @property
    def hosts_path(self) -> Path:
        """The hosts file with Service names."""
        return self.cluster.hosts_path

    def network_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """See :meth:`DevCluster.network_env`."""
        return self.cluster.network_env(base)

    def start(self, *, timeout: float = 30.0) -> None:
        """Start the thread and wait until the server listens."""
        if self._thread is not None:
            raise DevClusterError("The devcluster thread is already started.")
        self._thread = threading.Thread(target=self._main, name="kyai-devcluster", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise DevClusterError(f"The devcluster did not start within {timeout} seconds.")
        if self._error is not None:
            raise DevClusterError(f"The devcluster failed to start: {self._error}") from self._error

    def stop(self, *, timeout: float = 30.0) -> None:
        """Stop the server and join the thread."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise DevClusterError(f"The devcluster did not stop within {timeout} seconds.")
        self._thread = None

    def call(self, function: Any, *args: Any, timeout: float = 30.0) -> Any:
        """Run ``function(*args)`` on the cluster's loop (e.g. to inspect the store)."""
        if self._loop is None:
            raise DevClusterError("The devcluster thread is not running.")

        async def invoke() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout)

    def _main(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.cluster.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.cluster.stop()

        asyncio.run(serve())

    def __enter__(self) -> DevClusterThread:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
