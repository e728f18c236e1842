"""Snapshot: resolve the rows once into a ConfigMap, pin their sha256, never change again.

Built-ins download from HuggingFace (or read their native file from a ConfigMap or URL in
air-gapped clusters); custom rows come from a ConfigMap key, a URL pinned by sha256, or the
spec itself. The rows and the manifest go into ``<snapshot>-rows`` (gzip-compressed when
large), which the evaluation Jobs mount.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import re
import socket
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from kyai.api import SnapshotSpec, SnapshotStatus
from kyai.api.snapshot import SnapshotPhase
from kyai.builders import label_value, spec_hash
from kyai.builders.queue import queue_label_problem, queue_labels, queue_name
from kyai.builders.snapshot import (
    config_map_name,
    load_job_name,
    snapshot_claim,
    snapshot_config_map,
    snapshot_load_job,
)
from kyai.constants import LABEL_SNAPSHOT
from kyai.controllers import _conditions as c
from kyai.controllers import _kueue as kueue
from kyai.controllers._conditions import Change
from kyai.controllers._pods import failure_message, job_state, job_suspended
from kyai.controllers._services import Services
from kyai.controllers._status import StatusWriter, spec_changed
from kyai.datasets import (
    Dataset,
    DatasetError,
    DatasetUnavailableError,
    SourceFailure,
    failure_of,
    failure_of_status,
    hf_cached,
    hub_host,
    load_dataset,
    one_line,
    snapshot_files,
)

#: Largest file a URL source may be.
MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024

#: The Snapshot's reason for each kind of source failure (:mod:`kyai.datasets._failures`):
#: not found and forbidden are Stalled at once and looked at again every
#: ``snapshot_retry_max_seconds`` (someone must act: put the file there, give access); an
#: unknown host is said at once and tried again on the usual schedule (DNS can come back);
#: anything else (5xx, time-outs, resets) is tried again on that schedule.
FAILURE_REASONS = {
    "not-found": c.SOURCE_NOT_FOUND,
    "forbidden": c.SOURCE_FORBIDDEN,
    "unreachable": c.SOURCE_UNREACHABLE,
    "unavailable": c.SOURCE_UNAVAILABLE,
}
#: Reasons of a Pending Snapshot whose source is tried again (without going back to Resolving).
RETRIED_REASONS = frozenset(FAILURE_REASONS.values())
#: Seconds the name of the HuggingFace Hub's host may take to resolve before a built-in's
#: Snapshot says it cannot (SourceUnreachable): the Hub client itself retries a failed
#: look-up for about 25 s (five retries, 1 s doubling to 8 s) before it gives up.
RESOLVE_SECONDS = 10.0


class SourceUnavailable(Exception):
    """The rows could not be fetched (yet): ``reason`` says why; retried later."""

    def __init__(self, message: str, reason: str = c.SOURCE_UNAVAILABLE) -> None:
        super().__init__(message)
        self.reason = reason


def _answered(response: httpx.Response) -> str:
    """A server's own words: its status line, and its text when it is plain text or JSON."""
    words = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/plain") or "json" in kind:
        body = one_line(response.text[:4000])
        if body:
            words = f"{words}: {body}"
    return words


def url_failure(url: str, failure: SourceFailure) -> SourceUnavailable:
    """A URL source that did not answer with the file, told with the server's own words."""
    where = f"{one_line(url)} (spec.source.url)"  # without a user:password@
    if failure.kind == "not-found":
        said = (
            f"{where} answered {failure.said}: the file is not there; correct the URL or put "
            "the file there"
        )
    elif failure.kind == "forbidden":
        said = (
            f"{where} answered {failure.said}: the server refuses the operator; serve the file "
            "at a URL the operator may read"
        )
    elif failure.kind == "unreachable":
        host = failure.host or urlsplit(url).hostname or url
        said = (
            f"the host {host} of {where} cannot be resolved ({failure.said}): check the name "
            "and the cluster's name servers; it is tried again on a schedule (30 s, doubling up "
            "to every 5 min)"
        )
    elif failure.status is not None:
        said = f"{where} answered {failure.said}"
    else:
        said = f"cannot download {where}: {failure.said}"
    return SourceUnavailable(said, FAILURE_REASONS[failure.kind])


def _suffix(spec: SnapshotSpec, hint: str) -> str:
    source = spec.source
    if source is not None and source.format:
        return "." + source.format
    for ending in (".jsonl.gz", ".jsonl", ".json", ".csv.gz", ".csv", ".parquet"):
        if hint.lower().endswith(ending):
            return ending
    return ".jsonl"


async def _fetch_source(svc: Services, namespace: str, spec: SnapshotSpec) -> tuple[bytes, str]:
    """The source file's bytes and its name (for the format)."""
    source = spec.source
    assert source is not None
    if source.rows is not None:
        import json

        lines = [
            json.dumps(
                {
                    "instruction": row.instruction,
                    "ground_truth_response": row.ground_truth_response,
                    **({"external_row_id": row.external_row_id} if row.external_row_id else {}),
                },
                ensure_ascii=False,
            )
            for row in source.rows
        ]
        return ("\n".join(lines) + "\n").encode("utf-8"), "rows.jsonl"
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        config_map = await svc.kube.get("ConfigMap", namespace, ref.name)
        if config_map is None:
            raise SourceUnavailable(f"the ConfigMap {ref.name} does not exist")
        if ref.key in (config_map.get("data") or {}):
            return config_map["data"][ref.key].encode("utf-8"), ref.key
        if ref.key in (config_map.get("binaryData") or {}):
            return base64.b64decode(config_map["binaryData"][ref.key]), ref.key
        raise SourceUnavailable(f"the ConfigMap {ref.name} has no key {ref.key}")
    assert source.url is not None
    try:
        async with httpx.AsyncClient(timeout=120.0, follow_redirects=True) as client:
            response = await client.get(source.url.url)
    except httpx.HTTPError as exc:
        raise url_failure(source.url.url, failure_of(exc)) from exc
    if response.status_code != 200:
        failure = failure_of_status(response.status_code, _answered(response))
        raise url_failure(source.url.url, failure)
    data = response.content
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise DatasetError(f"{source.url.url} is larger than {MAX_DOWNLOAD_BYTES} bytes.")
    digest = hashlib.sha256(data).hexdigest()
    if digest != source.url.sha256:
        raise DatasetError(
            f"{source.url.url} has sha256 {digest}, not the {source.url.sha256} the Snapshot "
            "pins: the file changed, or spec.source.url.sha256 is wrong."
        )
    return data, source.url.url.rsplit("/", 1)[-1].split("?", 1)[0]


#: What to do when HuggingFace cannot be reached (the CLI's equivalent is --dataset-file).
_OFFLINE_ADVICE = (
    "it is tried again on a schedule (30 s, doubling up to every 5 min); without access to "
    "HuggingFace, put the dataset's native file in a ConfigMap or at a URL and set "
    "spec.source (as `kyai run --dataset-file` does locally), or point the operator at a "
    "HuggingFace mirror (HF_ENDPOINT in the chart's extraEnv)"
)


#: Seconds a built-in's download from HuggingFace may take before the Snapshot says why it is
#: not Ready (Pending, SourceUnavailable) and tries again later; a download still under way
#: goes on in its thread and fills the Hub cache the next try reads.
BUILTIN_DOWNLOAD_SECONDS = 120.0


def resolving_message(spec: SnapshotSpec) -> str:
    """What a Snapshot in ``Resolving`` does, and how long before it says why it waits."""
    if spec.source is None and spec.builtin is not None:
        return (
            f"downloading the built-in {spec.builtin} from HuggingFace (at most "
            f"{BUILTIN_DOWNLOAD_SECONDS:.0f} s; if it fails: Pending, saying why)"
        )
    return "resolving the rows"


async def hub_unreachable() -> SourceFailure | None:
    """Why the HuggingFace Hub's host cannot be looked up (DNS), at once; None: it can.

    The Hub client retries a failed look-up for about 25 s before it says anything; a host
    that does not resolve is said here within :data:`RESOLVE_SECONDS`. Nothing is looked up
    offline or behind a proxy (:func:`kyai.datasets.hub_host`).
    """
    host = hub_host()
    if host is None:
        return None
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.getaddrinfo(host, None), timeout=RESOLVE_SECONDS)
    except socket.gaierror as exc:
        return SourceFailure("unreachable", one_line(str(exc)), host=host)
    except TimeoutError:
        said = f"no name server answered within {RESOLVE_SECONDS:.0f} s"
        return SourceFailure("unreachable", said, host=host)
    return None


def _hub_failure(builtin: str, error: DatasetError) -> SourceUnavailable:
    """A built-in the Hub did not give, with its words: the reason its failure's kind says."""
    failure = error.failure or SourceFailure("unavailable", error.detail)
    told = f"the built-in {builtin} could not be downloaded from HuggingFace: {error.detail}"
    if failure.permanent:
        return SourceUnavailable(
            f"{told}; or put the dataset's native file in a ConfigMap or at a URL and set "
            "spec.source",
            FAILURE_REASONS[failure.kind],
        )
    return SourceUnavailable(f"{told}; {_OFFLINE_ADVICE}", FAILURE_REASONS[failure.kind])


async def _resolve_builtin(spec: SnapshotSpec) -> Dataset:
    """A built-in from the Hub (from the Hub client's cache alone when its host has no address)."""
    assert spec.builtin is not None
    unreachable = await hub_unreachable()
    load = functools.partial(
        load_dataset, spec.builtin,
        generation_prompt=spec.prompts.generation, judge_prompt=spec.prompts.judge,
        hf_revision=spec.hf_revision, downloader=None if unreachable is None else hf_cached,
    )  # fmt: skip
    try:
        return await asyncio.wait_for(asyncio.to_thread(load), timeout=BUILTIN_DOWNLOAD_SECONDS)
    except TimeoutError as exc:
        raise SourceUnavailable(
            f"the built-in {spec.builtin} could not be downloaded from HuggingFace within "
            f"{BUILTIN_DOWNLOAD_SECONDS:.0f} s (no network, or a slow one); {_OFFLINE_ADVICE}"
        ) from exc
    except DatasetError as exc:
        if unreachable is not None and isinstance(exc, DatasetUnavailableError):
            hub = f"the HuggingFace Hub's host {unreachable.host} cannot be resolved"
            raise SourceUnavailable(
                f"the built-in {spec.builtin} could not be downloaded from HuggingFace: {hub} "
                f"({unreachable.said}) and it is not in the local cache; {_OFFLINE_ADVICE}",
                c.SOURCE_UNREACHABLE,
            ) from exc
        if exc.failure is None and not isinstance(exc, DatasetUnavailableError):
            raise  # the file is there but not what the built-in expects
        raise _hub_failure(spec.builtin, exc) from exc
    except Exception as exc:  # anything else from the hub client: retried later
        failure = failure_of(exc)
        raise SourceUnavailable(
            f"the built-in {spec.builtin} could not be downloaded from HuggingFace "
            f"({type(exc).__name__}: {failure.said}); {_OFFLINE_ADVICE}",
            FAILURE_REASONS[failure.kind],
        ) from exc


async def resolve(svc: Services, namespace: str, name: str, spec: SnapshotSpec) -> Dataset:
    """Load the Snapshot's rows (blocking work off the event loop)."""
    prompts = spec.prompts
    if spec.source is None:
        return await _resolve_builtin(spec)
    data, hint = await _fetch_source(svc, namespace, spec)
    with tempfile.TemporaryDirectory(prefix="kyai-snapshot-") as scratch:
        path = Path(scratch) / f"{name}{_suffix(spec, hint)}"
        path.write_bytes(data)
        try:
            if spec.builtin is not None:
                return await asyncio.to_thread(
                    load_dataset,
                    spec.builtin,
                    dataset_file=path,
                    generation_prompt=prompts.generation,
                    judge_prompt=prompts.judge,
                )
            return await asyncio.to_thread(
                load_dataset,
                str(path),
                generation_prompt=prompts.generation,
                judge_prompt=prompts.judge,
            )
        except DatasetError as exc:
            raise DatasetError(source_message(str(exc), str(path), spec)) from exc


_LINE = re.compile(r"^(?P<path>.+?), line (?P<line>\d+)(?P<rest>.*)$", re.DOTALL)
_FIELD = re.compile(r"'([a-z]+(?:_[a-z]+)+)'")


def _camel(match: re.Match[str]) -> str:
    head, *tail = match.group(1).split("_")
    return "'" + head + "".join(part.title() for part in tail) + "'"


def source_message(message: str, path: str, spec: SnapshotSpec) -> str:
    """A loader's message about the scratch file, told in terms of the Snapshot's source.

    The rows were written to a temporary file to be parsed: the user knows the field
    (``spec.source.rows[3]``), the ConfigMap key or the URL, not ``/tmp/kyai-snapshot-…``.
    """
    source = spec.source
    if source is None:
        return message.replace(path, "the built-in's file")
    if source.rows is not None:
        found = _LINE.match(message)
        if found is not None and found.group("path") == path:
            index = int(found.group("line")) - 1
            rest = _FIELD.sub(_camel, found.group("rest"))
            return f"spec.source.rows[{index}]{rest}"
        return _FIELD.sub(_camel, message.replace(path, "spec.source.rows"))
    if source.config_map_ref is not None:
        ref = source.config_map_ref
        where = f"ConfigMap {ref.name} key {ref.key} (spec.source.configMapRef)"
    else:
        assert source.url is not None
        where = f"{source.url.url} (spec.source.url)"
    return message.replace(path, where)


SPEC_CHANGED = (
    "the spec changed after the rows were resolved; the change is ignored (a "
    "Snapshot is immutable): create a new Snapshot instead"
)


class SnapshotReconciler:
    """One reconcile of one Snapshot: resolve once, then only guard immutability."""

    def __init__(self, svc: Services, body: dict[str, Any]) -> None:
        self.svc = svc
        self.body = body
        self.writer = StatusWriter(svc, body)
        self.namespace, self.name = self.writer.namespace, self.writer.name
        #: Seconds before the Snapshot is looked at again (its load Job waits for Kueue).
        self.look_again: float | None = None

    async def not_ready(self, phase: SnapshotPhase, reason: str, message: str) -> None:
        """Pending or Failed, with a Warning event (once: a retry that fails alike is quiet)."""
        conditions = self.writer.conditions(Change(c.READY, False, reason, message))
        status = SnapshotStatus(phase=phase, message=message, conditions=conditions)
        if self.writer.unchanged(status):
            return
        await self.writer.patch(status)
        self.writer.event("Warning", reason, message)

    async def reconcile(self) -> float | None:
        """Resolve once; afterwards only guard immutability. Returns a retry delay, if any."""
        spec_body = self.body.get("spec") or {}
        current = SnapshotStatus.model_validate(self.writer.status)
        if current.phase == "Ready":
            if spec_changed(spec_body, current.spec_hash):
                await self.writer.note_spec_change(SPEC_CHANGED)
            return None
        try:
            spec = SnapshotSpec.model_validate(spec_body)
        except ValidationError as exc:
            await self.not_ready("Failed", c.INVALID_SPEC, c.validation_message(exc))
            return None
        if current.phase == "Resolving" and current.claim and await self.watch_load(current):
            return self.look_again
        if current.phase == "Failed" and current.claim:
            return None  # the load Job failed: a new Snapshot is needed
        problem = queue_label_problem(self.body)
        if problem is not None:  # its load Job would wait forever: Stalled until relabelled
            await self.not_ready("Pending", c.INVALID_QUEUE_NAME, problem)
            return None
        retrying = current.phase == "Pending" and _ready_reason(current) in RETRIED_REASONS
        if current.phase != "Resolving" and not retrying:
            text = resolving_message(spec)
            conditions = self.writer.conditions(Change(c.READY, None, c.RESOLVING, text))
            await self.writer.patch(
                SnapshotStatus(phase="Resolving", message=text, conditions=conditions)
            )
        try:
            dataset = await resolve(self.svc, self.namespace, self.name, spec)
        except SourceUnavailable as exc:
            return await self.unavailable(exc)
        except DatasetError as exc:
            await self.not_ready("Failed", c.INVALID_DATA, str(exc))
            return None
        await self._store(spec, dataset)
        return self.look_again

    async def unavailable(self, error: SourceUnavailable) -> float:
        """Pending, saying why the source gave nothing; the wait before the next try.

        A source that answered "not found" or "forbidden" (Stalled: someone must act) is
        looked at again every ``snapshot_retry_max_seconds``; any other on the doubling
        schedule from ``snapshot_retry_seconds``.
        """
        settings = self.svc.settings
        message = str(error)
        delay = settings.snapshot_retry_seconds
        if error.reason in c.STALLING:
            delay = settings.snapshot_retry_max_seconds
            message = f"{message} (looked at again every {delay:g} s)"
        await self.not_ready("Pending", error.reason, message)
        return delay

    async def _store(self, spec: SnapshotSpec, dataset: Dataset) -> None:
        """Write the rows' ConfigMap (replacing a stale one) and mark the Snapshot Ready."""
        files = snapshot_files(dataset)
        limit = self.svc.settings.snapshot_configmap_limit_bytes
        if files.size > limit:
            source = spec.source
            if source is not None and source.url is not None:
                await self._load_into_claim(spec, dataset, files.size)
                return
            message = (
                f"the {len(dataset.rows)} rows take {files.size} bytes even compressed, more "
                f"than a ConfigMap holds ({limit} bytes): serve the file at a URL pinned by its "
                "sha256 (spec.source.url; it is then written to a volume), or split the dataset "
                "into several Snapshots"
            )
            await self.not_ready("Failed", c.TOO_LARGE, message)
            return
        config_map = snapshot_config_map(self.body, files.text, files.binary)
        existing, created = await self.svc.kube.create(config_map)
        manifest = files.text.get("snapshot.json")
        if not created and (existing.get("data") or {}).get("snapshot.json") != manifest:
            await self.svc.kube.delete("ConfigMap", self.namespace, config_map_name(self.name))
            await self.svc.kube.create(config_map)
        message = f"{len(dataset.rows)} rows, sha256 {dataset.sha256[:12]}…"
        await self.writer.patch(
            SnapshotStatus(
                phase="Ready",
                message=message,
                rows=len(dataset.rows),
                sha256=dataset.sha256,
                dataset=dataset.name if spec.builtin is None else spec.builtin,
                version=dataset.version,
                config_map=config_map_name(self.name),
                compressed=bool(files.binary),
                spec_hash=spec_hash(self.body.get("spec") or {}),
                resolved_at=c.now(),
                conditions=self.writer.conditions(Change(c.READY, True, c.RESOLVED, message)),
            )
        )
        self.writer.event("Normal", c.RESOLVED, message)

    def _facts(self, spec: SnapshotSpec, dataset: Dataset) -> dict[str, Any]:
        return {
            "rows": len(dataset.rows),
            "sha256": dataset.sha256,
            "dataset": dataset.name if spec.builtin is None else spec.builtin,
            "version": dataset.version,
            "spec_hash": spec_hash(self.body.get("spec") or {}),
        }

    async def _load_into_claim(self, spec: SnapshotSpec, dataset: Dataset, size: int) -> None:
        """A dataset too large for a ConfigMap: a PVC and a Job writing the rows into it.

        Only metadata stays in the API server (rows count, sha256, the claim's name). The Job
        resolves the same URL again and refuses rows whose sha256 differs.
        """
        settings = self.svc.settings
        claim = snapshot_claim(self.body, size_bytes=size)
        await self.svc.kube.ensure(claim)
        queue = queue_labels(self.body, settings.default_queue_name)
        suspend = bool(queue) and await kueue.installed(self.svc)
        await self.svc.kube.ensure(
            snapshot_load_job(
                self.body,
                image=settings.worker_image,
                image_pull_policy=settings.worker_image_pull_policy,
                expect_sha256=dataset.sha256,
                queue=queue,
                suspend=suspend,
            )
        )
        if suspend:  # Kueue's verdict is read a moment later
            self.look_again = QUEUE_LOOK_SECONDS
        name = claim["metadata"]["name"]
        message = (
            f"writing {len(dataset.rows)} rows ({size} bytes compressed, more than a ConfigMap "
            f"holds) to the PersistentVolumeClaim {name}"
        )
        await self.writer.patch(
            SnapshotStatus(
                phase="Resolving",
                message=message,
                claim=name,
                config_map=None,
                compressed=True,
                conditions=self.writer.conditions(Change(c.READY, None, c.RESOLVING, message)),
                **self._facts(spec, dataset),
            )
        )
        self.writer.event("Normal", c.RESOLVING, message)

    async def watch_load(self, current: SnapshotStatus) -> bool:
        """A Snapshot whose rows a load Job writes: Ready when it succeeded, Failed if it failed.

        False when the Job is gone (deleted under us): the rows are resolved again.
        """
        job_name = load_job_name(self.name)
        job = await self.svc.kube.get("Job", self.namespace, job_name)
        state, detail = job_state(job)
        if state == "running":
            await self._queued_load(current, job)
            return True
        if state == "missing":
            return False
        if state == "failed":
            pods = await self.svc.kube.list(
                "Pod", self.namespace, label_selector=f"{LABEL_SNAPSHOT}={label_value(self.name)}"
            )
            said = failure_message(pods) or detail
            await self.not_ready(
                "Failed", c.INVALID_DATA, f"the load Job {job_name} failed: {said}"
            )
            return True
        message = f"{current.rows} rows on the PersistentVolumeClaim {current.claim}, sha256 " + (
            f"{(current.sha256 or '')[:12]}…"
        )
        await self.writer.patch(
            SnapshotStatus(
                phase="Ready",
                message=message,
                resolved_at=c.now(),
                conditions=self.writer.conditions(Change(c.READY, True, c.RESOLVED, message)),
            )
        )
        self.writer.event("Normal", c.RESOLVED, message)
        return True

    async def _queued_load(self, current: SnapshotStatus, job: Any) -> None:
        """The load Job waits for Kueue (suspended): the Snapshot says so, with Kueue's words.

        ``WaitingForQuota`` (or ``Preempted``) on Ready, the phase staying ``Resolving``;
        looked at again a moment later (Kueue makes its Workload after the Job, and admits
        it when quota frees up). Once the Job runs, the Snapshot says ``Resolving`` again.
        """
        meta = job.get("metadata") or {}
        queue = queue_name(meta.get("labels") or {})
        said = _ready_reason(current)
        if not job_suspended(job):
            if said in c.QUEUED:
                message = (
                    f"writing {current.rows} rows to the PersistentVolumeClaim {current.claim}"
                )
                await self.writer.patch(
                    SnapshotStatus(
                        phase="Resolving",
                        message=message,
                        conditions=self.writer.conditions(
                            Change(c.READY, None, c.RESOLVING, message)
                        ),
                    )
                )
            return
        self.look_again = QUEUE_LOOK_SECONDS
        what = f"the load Job {meta.get('name')}"
        if queue is None or not await kueue.installed(self.svc):
            return  # suspended by someone else: its resume (a Job event) moves it on
        held = kueue.queue_wait(
            await kueue.workload_for(self.svc, self.namespace, str(meta.get("uid")))
        )
        if held is None:  # admitted: Kueue unsuspends the Job in a moment
            return
        message = kueue.describe(held, what, queue)
        if current.message == message:
            return
        await self.writer.patch(
            SnapshotStatus(
                phase="Resolving",
                message=message,
                conditions=self.writer.conditions(Change(c.READY, False, held.reason, message)),
            )
        )
        self.writer.event("Normal", held.reason, message)


#: Seconds before a Snapshot whose load Job Kueue holds is looked at again (then doubling).
QUEUE_LOOK_SECONDS = 2.0


def _ready_reason(status: SnapshotStatus) -> str | None:
    for condition in status.conditions:
        if condition.type == c.READY:
            return condition.reason
    return None


#: The longest wait between two tries of a source that is not available (the default of the
#: ``snapshot_retry_max_seconds`` setting).
MAX_RETRY_SECONDS = 300.0


def retry_delay(first: float, retry: int, ceiling: float = MAX_RETRY_SECONDS) -> float:
    """The wait before try ``retry + 1`` of an unavailable source: doubling, at most ``ceiling``.

    With the default first wait (``snapshotRetrySeconds``, 30 s) and ceiling: 30, 60, 120,
    240, then every 300 s until the source answers or the Snapshot is deleted.
    """
    return float(min(first * 2.0 ** min(retry, 16), max(first, ceiling)))


async def reconcile_snapshot(svc: Services, body: dict[str, Any]) -> float | None:
    """Resolve once; afterwards only guard immutability. Returns a retry delay, if any."""
    return await SnapshotReconciler(svc, body).reconcile()
