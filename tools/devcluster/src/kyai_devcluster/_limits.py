"""The size and name limits of a real API server, with its own messages.

* A request body over 3 MiB is refused before decoding: ``413 RequestEntityTooLarge``
  ("Request entity too large: limit is 3145728", k8s.io/apiserver ``MaxRequestBodyBytes``).
* An object whose stored form is over etcd's default ``--max-request-bytes`` (1.5 MiB) is
  refused by etcd; the API server passes the error on as a ``500`` without a reason:
  "etcdserver: request is too large" (kubernetes/kubernetes#112152). The devcluster measures
  the object's compact JSON (what etcd holds for custom resources; built-ins are stored as
  protobuf there, a little smaller).
* ConfigMap ``data`` + ``binaryData`` and Secret ``data`` (decoded bytes) may total 1 MiB,
  annotations (keys and values) 256 KiB: ``422`` with ``Too long: may not be more than N
  bytes`` on ``[]`` (ConfigMap; an empty field path prints so), ``data`` and
  ``metadata.annotations``.
* Names: DNS-1123 subdomain (253) for most kinds, DNS-1123 label (63) for Namespaces,
  DNS-1035 label for Services, path segments for RBAC objects; label values 63 characters,
  label and annotation keys as qualified names. A Job over 63 characters fails on its pod
  template's ``job-name`` label, as in Kubernetes (``spec.template.labels``). Messages are
  those of Kubernetes 1.32 (``must be no more than 63 characters``).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from kyai._json import dumps_body
from kyai_devcluster._errors import FieldError, StatusError

Obj = dict[str, Any]

#: k8s.io/apiserver's limit on a write request's body (before decoding).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
#: etcd's default ``--max-request-bytes``.
ETCD_MAX_REQUEST_BYTES = 1536 * 1024
#: ``core.MaxSecretSize``: ConfigMap and Secret data.
MAX_DATA_BYTES = 1024 * 1024
#: ``TotalAnnotationSizeLimitB``.
MAX_ANNOTATION_BYTES = 256 * 1024
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
QUALIFIED_NAME_MAX = 63

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = f"{_DNS1123_LABEL_FMT}(\\.{_DNS1123_LABEL_FMT})*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL_VALUE_FMT = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

_DNS1123_LABEL_RE = re.compile(f"^{_DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1035_LABEL_RE = re.compile(f"^{_DNS1035_LABEL_FMT}$")
_LABEL_VALUE_RE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_QUALIFIED_NAME_RE = re.compile(f"^{_QUALIFIED_NAME_FMT}$")

#: Kinds whose names are DNS-1123 labels / DNS-1035 labels / path segments.
DNS1123_LABEL_KINDS = frozenset({"Namespace"})
DNS1035_LABEL_KINDS = frozenset({"Service"})
PATH_SEGMENT_KINDS = frozenset({"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"})


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``, character for character."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    """``validation.MaxLenError`` (Kubernetes 1.32 wording)."""
    return f"must be no more than {length} characters"


def dns1123_label(value: str) -> list[str]:
    """``IsDNS1123Label``."""
    errors = [max_len_error(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1123_LABEL_RE.match(value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                "or '-', and must start and end with an alphanumeric character",
                _DNS1123_LABEL_FMT,
                "my-name",
                "123-abc",
            )
        )
    return errors


def dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``."""
    errors = [max_len_error(DNS1123_SUBDOMAIN_MAX)] if len(value) > DNS1123_SUBDOMAIN_MAX else []
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errors.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errors


def dns1035_label(value: str) -> list[str]:
    """``IsDNS1035Label``."""
    errors = [max_len_error(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1035_LABEL_RE.match(value):
        errors.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character",
                _DNS1035_LABEL_FMT,
                "my-name",
                "abc-123",
            )
        )
    return errors


def path_segment(value: str) -> list[str]:
    """``path.IsValidPathSegmentName``."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in value]


def label_value(value: str) -> list[str]:
    """``IsValidLabelValue``."""
    errors = [max_len_error(LABEL_VALUE_MAX)] if len(value) > LABEL_VALUE_MAX else []
    if value and not _LABEL_VALUE_RE.match(value):
        errors.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errors


def qualified_name(value: str) -> list[str]:
    """``IsQualifiedName`` (label and annotation keys)."""
    prefix, slash, name = value.rpartition("/")
    errors: list[str] = []
    if slash and not prefix:
        errors.append("prefix part must be non-empty")
    elif slash:
        errors.extend(f"prefix part {message}" for message in dns1123_subdomain(prefix))
    if not name:
        errors.append("name part must be non-empty")
        return errors
    if len(name) > QUALIFIED_NAME_MAX:
        errors.append("name part " + max_len_error(QUALIFIED_NAME_MAX))
    if not _QUALIFIED_NAME_RE.match(name):
        errors.append(
            "name part "
            + _regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character",
                _QUALIFIED_NAME_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
        )
    return errors


def validate_name(kind: str, name: str) -> list[FieldError]:
    """``metadata.name`` of a new object, as the kind's ``ValidateObjectMeta`` checks it."""
    if kind in DNS1123_LABEL_KINDS:
        messages = dns1123_label(name)
    elif kind in DNS1035_LABEL_KINDS:
        messages = dns1035_label(name)
    elif kind in PATH_SEGMENT_KINDS:
        messages = path_segment(name)
    else:
        messages = dns1123_subdomain(name)
    return [FieldError.invalid("metadata.name", name, message) for message in messages]


def validate_labels(labels: Obj, path: str) -> list[FieldError]:
    """``ValidateLabels``: qualified-name keys, label values."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors.extend(FieldError.invalid(path, key, message) for message in qualified_name(key))
        if not isinstance(value, str):
            errors.append(FieldError.invalid(path, value, "must be a string"))
            continue
        errors.extend(FieldError.invalid(path, value, message) for message in label_value(value))
    return errors


def validate_annotations(annotations: Obj, path: str = "metadata.annotations") -> list[FieldError]:
    """``ValidateAnnotations``: qualified-name keys, 256 KiB in total."""
    errors: list[FieldError] = []
    total = 0
    for key, value in annotations.items():
        for message in qualified_name(key.lower()):
            errors.append(FieldError.invalid(path, key, message))
        total += len(key.encode()) + len(str(value).encode())
    if total > MAX_ANNOTATION_BYTES:
        errors.append(FieldError.too_long(path, MAX_ANNOTATION_BYTES))
    return errors


def _decoded_length(value: Any) -> int:
    try:
        return len(base64.b64decode(str(value), validate=True))
    except (binascii.Error, ValueError):
        return len(str(value))


def validate_sizes(kind: str, obj: Obj) -> list[FieldError]:
    """ConfigMap and Secret data (1 MiB each), and a Job's pod-template labels."""
    if kind == "ConfigMap":
        total = sum(len(str(value).encode()) for value in (obj.get("data") or {}).values())
        total += sum(_decoded_length(value) for value in (obj.get("binaryData") or {}).values())
        if total > MAX_DATA_BYTES:
            return [FieldError.too_long("[]", MAX_DATA_BYTES)]
    elif kind == "Secret":
        total = sum(_decoded_length(value) for value in (obj.get("data") or {}).values())
        if total > MAX_DATA_BYTES:
            return [FieldError.too_long("data", MAX_DATA_BYTES)]
    elif kind == "Job":
        template = (obj.get("spec") or {}).get("template") or {}
        labels = (
            (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else {}
        )
        if isinstance(labels, dict):
            errors = validate_labels(labels, "spec.template.labels")
            return _unique(errors)
    return []


def _unique(errors: list[FieldError]) -> list[FieldError]:
    """Drop repeated errors, as ``ErrorList.ToAggregate`` does."""
    seen: set[str] = set()
    kept: list[FieldError] = []
    for error in errors:
        if error.render() not in seen:
            seen.add(error.render())
            kept.append(error)
    return kept


def request_too_large() -> StatusError:
    """The 413 for a body over :data:`MAX_REQUEST_BODY_BYTES`."""
    return StatusError(
        413,
        "RequestEntityTooLarge",
        f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}",
    )


def check_request_size(content_length: int | None) -> None:
    """Refuse a declared body over the API server's limit before reading it."""
    if content_length is not None and content_length > MAX_REQUEST_BODY_BYTES:
        raise request_too_large()


def stored_size(obj: Obj) -> int:
    """The bytes an object takes in storage (compact JSON in UTF-8, as the API server's)."""
    return len(dumps_body(obj))


def check_stored_size(obj: Obj) -> None:
    """Refuse an object etcd would refuse, with the error the API server passes on."""
    if stored_size(obj) > ETCD_MAX_REQUEST_BYTES:
        raise StatusError(500, "", "etcdserver: request is too large")
