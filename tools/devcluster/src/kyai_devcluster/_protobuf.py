"""Decoding the few Kubernetes protobuf bodies that typed clients insist on sending.

client-go's typed clients (helm's release storage, ``kubectl create secret|configmap|namespace|
serviceaccount``) send
``application/vnd.kubernetes.protobuf``. The devcluster speaks JSON; this module turns the
protobuf of Secrets, ConfigMaps, Namespaces, ServiceAccounts and DeleteOptions into their
JSON form, field numbers as in
``k8s.io/api/core/v1/generated.proto`` and ``k8s.io/apimachinery/.../meta/v1/generated.proto``.
Other kinds stay a 415 that says so.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Value = bytes | int

MAGIC = b"k8s\x00"


def _varint(data: bytes, index: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if index >= len(data):
            raise ValueError("truncated varint")
        byte = data[index]
        index += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, index


def fields(data: bytes) -> list[tuple[int, Value]]:
    """The ``(field number, value)`` pairs of one protobuf message (no schema needed)."""
    found: list[tuple[int, Value]] = []
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        value: Value
        if wire == 0:
            value, index = _varint(data, index)
        elif wire == 2:
            length, index = _varint(data, index)
            if index + length > len(data):
                raise ValueError("truncated field")
            value = data[index : index + length]
            index += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value = data[index : index + size]
            index += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        found.append((number, value))
    return found


def _text(value: Value) -> str:
    if not isinstance(value, bytes):
        raise ValueError("expected a length-delimited string")
    return value.decode()


def _map(entries: list[Value], convert: Callable[[bytes], Any]) -> Obj:
    result: Obj = {}
    for entry in entries:
        if not isinstance(entry, bytes):
            continue
        key, value = "", b""
        for number, item in fields(entry):
            if number == 1:
                key = _text(item)
            elif number == 2 and isinstance(item, bytes):
                value = item
        result[key] = convert(value)
    return result


def _time(value: Value) -> str:
    seconds = 0
    if isinstance(value, bytes):
        for number, item in fields(value):
            if number == 1 and isinstance(item, int):
                seconds = item
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_reference(value: Value) -> Obj:
    names = {1: "kind", 3: "name", 4: "uid", 5: "apiVersion"}
    flags = {6: "controller", 7: "blockOwnerDeletion"}
    ref: Obj = {}
    if isinstance(value, bytes):
        for number, item in fields(value):
            if number in names:
                ref[names[number]] = _text(item)
            elif number in flags and isinstance(item, int):
                ref[flags[number]] = bool(item)
    return ref


def object_meta(data: bytes) -> Obj:
    """``ObjectMeta`` (managed fields are dropped, as the devcluster does not keep them)."""
    strings = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    meta: Obj = {}
    labels: list[Value] = []
    annotations: list[Value] = []
    for number, value in fields(data):
        if number in strings:
            meta[strings[number]] = _text(value)
        elif number == 7 and isinstance(value, int):
            meta["generation"] = value
        elif number == 8:
            meta["creationTimestamp"] = _time(value)
        elif number == 11:
            labels.append(value)
        elif number == 12:
            annotations.append(value)
        elif number == 13:
            meta.setdefault("ownerReferences", []).append(_owner_reference(value))
        elif number == 14:
            meta.setdefault("finalizers", []).append(_text(value))
    if labels:
        meta["labels"] = _map(labels, bytes.decode)
    if annotations:
        meta["annotations"] = _map(annotations, bytes.decode)
    return meta


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _secret(data: bytes) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "Secret"}
    data_entries: list[Value] = []
    string_entries: list[Value] = []
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = object_meta(value)
        elif number == 2:
            data_entries.append(value)
        elif number == 3:
            obj["type"] = _text(value)
        elif number == 4:
            string_entries.append(value)
        elif number == 5 and isinstance(value, int):
            obj["immutable"] = bool(value)
    if data_entries:
        obj["data"] = _map(data_entries, _b64)
    if string_entries:
        obj["stringData"] = _map(string_entries, bytes.decode)
    return obj


def _configmap(data: bytes) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "ConfigMap"}
    data_entries: list[Value] = []
    binary_entries: list[Value] = []
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = object_meta(value)
        elif number == 2:
            data_entries.append(value)
        elif number == 3:
            binary_entries.append(value)
        elif number == 4 and isinstance(value, int):
            obj["immutable"] = bool(value)
    if data_entries:
        obj["data"] = _map(data_entries, bytes.decode)
    if binary_entries:
        obj["binaryData"] = _map(binary_entries, _b64)
    return obj


def _namespace(data: bytes) -> Obj:
    """``kubectl create namespace``: metadata (1) and ``spec.finalizers`` (2 → 1)."""
    obj: Obj = {"apiVersion": "v1", "kind": "Namespace"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = object_meta(value)
        elif number == 2 and isinstance(value, bytes):
            finalizers = [_text(item) for key, item in fields(value) if key == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
    return obj


def _object_reference(value: Value) -> Obj:
    names = {1: "kind", 2: "namespace", 3: "name", 4: "uid", 5: "apiVersion"}
    ref: Obj = {}
    if isinstance(value, bytes):
        ref = {names[key]: _text(item) for key, item in fields(value) if key in names}
    return ref


def _service_account(data: bytes) -> Obj:
    """``kubectl create serviceaccount``: metadata, secrets, imagePullSecrets, automount."""
    obj: Obj = {"apiVersion": "v1", "kind": "ServiceAccount"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = object_meta(value)
        elif number == 2:
            obj.setdefault("secrets", []).append(_object_reference(value))
        elif number == 3 and isinstance(value, bytes):
            names = [_text(item) for key, item in fields(value) if key == 1]
            obj.setdefault("imagePullSecrets", []).append({"name": names[0] if names else ""})
        elif number == 4 and isinstance(value, int):
            obj["automountServiceAccountToken"] = bool(value)
    return obj


def _delete_options(data: bytes) -> Obj:
    obj: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
    for number, value in fields(data):
        if number == 1 and isinstance(value, int):
            obj["gracePeriodSeconds"] = value
        elif number == 3 and isinstance(value, int):
            obj["orphanDependents"] = bool(value)
        elif number == 4:
            obj["propagationPolicy"] = _text(value)
        elif number == 5:
            obj.setdefault("dryRun", []).append(_text(value))
    return obj


DECODERS: dict[str, Callable[[bytes], Obj]] = {
    "Secret": _secret,
    "ConfigMap": _configmap,
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
    "DeleteOptions": _delete_options,
}


def envelope(raw: bytes) -> tuple[str, str, bytes]:
    """``(apiVersion, kind, payload)`` of a ``runtime.Unknown`` envelope."""
    if not raw.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf message (no k8s\\0 prefix)")
    api_version = kind = ""
    payload = b""
    for number, value in fields(raw[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for type_number, item in fields(value):
                if type_number == 1:
                    api_version = _text(item)
                elif type_number == 2:
                    kind = _text(item)
        elif number == 2 and isinstance(value, bytes):
            payload = value
    return api_version, kind, payload


def decode(raw: bytes) -> Obj | None:
    """The JSON form of a supported protobuf body, or None for a kind not decoded here."""
    _, kind, payload = envelope(raw)
    decoder = DECODERS.get(kind)
    return decoder(payload) if decoder is not None else None
