"""Defaulting and validation of the built-in kinds, as their API server strategies do it.

Only the parts that clients notice are modelled: required fields, label-selector rules,
defaults that controllers and ``kubectl`` read, and the initial status of a new object.
"""

from __future__ import annotations

import base64
import binascii
import re
from itertools import pairwise
from typing import Any

from kyai_devcluster import _limits
from kyai_devcluster._errors import FieldError, go_repr
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._selectors import selector_from_object

Obj = dict[str, Any]

_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

#: The one node of the devcluster; every pod is scheduled onto it.
NODE_NAME = "devcluster"

_CONFIG_KEY_MESSAGE = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def validate_name(kind: str, name: str) -> list[FieldError]:
    """Validate ``metadata.name`` as the kind requires (see :mod:`._limits`)."""
    return _limits.validate_name(kind, name)


def validate_metadata(obj: Obj) -> list[FieldError]:
    """Validate labels and annotations keys and label values."""
    metadata = obj.get("metadata") or {}
    errors: list[FieldError] = []
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        return [FieldError.invalid("metadata.labels", labels, "must be a map of strings")]
    errors.extend(_limits.validate_labels(labels, "metadata.labels"))
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*errors, FieldError.invalid("metadata.annotations", annotations, "must be a map")]
    for key, value in annotations.items():
        if not isinstance(value, str):
            errors.append(
                FieldError.invalid(f"metadata.annotations[{key}]", value, "must be a string")
            )
    errors.extend(_limits.validate_annotations(annotations))
    for index, ref in enumerate(metadata.get("ownerReferences") or []):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(key):
                errors.append(FieldError.required(f"metadata.ownerReferences[{index}].{key}"))
    return errors


def _image_pull_policy(image: str) -> str:
    tag = image.rsplit("/", 1)[-1]
    if "@" in tag:
        return "IfNotPresent"
    if ":" not in tag or tag.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def default_pod_spec(spec: Obj) -> None:
    """Fill the pod spec defaults that ``kubectl describe`` and controllers read."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    if "serviceAccountName" not in spec:
        spec["serviceAccountName"] = spec.get("serviceAccount") or "default"
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.setdefault(
                    "imagePullPolicy", _image_pull_policy(str(container.get("image", "")))
                )
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")
                container.setdefault("resources", {})
                for port in container.get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")
    for volume in spec.get("volumes") or []:
        projected = volume.get("projected") if isinstance(volume, dict) else None
        if isinstance(projected, dict):
            projected.setdefault("defaultMode", 0o644)
            for source in projected.get("sources") or []:
                token = source.get("serviceAccountToken") if isinstance(source, dict) else None
                if isinstance(token, dict):
                    token.setdefault("expirationSeconds", 3600)


def _validate_projected(spec: Obj, path: str) -> list[FieldError]:
    """``validateProjectionSources`` for serviceAccountToken sources (the real messages)."""
    errors: list[FieldError] = []
    for index, volume in enumerate(spec.get("volumes") or []):
        projected = volume.get("projected") if isinstance(volume, dict) else None
        if not isinstance(projected, dict):
            continue
        where = f"{path}.volumes[{index}].projected"
        for source_index, source in enumerate(projected.get("sources") or []):
            token = source.get("serviceAccountToken") if isinstance(source, dict) else None
            if not isinstance(token, dict):
                continue
            token_path = f"{where}.sources[{source_index}].serviceAccountToken"
            seconds = token.get("expirationSeconds", 3600)
            if not isinstance(seconds, int) or isinstance(seconds, bool):
                errors.append(
                    FieldError.invalid(f"{token_path}.expirationSeconds", seconds, "must be int")
                )
            elif seconds < 600:
                errors.append(
                    FieldError.invalid(
                        f"{token_path}.expirationSeconds",
                        seconds,
                        "may not specify a duration less than 10 minutes",
                    )
                )
            elif seconds > 1 << 32:
                errors.append(
                    FieldError.invalid(
                        f"{token_path}.expirationSeconds",
                        seconds,
                        "may not specify a duration larger than 2^32 seconds",
                    )
                )
            if not token.get("path"):
                errors.append(FieldError.required(f"{where}.path"))
    return errors


def validate_pod_spec(
    spec: Any, path: str, *, restart_policies: tuple[str, ...] = ()
) -> list[FieldError]:
    """Validate containers (names, images, unique names) and the restart policy."""
    if not isinstance(spec, dict):
        return [FieldError.required(path)]
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not containers:
        errors.append(FieldError.required(f"{path}.containers"))
    names: set[str] = set()
    for key in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(key) or []):
            where = f"{path}.{key}[{index}]"
            if not isinstance(container, dict):
                errors.append(FieldError.invalid(where, container, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                errors.append(FieldError.required(f"{where}.name"))
            elif name in names:
                errors.append(FieldError.duplicate(f"{where}.name", name))
            else:
                names.add(str(name))
            if not container.get("image"):
                errors.append(FieldError.required(f"{where}.image"))
            for env_index, env in enumerate(container.get("env") or []):
                if not isinstance(env, dict) or not env.get("name"):
                    errors.append(FieldError.required(f"{where}.env[{env_index}].name"))
    volume_names = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for key in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(key) or []):
            if not isinstance(container, dict):
                continue
            for mount_index, mount in enumerate(container.get("volumeMounts") or []):
                where = f"{path}.{key}[{index}].volumeMounts[{mount_index}]"
                if not isinstance(mount, dict):
                    continue
                if mount.get("name") not in volume_names:
                    errors.append(
                        FieldError(
                            f"{where}.name",
                            "FieldValueNotFound",
                            f"Not found: {go_repr(mount.get('name'))}",
                        )
                    )
                if not mount.get("mountPath"):
                    errors.append(FieldError.required(f"{where}.mountPath"))
    errors.extend(_validate_projected(spec, path))
    policy = spec.get("restartPolicy")
    if restart_policies and policy not in restart_policies:
        if policy is None:
            errors.append(
                FieldError.required(
                    f"{path}.restartPolicy",
                    "valid values: " + ", ".join(go_repr(p) for p in restart_policies),
                )
            )
        else:
            errors.append(
                FieldError.not_supported(f"{path}.restartPolicy", policy, list(restart_policies))
            )
    return errors


def _validate_selector_matches(spec: Obj, path: str) -> list[FieldError]:
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    ):
        return [FieldError.required(f"{path}.selector")]
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selector_from_object(selector).matches(labels):
        return [
            FieldError.invalid(
                f"{path}.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        ]
    return []


def prepare_builtin(rt: ResourceType, obj: Obj, old: Obj | None) -> list[FieldError]:
    """Default and validate a built-in object before it is stored; return the errors."""
    errors = validate_metadata(obj)
    name = (obj.get("metadata") or {}).get("name", "")
    if old is None and rt.kind != "CustomResourceDefinition":
        errors.extend(validate_name(rt.kind, name))
    handler = _STRATEGIES.get(rt.kind)
    if handler is not None:
        errors.extend(handler(obj, old))
    return errors


def _namespace(obj: Obj, old: Obj | None) -> list[FieldError]:
    name = obj["metadata"]["name"]
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    if old is None:
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    return []


def _secret(obj: Obj, old: Obj | None) -> list[FieldError]:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    data = obj.setdefault("data", {}) if (string_data or "data" in obj) else None
    errors: list[FieldError] = []
    if data is not None:
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        for key, value in data.items():
            if not _CONFIG_KEY.match(key):
                errors.append(
                    FieldError.invalid(
                        f"data[{key}]",
                        key,
                        _CONFIG_KEY_MESSAGE,
                    )
                )
            try:
                base64.b64decode(str(value), validate=True)
            except (binascii.Error, ValueError):
                errors.append(
                    FieldError.invalid(
                        f"data[{key}]", "<secret contents redacted>", "illegal base64 data"
                    )
                )
    if old is not None and old.get("type") != obj.get("type"):
        errors.append(FieldError.invalid("type", obj.get("type"), "field is immutable"))
    return errors


def _configmap(obj: Obj, old: Obj | None) -> list[FieldError]:
    errors: list[FieldError] = []
    for section in ("data", "binaryData"):
        for key in obj.get(section) or {}:
            if not _CONFIG_KEY.match(key):
                errors.append(
                    FieldError.invalid(
                        f"{section}[{key}]",
                        key,
                        _CONFIG_KEY_MESSAGE,
                    )
                )
    return errors


def _service(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    errors: list[FieldError] = []
    for index, port in enumerate(spec.get("ports") or []):
        if not isinstance(port, dict) or "port" not in port:
            errors.append(FieldError.required(f"spec.ports[{index}].port"))
            continue
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port["port"])
    if spec.get("type") != "ExternalName":
        _cluster_ip(obj, old)
    if old is None:
        obj["status"] = {"loadBalancer": {}}
    return errors


def _cluster_ip(obj: Obj, old: Obj | None) -> None:
    """Keep a Service's cluster IP on updates; a new Service gets one from the kubelet's network.

    The devcluster's network (``_network.py``) allocates cluster IPs on loopback (127.96/16)
    and forwards them to ready pods, so admission only keeps an existing address (as the real
    API server does when an update omits it) and fills the fields that go with it.
    """
    spec = obj["spec"]
    previous = ((old or {}).get("spec") or {}).get("clusterIP")
    if not spec.get("clusterIP") and previous:
        spec["clusterIP"] = previous
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")


def _pod(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        default_pod_spec(spec)
    errors = validate_pod_spec(spec, "spec", restart_policies=("Always", "OnFailure", "Never"))
    if old is None:
        if isinstance(spec, dict) and not spec.get("schedulingGates"):
            # Scheduled at once (there is one node), unless scheduling gates hold it back:
            # the kubelet binds a gated pod when its gates are removed.
            spec.setdefault("nodeName", NODE_NAME)
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return errors


def _template_defaults(spec: Obj) -> None:
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        pod_spec = template.setdefault("spec", {})
        if isinstance(pod_spec, dict):
            default_pod_spec(pod_spec)


def _deployment(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy",
        {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
    )
    _template_defaults(spec)
    errors = _validate_selector_matches(spec, "spec")
    errors += validate_pod_spec(
        (spec.get("template") or {}).get("spec"), "spec.template.spec", restart_policies=("Always",)
    )
    if not isinstance(spec.get("replicas"), int) or spec["replicas"] < 0:
        errors.append(
            FieldError.invalid(
                "spec.replicas", spec.get("replicas"), "must be greater than or equal to 0"
            )
        )
    if old is not None and old.get("spec", {}).get("selector") != spec.get("selector"):
        errors.append(
            FieldError.invalid("spec.selector", spec.get("selector"), "field is immutable")
        )
    return errors


def _replicaset(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _template_defaults(spec)
    return _validate_selector_matches(spec, "spec")


def _job(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    uid = obj["metadata"]["uid"]
    name = obj["metadata"]["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    template = spec.setdefault("template", {})
    errors: list[FieldError] = []
    if not isinstance(template, dict):
        return [FieldError.required("spec.template")]
    template_meta = template.setdefault("metadata", {})
    if not spec.get("manualSelector"):
        generated = {"batch.kubernetes.io/controller-uid": uid}
        if old is None:
            if spec.get("selector"):
                errors.append(
                    FieldError.invalid(
                        "spec.selector", spec["selector"], "`selector` will be auto-generated"
                    )
                )
            spec["selector"] = {"matchLabels": generated}
        labels = template_meta.setdefault("labels", {})
        labels.update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
    pod_spec = template.setdefault("spec", {})
    if isinstance(pod_spec, dict):
        explicit = "restartPolicy" in pod_spec
        default_pod_spec(pod_spec)
        if not explicit:
            # The API server requires the restart policy of a Job's pods to be explicit.
            del pod_spec["restartPolicy"]
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        errors += validate_pod_failure_policy(spec, "spec.podFailurePolicy")
    errors += validate_pod_spec(
        pod_spec, "spec.template.spec", restart_policies=("OnFailure", "Never")
    )
    restart = pod_spec.get("restartPolicy") if isinstance(pod_spec, dict) else None
    if policy is not None and restart == "OnFailure":
        errors.append(
            FieldError.invalid(
                "spec.template.spec.restartPolicy",
                restart,
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    errors += _validate_selector_matches(spec, "spec")
    for key in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        value = spec.get(key)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            errors.append(
                FieldError.invalid(f"spec.{key}", value, "must be greater than or equal to 0")
            )
    if old is not None and _template_changed(old, spec):
        errors.append(FieldError.invalid("spec.template", "object", "field is immutable"))
    return errors


#: A Job's ``podFailurePolicy``: what its rules may say, and how many (Kubernetes'
#: pkg/apis/batch/validation: maxPodFailurePolicyRules and its siblings).
POD_FAILURE_POLICY_ACTIONS = ("Count", "FailIndex", "FailJob", "Ignore")
ON_EXIT_CODES_OPERATORS = ("In", "NotIn")
ON_POD_CONDITIONS_STATUSES = ("False", "True", "Unknown")
_MAX_POLICY_RULES = 20
_MAX_EXIT_CODE_VALUES = 255
_MAX_CONDITION_PATTERNS = 20


def _valid_values(values: tuple[str, ...]) -> str:
    """``valid values: %q`` of a sorted Go string slice: ``["A" "B"]``."""
    return "valid values: [" + " ".join(go_repr(value) for value in values) + "]"


def _int32s(values: Any) -> str:
    """Go's ``%#v`` of an ``[]int32``, as a field error shows a list of exit codes."""
    if values is None:
        return "[]int32(nil)"
    return "[]int32{" + ", ".join(str(value) for value in values) + "}"


def _invalid(path: str, rendered: str, detail: str) -> FieldError:
    """``field.Invalid`` whose value is already rendered (``rendered`` empty: omitted)."""
    shown = f"Invalid value: {rendered}: " if rendered else "Invalid value: "
    return FieldError(path, "FieldValueInvalid", shown + detail)


def validate_pod_failure_policy(spec: Obj, path: str) -> list[FieldError]:
    """``validatePodFailurePolicy`` of Kubernetes' Job validation, with its messages.

    Each rule: an action of the four (``FailIndex`` only with ``backoffLimitPerIndex``, which
    the devcluster never runs: it refuses it, as Kubernetes does without one), exactly one of
    ``onExitCodes`` and ``onPodConditions``; exit codes unique, ascending, no 0 under ``In``,
    a ``containerName`` of the template's containers. ``restartPolicy: Never`` is checked by
    the caller, after the pod template.
    """
    policy = spec.get("podFailurePolicy")
    if not isinstance(policy, dict):
        return [FieldError.invalid(path, policy, "must be an object")]
    rules = policy.get("rules")
    rules_path = f"{path}.rules"
    if rules is None:
        rules = []
    if not isinstance(rules, list):
        return [FieldError.invalid(rules_path, rules, "must be a list")]
    errors: list[FieldError] = []
    if len(rules) > _MAX_POLICY_RULES:
        errors.append(FieldError.too_many(rules_path, len(rules), _MAX_POLICY_RULES))
    pod_spec = (spec.get("template") or {}).get("spec")
    if not isinstance(pod_spec, dict):
        pod_spec = {}
    names = {
        container.get("name")
        for key in ("containers", "initContainers")
        for container in pod_spec.get(key) or []
        if isinstance(container, dict)
    }
    for index, rule in enumerate(rules):
        rule_path = f"{rules_path}[{index}]"
        if not isinstance(rule, dict):
            errors.append(FieldError.invalid(rule_path, rule, "must be an object"))
            continue
        errors += _validate_policy_rule(spec, rule, rule_path, names)
    return errors


def _validate_policy_rule(spec: Obj, rule: Obj, path: str, names: set[Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    action = rule.get("action")
    if not action:
        errors.append(
            FieldError.required(f"{path}.action", _valid_values(POD_FAILURE_POLICY_ACTIONS))
        )
    elif action == "FailIndex":
        if spec.get("backoffLimitPerIndex") is None:
            errors.append(
                FieldError.invalid(
                    f"{path}.action", action, "requires the backoffLimitPerIndex to be set"
                )
            )
    elif action not in POD_FAILURE_POLICY_ACTIONS:
        errors.append(
            FieldError.not_supported(f"{path}.action", action, list(POD_FAILURE_POLICY_ACTIONS))
        )
    on_exit_codes = rule.get("onExitCodes")
    on_conditions = rule.get("onPodConditions") or []
    if on_exit_codes is not None:
        errors += _validate_on_exit_codes(on_exit_codes, f"{path}.onExitCodes", names)
    if on_conditions:
        errors += _validate_on_pod_conditions(on_conditions, f"{path}.onPodConditions")
    if on_exit_codes is not None and on_conditions:
        errors.append(
            _invalid(path, "", "specifying both OnExitCodes and OnPodConditions is not supported")
        )
    if on_exit_codes is None and not on_conditions:
        errors.append(
            _invalid(path, "", "specifying one of OnExitCodes and OnPodConditions is required")
        )
    return errors


def _validate_on_exit_codes(requirement: Any, path: str, names: set[Any]) -> list[FieldError]:
    if not isinstance(requirement, dict):
        return [FieldError.invalid(path, requirement, "must be an object")]
    errors: list[FieldError] = []
    operator = requirement.get("operator")
    if not operator:
        errors.append(
            FieldError.required(f"{path}.operator", _valid_values(ON_EXIT_CODES_OPERATORS))
        )
    elif operator not in ON_EXIT_CODES_OPERATORS:
        errors.append(
            FieldError.not_supported(f"{path}.operator", operator, list(ON_EXIT_CODES_OPERATORS))
        )
    container = requirement.get("containerName")
    if container is not None and container not in names:
        errors.append(
            FieldError.invalid(
                f"{path}.containerName",
                container,
                "must be one of the container or initContainer names in the pod template",
            )
        )
    values_path = f"{path}.values"
    values = requirement.get("values")
    if values is not None and not isinstance(values, list):
        return [*errors, FieldError.invalid(values_path, values, "must be a list of integers")]
    if not values:
        errors.append(_invalid(values_path, _int32s(values), "at least one value is required"))
        return errors
    if len(values) > _MAX_EXIT_CODE_VALUES:
        errors.append(FieldError.too_many(values_path, len(values), _MAX_EXIT_CODE_VALUES))
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in values):
        return [*errors, FieldError.invalid(values_path, values, "must be a list of integers")]
    seen: set[int] = set()
    for index, value in enumerate(values):
        value_path = f"{values_path}[{index}]"
        if operator == "In" and value == 0:
            errors.append(
                FieldError.invalid(value_path, value, "must not be 0 for the In operator")
            )
        if value in seen:
            errors.append(FieldError.duplicate(value_path, value))
        seen.add(value)
    if any(before > after for before, after in pairwise(values)):
        errors.append(_invalid(values_path, _int32s(values), "must be ordered"))
    return errors


def _validate_on_pod_conditions(patterns: Any, path: str) -> list[FieldError]:
    if not isinstance(patterns, list):
        return [FieldError.invalid(path, patterns, "must be a list")]
    errors: list[FieldError] = []
    if len(patterns) > _MAX_CONDITION_PATTERNS:
        errors.append(FieldError.too_many(path, len(patterns), _MAX_CONDITION_PATTERNS))
    for index, pattern in enumerate(patterns):
        where = f"{path}[{index}]"
        if not isinstance(pattern, dict):
            errors.append(FieldError.invalid(where, pattern, "must be an object"))
            continue
        kind = str(pattern.get("type") or "")
        errors += [
            FieldError.invalid(f"{where}.type", kind, message)
            for message in _limits.qualified_name(kind)
        ]
        status = pattern.get("status")
        if not status:
            errors.append(
                FieldError.required(f"{where}.status", _valid_values(ON_POD_CONDITIONS_STATUSES))
            )
        elif status not in ON_POD_CONDITIONS_STATUSES:
            errors.append(
                FieldError.not_supported(
                    f"{where}.status", status, list(ON_POD_CONDITIONS_STATUSES)
                )
            )
    return errors


#: What a suspended Job that never started may change in its pod template (Kubernetes'
#: mutable scheduling directives: what Kueue sets on admission and restores on eviction).
_SCHEDULING_DIRECTIVES = ("nodeSelector", "affinity", "tolerations", "schedulingGates")


def _template_changed(old: Obj, spec: Obj) -> bool:
    before = (old.get("spec") or {}).get("template")
    after = spec.get("template")
    if before == after:
        return False
    suspended = bool((old.get("spec") or {}).get("suspend"))
    if not suspended or (old.get("status") or {}).get("startTime"):
        return True
    if not isinstance(before, dict) or not isinstance(after, dict):
        return True
    pod_before = dict(before.get("spec") or {})
    pod_after = dict(after.get("spec") or {})
    for key in _SCHEDULING_DIRECTIVES:
        pod_before.pop(key, None)
        pod_after.pop(key, None)
    meta_before = {
        k: v
        for k, v in (before.get("metadata") or {}).items()
        if k not in ("labels", "annotations")
    }
    meta_after = {
        k: v for k, v in (after.get("metadata") or {}).items() if k not in ("labels", "annotations")
    }
    return pod_before != pod_after or meta_before != meta_after


def _pvc(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    errors: list[FieldError] = []
    if not spec.get("accessModes"):
        errors.append(FieldError.required("spec.accessModes"))
    if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
        errors.append(FieldError.required("spec.resources[storage]"))
    if old is None:
        obj["status"] = {"phase": "Pending"}
    return errors


def _crd(obj: Obj, old: Obj | None) -> list[FieldError]:
    spec = obj.setdefault("spec", {})
    errors: list[FieldError] = []
    group = spec.get("group")
    names = spec.setdefault("names", {})
    plural = names.get("plural")
    kind = names.get("kind")
    if not group:
        errors.append(FieldError.required("spec.group"))
    elif "." not in group:
        errors.append(
            FieldError.invalid("spec.group", group, "should be a domain with at least one dot")
        )
    if not plural:
        errors.append(FieldError.required("spec.names.plural"))
    if not kind:
        errors.append(FieldError.required("spec.names.kind"))
    if kind:
        names.setdefault("singular", str(kind).lower())
        names.setdefault("listKind", f"{kind}List")
    if spec.get("scope") not in {"Namespaced", "Cluster"}:
        errors.append(
            FieldError.not_supported("spec.scope", spec.get("scope"), ["Cluster", "Namespaced"])
        )
    spec.setdefault("conversion", {"strategy": "None"})
    versions = spec.get("versions") or []
    if not versions:
        errors.append(
            FieldError.required(
                "spec.versions", "must have exactly one version marked as storage version"
            )
        )
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if versions and len(storage) != 1:
        errors.append(
            FieldError.invalid(
                "spec.versions",
                len(storage),
                "must have exactly one version marked as storage version",
            )
        )
    seen: set[str] = set()
    for index, version in enumerate(versions):
        if not isinstance(version, dict):
            continue
        version_name = version.get("name")
        if not version_name:
            errors.append(FieldError.required(f"spec.versions[{index}].name"))
        elif version_name in seen:
            errors.append(FieldError.duplicate(f"spec.versions[{index}].name", version_name))
        else:
            seen.add(version_name)
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            errors.append(
                FieldError.required(
                    f"spec.versions[{index}].schema.openAPIV3Schema", "schemas are required"
                )
            )
        elif schema.get("type") != "object":
            errors.append(
                FieldError.invalid(
                    f"spec.versions[{index}].schema.openAPIV3Schema.type",
                    schema.get("type"),
                    "must be object at the root",
                )
            )
        for column_index, column in enumerate(version.get("additionalPrinterColumns") or []):
            where = f"spec.versions[{index}].additionalPrinterColumns[{column_index}]"
            for key in ("name", "type", "jsonPath"):
                if not isinstance(column, dict) or not column.get(key):
                    errors.append(FieldError.required(f"{where}.{key}"))
    name = (obj.get("metadata") or {}).get("name")
    if plural and group and name != f"{plural}.{group}":
        errors.append(
            FieldError.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group')
        )
    if old is not None:
        old_spec = old.get("spec") or {}
        if old_spec.get("group") != group:
            errors.append(FieldError.invalid("spec.group", group, "field is immutable"))
        if (old_spec.get("names") or {}).get("plural") != plural:
            errors.append(FieldError.invalid("spec.names.plural", plural, "field is immutable"))
        if old_spec.get("scope") != spec.get("scope"):
            errors.append(FieldError.invalid("spec.scope", spec.get("scope"), "field is immutable"))
    return errors


def crd_status(obj: Obj, now: str, old: Obj | None) -> Obj:
    """The status the CRD controllers write: names accepted, established, stored versions."""
    spec = obj.get("spec") or {}
    stored = list(((old or {}).get("status") or {}).get("storedVersions") or [])
    for version in spec.get("versions") or []:
        if version.get("storage") and version.get("name") not in stored:
            stored.append(version.get("name"))
    return {
        "acceptedNames": dict(spec.get("names") or {}),
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": now,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": now,
            },
        ],
        "storedVersions": stored,
    }


_STRATEGIES = {
    "Namespace": _namespace,
    "Secret": _secret,
    "ConfigMap": _configmap,
    "Service": _service,
    "Pod": _pod,
    "Deployment": _deployment,
    "ReplicaSet": _replicaset,
    "Job": _job,
    "PersistentVolumeClaim": _pvc,
    "CustomResourceDefinition": _crd,
}


def validate_binding_update(kind: str, obj: Obj, old: Obj | None) -> list[FieldError]:
    """``ValidateRoleBindingUpdate``: a binding's ``roleRef`` never changes."""
    if old is None or kind not in ("RoleBinding", "ClusterRoleBinding"):
        return []
    ref = obj.get("roleRef") or {}
    if ref == (old.get("roleRef") or {}):
        return []
    shown = (
        f"rbac.RoleRef{{APIGroup:{go_repr(str(ref.get('apiGroup') or ''))}, "
        f"Kind:{go_repr(str(ref.get('kind') or ''))}, Name:{go_repr(str(ref.get('name') or ''))}}}"
    )
    return [
        FieldError("roleRef", "FieldValueInvalid", f"Invalid value: {shown}: cannot change roleRef")
    ]
