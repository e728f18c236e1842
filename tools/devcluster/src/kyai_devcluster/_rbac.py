"""Authentication and RBAC authorization of the devcluster, as the real API server does them.

* Authentication: ``Authorization: Bearer <token>``. The admin kubeconfig's token is the
  unrestricted ``kubernetes-admin`` (group ``system:masters``); a service-account token
  signed by this devcluster is that service account; any other token is a 401. A request
  without credentials is admin too unless the server was told otherwise (backward
  compatibility: the test helpers send none), then it is ``system:anonymous``.
* Impersonation (``Impersonate-User``/``-Group``/``-Uid`` headers, ``kubectl --as``) is
  allowed for the admin and, as in Kubernetes, for whoever holds the ``impersonate`` verb.
* Authorization follows ``k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac``: the rules of
  the ClusterRoles bound by ClusterRoleBindings apply everywhere, those of a RoleBinding (to a
  Role or a ClusterRole) only in its namespace. Rules match by API group, resource (with
  ``resource/subresource`` and ``*/subresource``), verb and resource name; ``*`` is a
  wildcard. A denial is the real 403 ``Status`` with the real message. The bootstrap
  policy a cluster gives every authenticated user (discovery, version, health, self access
  reviews) is built in; no bootstrap ClusterRoles exist as objects, and aggregation is not
  modelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kyai_devcluster import _protobuf, _tokens
from kyai_devcluster._errors import StatusError, go_repr
from kyai_devcluster._resources import ResourceType
from kyai_devcluster._store import Event, Store, meta

Obj = dict[str, Any]

RBAC_GROUP = "rbac.authorization.k8s.io"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
MASTERS = "system:masters"
_SA_PREFIX = "system:serviceaccount:"

#: Non-resource paths every authenticated user may GET (system:discovery,
#: system:public-info-viewer); a trailing ``*`` matches a prefix.
_PUBLIC_PATHS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/openapi",
    "/openapi/*",
    "/version",
    "/version/",
    "/healthz",
    "/livez",
    "/readyz",
)
#: Resources every authenticated user may create (system:basic-user).
_SELF_REVIEWS = {"selfsubjectaccessreviews", "selfsubjectrulesreviews", "selfsubjectreviews"}


@dataclass(frozen=True)
class UserInfo:
    """Who a request speaks for."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        """Members of ``system:masters`` pass every authorization check."""
        return MASTERS in self.groups


ADMIN = UserInfo("kubernetes-admin", (MASTERS, ALL_AUTHENTICATED))
ANONYMOUS_USER = UserInfo(ANONYMOUS, (ALL_UNAUTHENTICATED,))


def service_account_user(
    namespace: str, name: str, identity: _tokens.ServiceAccountIdentity | None = None
) -> UserInfo:
    """The user a service account authenticates as (with a token's uid and extra, if given)."""
    identity = identity or _tokens.ServiceAccountIdentity(namespace, name)
    return UserInfo(identity.username, identity.groups, identity.uid, identity.extra)


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""


def unauthorized() -> StatusError:
    """The 401 the API server answers a token it cannot authenticate with."""
    return StatusError(401, "Unauthorized", "Unauthorized")


def authenticate(
    headers: Mapping[str, str],
    tokens: _tokens.TokenAuthenticator | None,
    *,
    anonymous_admin: bool = True,
) -> UserInfo:
    """The user behind a request's ``Authorization`` header (401 when it is not valid).

    A service-account token must be valid for the API server's audiences, unexpired, and
    its ServiceAccount and bound pod must still exist (``tokens`` checks all of it).
    """
    header = headers.get("Authorization", "")
    if not header:
        return ADMIN if anonymous_admin else ANONYMOUS_USER
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized()
    if token == _tokens.ADMIN_TOKEN:
        return ADMIN
    if tokens is None:
        raise unauthorized()
    try:
        identity = tokens.authenticate(token)
    except _tokens.TokenRefusedError:
        raise unauthorized() from None
    return service_account_user(identity.namespace, identity.name, identity)


def _split_service_account(username: str) -> tuple[str, str] | None:
    if not username.startswith(_SA_PREFIX):
        return None
    namespace, sep, name = username[len(_SA_PREFIX) :].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


def impersonated(
    headers: Mapping[str, str], requester: UserInfo, authorizer: Authorizer
) -> UserInfo:
    """Apply ``Impersonate-*`` headers: the user the request then speaks for (or 403)."""
    items: Iterable[tuple[str, str]] = headers.items()
    username = ""
    groups: list[str] = []
    uid = ""
    extra: dict[str, list[str]] = {}
    for key, value in items:
        lowered = key.lower()
        if lowered == "impersonate-user":
            username = value
        elif lowered == "impersonate-group":
            groups.append(value)
        elif lowered == "impersonate-uid":
            uid = value
        elif lowered.startswith("impersonate-extra-"):
            extra.setdefault(lowered[len("impersonate-extra-") :], []).append(value)
    if not username:
        if groups or uid or extra:
            raise StatusError(
                500,
                "InternalError",
                "Internal error occurred: requested impersonation of groups, a uid or extras "
                "without impersonating a user",
            )
        return requester
    checks: list[Attributes] = []
    sa = _split_service_account(username)
    if sa is not None:
        checks.append(
            Attributes(
                requester,
                "impersonate",
                resource="serviceaccounts",
                namespace=sa[0],
                name=sa[1],
            )
        )
    else:
        checks.append(Attributes(requester, "impersonate", resource="users", name=username))
    checks.extend(
        Attributes(requester, "impersonate", resource="groups", name=group) for group in groups
    )
    if uid:
        checks.append(
            Attributes(
                requester, "impersonate", group="authentication.k8s.io", resource="uids", name=uid
            )
        )
    for attrs in checks:
        allowed, reason = authorizer.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)
    if not groups and sa is not None:
        groups = list(service_account_user(*sa).groups)
    if username != ANONYMOUS and not any(
        group in (ALL_AUTHENTICATED, ALL_UNAUTHENTICATED) for group in groups
    ):
        groups.append(ALL_AUTHENTICATED)
    return UserInfo(
        username, tuple(groups), uid, {key: tuple(values) for key, values in extra.items()}
    )


def forbidden_message(attrs: Attributes) -> str:
    """``forbiddenMessage`` of k8s.io/apiserver's responsewriters, word for word."""
    user = go_repr(attrs.user.name)
    if not attrs.resource_request:
        return f"User {user} cannot {attrs.verb} path {go_repr(attrs.path)}"
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    where = (
        f"in the namespace {go_repr(attrs.namespace)}"
        if attrs.namespace
        else "at the cluster scope"
    )
    return (
        f"User {user} cannot {attrs.verb} resource {go_repr(resource)} "
        f"in API group {go_repr(attrs.group)} {where}"
    )


def forbidden(attrs: Attributes, reason: str = "") -> StatusError:
    """The 403 ``Status`` (``apierrors.NewForbidden`` around the forbidden message)."""
    message = forbidden_message(attrs)
    if reason:
        message = f"{message}: {reason}"
    if not attrs.resource_request:
        return StatusError(403, "Forbidden", f"forbidden: {message}")
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    details: Obj = {"kind": attrs.resource}
    if attrs.group:
        details["group"] = attrs.group
    if attrs.name:
        details["name"] = attrs.name
        text = f"{qualified} {go_repr(attrs.name)} is forbidden: {message}"
    else:
        text = f"{qualified} is forbidden: {message}"
    return StatusError(403, "Forbidden", text, details)


# -- rule matching (k8s.io/component-helpers/auth/rbac/validation) --------------------------


def _verb_matches(rule: Obj, verb: str) -> bool:
    verbs = rule.get("verbs") or []
    return "*" in verbs or verb in verbs


def _group_matches(rule: Obj, group: str) -> bool:
    groups = rule.get("apiGroups") or []
    return "*" in groups or group in groups


def _resource_matches(rule: Obj, combined: str, subresource: str) -> bool:
    for resource in rule.get("resources") or []:
        if resource in ("*", combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def _name_matches(rule: Obj, name: str) -> bool:
    names = rule.get("resourceNames") or []
    return not names or name in names


def _url_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or []:
        if url == "*" or url == path:
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def rule_allows(attrs: Attributes, rule: Any) -> bool:
    """Whether one PolicyRule allows the request (``RuleAllows``)."""
    if not isinstance(rule, dict):
        return False
    if attrs.resource_request:
        combined = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        return (
            _verb_matches(rule, attrs.verb)
            and _group_matches(rule, attrs.group)
            and _resource_matches(rule, combined, attrs.subresource)
            and _name_matches(rule, attrs.name)
        )
    return _verb_matches(rule, attrs.verb) and _url_matches(rule, attrs.path)


def _subject_applies(user: UserInfo, subject: Any, namespace: str) -> bool:
    if not isinstance(subject, dict):
        return False
    kind = subject.get("kind")
    name = str(subject.get("name") or "")
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        sa_namespace = str(subject.get("namespace") or namespace)
        return bool(sa_namespace) and user.name == f"{_SA_PREFIX}{sa_namespace}:{name}"
    return False


def _bootstrap_allows(attrs: Attributes) -> bool:
    """What the bootstrap ClusterRoles of every cluster grant (discovery, basic-user, ...)."""
    if not attrs.resource_request:
        if attrs.verb != "get":
            return False
        if attrs.path in ("/version", "/version/", "/healthz", "/livez", "/readyz"):
            return True  # system:public-info-viewer: authenticated and unauthenticated
        return ALL_AUTHENTICATED in attrs.user.groups and any(
            attrs.path == path or (path.endswith("*") and attrs.path.startswith(path[:-1]))
            for path in _PUBLIC_PATHS
        )
    return (
        ALL_AUTHENTICATED in attrs.user.groups
        and attrs.verb == "create"
        and attrs.group in ("authorization.k8s.io", "authentication.k8s.io")
        and attrs.resource in _SELF_REVIEWS
    )


def _subject_keys(binding: Obj, namespace: str) -> set[tuple[str, str]]:
    """What a binding's subjects match: ``("User", name)`` or ``("Group", name)``.

    A ServiceAccount subject is the user ``system:serviceaccount:NS:NAME`` (NS defaults to
    the binding's own namespace, and a ClusterRoleBinding has none to default to).
    """
    keys: set[tuple[str, str]] = set()
    for subject in binding.get("subjects") or []:
        if not isinstance(subject, dict):
            continue
        kind = subject.get("kind")
        name = str(subject.get("name") or "")
        if kind in ("User", "Group"):
            keys.add((str(kind), name))
        elif kind == "ServiceAccount":
            sa_namespace = str(subject.get("namespace") or namespace)
            if sa_namespace:
                keys.add(("User", f"{_SA_PREFIX}{sa_namespace}:{name}"))
    return keys


_BINDINGS = ((RBAC_GROUP, "rolebindings"), (RBAC_GROUP, "clusterrolebindings"))


class Authorizer:
    """RBAC over the roles and bindings in a :class:`Store`.

    The bindings are indexed by subject, kept up to date from the store's commits: with a
    binding per EvaluationRun, every worker request scanned a thousand bindings.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        #: (plural, namespace) -> subject key -> names of the bindings naming it.
        self._index: dict[tuple[str, str], dict[tuple[str, str], set[str]]] = {}
        for plural in ("rolebindings", "clusterrolebindings"):
            for binding in self._objects(plural):
                self._add(plural, binding)
        store.subscribe(self._on_commit)

    def _objects(self, plural: str, namespace: str | None = None) -> list[Obj]:
        rt = self.store.type_for(RBAC_GROUP, plural)
        return list(self.store.objects(rt, namespace))

    def _add(self, plural: str, binding: Obj, *, remove: bool = False) -> None:
        namespace = str(meta(binding).get("namespace") or "") if plural == "rolebindings" else ""
        name = str(meta(binding).get("name") or "")
        by_subject = self._index.setdefault((plural, namespace), {})
        for key in _subject_keys(binding, namespace):
            if remove:
                by_subject.get(key, set()).discard(name)
            else:
                by_subject.setdefault(key, set()).add(name)

    def _on_commit(self, event: Event) -> None:
        if event.group_resource not in _BINDINGS:
            return
        plural = event.group_resource[1]
        if event.old is not None:
            self._add(plural, event.old, remove=True)
        if event.type != "DELETED":
            self._add(plural, event.obj)

    def _bindings_for(self, user: UserInfo, plural: str, namespace: str) -> list[Obj]:
        """The bindings naming ``user`` (or a group of it), in the store's (name) order."""
        by_subject = self._index.get((plural, namespace if plural == "rolebindings" else ""))
        if not by_subject:
            return []
        names: set[str] = set()
        for key in (("User", user.name), *(("Group", group) for group in user.groups)):
            names |= by_subject.get(key, set())
        rt = self.store.type_for(RBAC_GROUP, plural)
        found = (self.store.find(rt, namespace or None, name) for name in sorted(names))
        return [binding for binding in found if binding is not None]

    def _role_rules(self, ref: Obj, namespace: str, errors: list[str]) -> list[Obj]:
        kind = ref.get("kind")
        name = str(ref.get("name") or "")
        if kind == "ClusterRole":
            role = self.store.find(self.store.type_for(RBAC_GROUP, "clusterroles"), None, name)
            what = "clusterrole"
        elif kind == "Role" and namespace:
            role = self.store.find(self.store.type_for(RBAC_GROUP, "roles"), namespace, name)
            what = "role"
        else:
            errors.append(f"unsupported role reference kind: {go_repr(kind)}")
            return []
        if role is None:
            errors.append(f"{what}.{RBAC_GROUP} {go_repr(name)} not found")
            return []
        rules = role.get("rules") or []
        return [rule for rule in rules if isinstance(rule, dict)]

    def authorize(self, attrs: Attributes) -> tuple[bool, str]:
        """``(allowed, reason)`` for a request, as the RBAC authorizer decides it."""
        if attrs.user.is_admin or _bootstrap_allows(attrs):
            return True, ""
        errors: list[str] = []
        for binding in self._bindings_for(attrs.user, "clusterrolebindings", ""):
            if not any(_subject_applies(attrs.user, s, "") for s in binding.get("subjects") or []):
                continue
            rules = self._role_rules(binding.get("roleRef") or {}, "", errors)
            if any(rule_allows(attrs, rule) for rule in rules):
                return True, ""
        if attrs.namespace:
            for binding in self._bindings_for(attrs.user, "rolebindings", attrs.namespace):
                namespace = str(meta(binding).get("namespace") or "")
                subjects = binding.get("subjects") or []
                if not any(_subject_applies(attrs.user, s, namespace) for s in subjects):
                    continue
                rules = self._role_rules(binding.get("roleRef") or {}, namespace, errors)
                if any(rule_allows(attrs, rule) for rule in rules):
                    return True, ""
        if not errors:
            return False, ""
        aggregate = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        return False, f"RBAC: {aggregate}"

    def check(self, attrs: Attributes) -> None:
        """Raise the 403 when the request is not allowed."""
        allowed, reason = self.authorize(attrs)
        if not allowed:
            raise forbidden(attrs, reason)

    def rules_review(self, user: UserInfo, namespace: str) -> Obj:
        """The status of a SelfSubjectRulesReview (``kubectl auth can-i --list``)."""
        if user.is_admin:
            return {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            }
        resource_rules: list[Obj] = []
        non_resource_rules: list[Obj] = []
        if ALL_AUTHENTICATED in user.groups:
            resource_rules.append(
                {
                    "verbs": ["create"],
                    "apiGroups": ["authorization.k8s.io"],
                    "resources": sorted(_SELF_REVIEWS - {"selfsubjectreviews"}),
                }
            )
            non_resource_rules.append({"verbs": ["get"], "nonResourceURLs": list(_PUBLIC_PATHS)})
        for rule in self.rules_for(user, namespace):
            if rule.get("nonResourceURLs"):
                non_resource_rules.append(
                    {"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]}
                )
                continue
            shown: Obj = {k: rule[k] for k in ("verbs", "apiGroups", "resources") if k in rule}
            if rule.get("resourceNames"):
                shown["resourceNames"] = rule["resourceNames"]
            resource_rules.append(shown)
        return {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": False,
        }

    def rules_for(self, user: UserInfo, namespace: str) -> list[Obj]:
        """Every rule that applies to ``user`` in ``namespace`` (SelfSubjectRulesReview)."""
        errors: list[str] = []
        rules: list[Obj] = []
        for binding in self._bindings_for(user, "clusterrolebindings", ""):
            if any(_subject_applies(user, s, "") for s in binding.get("subjects") or []):
                rules.extend(self._role_rules(binding.get("roleRef") or {}, "", errors))
        if namespace:
            for binding in self._bindings_for(user, "rolebindings", namespace):
                if any(_subject_applies(user, s, namespace) for s in binding.get("subjects") or []):
                    rules.extend(self._role_rules(binding.get("roleRef") or {}, namespace, errors))
        return rules


# -- protobuf access reviews (what ``kubectl auth can-i`` sends) -----------------------------

_RESOURCE_FIELDS = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}
_NON_RESOURCE_FIELDS = {1: "path", 2: "verb"}


def _strings(data: bytes, names: Mapping[int, str]) -> Obj:
    return {
        names[number]: value.decode()
        for number, value in _protobuf.fields(data)
        if number in names and isinstance(value, bytes)
    }


def decode_access_review(raw: bytes, *, rules: bool = False) -> Obj:
    """A (Self)SubjectAccessReview (or SelfSubjectRulesReview) sent as protobuf, as JSON."""
    _, _, payload = _protobuf.envelope(raw)
    spec: Obj = {}
    for number, value in _protobuf.fields(payload):
        if number != 2 or not isinstance(value, bytes):
            continue
        if rules:
            spec.update(_strings(value, {1: "namespace"}))
            continue
        for spec_number, spec_value in _protobuf.fields(value):
            if not isinstance(spec_value, bytes):
                continue
            if spec_number == 1:
                spec["resourceAttributes"] = _strings(spec_value, _RESOURCE_FIELDS)
            elif spec_number == 2:
                spec["nonResourceAttributes"] = _strings(spec_value, _NON_RESOURCE_FIELDS)
            elif spec_number == 3:
                spec["user"] = spec_value.decode()
            elif spec_number == 4:
                spec.setdefault("groups", []).append(spec_value.decode())
            elif spec_number == 6:
                spec["uid"] = spec_value.decode()
    return {"spec": spec}


# -- OwnerReferencesPermissionEnforcement (an admission plugin; opt-in) -----------------------


def _blocking(refs: Any) -> list[Obj]:
    return [r for r in refs or [] if isinstance(r, dict) and r.get("blockOwnerDeletion") is True]


def check_owner_references(
    authorizer: Authorizer,
    user: UserInfo,
    rt: ResourceType,
    new: Obj,
    old: Obj | None,
) -> None:
    """The ``OwnerReferencesPermissionEnforcement`` admission plugin (OpenShift enables it).

    Setting or changing owner references needs ``delete`` on the object itself; setting
    ``blockOwnerDeletion`` needs ``update`` on the owner's ``finalizers`` subresource.
    """
    if user.is_admin:
        return
    new_refs = meta(new).get("ownerReferences") or []
    old_refs = (meta(old).get("ownerReferences") or []) if old is not None else []
    namespace = str(meta(new).get("namespace") or "")
    name = str(meta(new).get("name") or "")
    attrs = Attributes(
        user,
        "create" if old is None else "update",
        group=rt.group,
        resource=rt.plural,
        namespace=namespace,
        name=name,
    )
    if new_refs != old_refs:
        allowed, reason = authorizer.authorize(
            Attributes(
                user,
                "delete",
                group=rt.group,
                resource=rt.plural,
                namespace=namespace,
                name=name,
            )
        )
        if not allowed:
            raise forbidden_admission(
                attrs, f"cannot set an ownerRef on a resource you can't delete: {reason}, <nil>"
            )
    was_blocking = {(r.get("uid"), r.get("kind")) for r in _blocking(old_refs)}
    for ref in _blocking(new_refs):
        if (ref.get("uid"), ref.get("kind")) in was_blocking:
            continue
        owner = authorizer.store.registry.by_kind(str(ref.get("apiVersion")), str(ref.get("kind")))
        if owner is None:
            raise forbidden_admission(
                attrs,
                "cannot set blockOwnerDeletion in this case because cannot find RESTMapping "
                f"for APIVersion {ref.get('apiVersion')} Kind {ref.get('kind')}: , <nil>",
            )
        allowed, reason = authorizer.authorize(
            Attributes(
                user,
                "update",
                group=owner.group,
                resource=owner.plural,
                subresource="finalizers",
                namespace=namespace if owner.namespaced else "",
                name=str(ref.get("name") or ""),
            )
        )
        if not allowed:
            raise forbidden_admission(
                attrs,
                "cannot set blockOwnerDeletion if an ownerReference refers to a resource you "
                f"can't set finalizers on: {reason}, <nil>",
            )


def forbidden_admission(attrs: Attributes, detail: str) -> StatusError:
    """``admission.NewForbidden``: ``<resource>.<group> "<name>" is forbidden: <detail>``."""
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    details: Obj = {"kind": attrs.resource}
    if attrs.group:
        details["group"] = attrs.group
    if attrs.name:
        details["name"] = attrs.name
        return StatusError(
            403, "Forbidden", f"{qualified} {go_repr(attrs.name)} is forbidden: {detail}", details
        )
    return StatusError(403, "Forbidden", f"{qualified} is forbidden: {detail}", details)


# -- privilege-escalation prevention (pkg/registry/rbac/validation) ----------------------------


def _go_strings(values: Iterable[str]) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(go_repr(value) for value in values) + "]"


def _breakdown(rule: Obj) -> list[Obj]:
    """``BreakdownRule``: one rule per group, resource, verb (and name)."""
    verbs = [str(v) for v in rule.get("verbs") or []]
    if rule.get("nonResourceURLs"):
        return [
            {"nonResourceURLs": [str(url)], "verbs": [verb]}
            for url in rule["nonResourceURLs"]
            for verb in verbs
        ]
    names = [str(n) for n in rule.get("resourceNames") or []]
    broken: list[Obj] = []
    for group in rule.get("apiGroups") or []:
        for resource in rule.get("resources") or []:
            for verb in verbs:
                base: Obj = {
                    "apiGroups": [str(group)],
                    "resources": [str(resource)],
                    "verbs": [verb],
                }
                if names:
                    broken.extend({**base, "resourceNames": [name]} for name in names)
                else:
                    broken.append(base)
    return broken


def _has_all(owner: list[Any], wanted: list[Any]) -> bool:
    return all(item in owner for item in wanted)


def _resources_cover(owner: list[Any], wanted: list[Any]) -> bool:
    if "*" in owner or _has_all(owner, wanted):
        return True
    for path in wanted:
        if path in owner:
            continue
        if "/" not in path or f"*/{path.split('/', 1)[1]}" not in owner:
            return False
    return True


def _urls_cover(owner: list[Any], wanted: list[Any]) -> bool:
    for url in wanted:
        if not any(
            have == "*" or have == url or (have.endswith("*") and url.startswith(have[:-1]))
            for have in owner
        ):
            return False
    return True


def _rule_covers(owner: Obj, sub: Obj) -> bool:
    """``ruleCovers``: whether ``owner`` grants everything ``sub`` does."""
    owner_verbs = owner.get("verbs") or []
    owner_groups = owner.get("apiGroups") or []
    owner_names = owner.get("resourceNames") or []
    sub_names = sub.get("resourceNames") or []
    names_ok = not owner_names or (bool(sub_names) and _has_all(owner_names, sub_names))
    return (
        ("*" in owner_verbs or _has_all(owner_verbs, sub.get("verbs") or []))
        and ("*" in owner_groups or _has_all(owner_groups, sub.get("apiGroups") or []))
        and _resources_cover(owner.get("resources") or [], sub.get("resources") or [])
        and _urls_cover(owner.get("nonResourceURLs") or [], sub.get("nonResourceURLs") or [])
        and names_ok
    )


def _compact_string(rule: Obj) -> str:
    parts = []
    for key, label in (
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ):
        if rule.get(key):
            parts.append(f"{label}:{_go_strings(rule[key])}")
    return "{" + ", ".join(parts) + "}"


def _rules_to_string(rules: list[Obj]) -> str:
    """``rulesToString``: compacted (verbs merged per group/resource/name), sorted, one a line."""
    merged: dict[tuple[str, str, str], Obj] = {}
    others: list[Obj] = []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            others.append(rule)
            continue
        names = rule.get("resourceNames") or []
        key = (rule["apiGroups"][0], rule["resources"][0], names[0] if names else "\0")
        if key in merged:
            merged[key]["verbs"].extend(v for v in rule["verbs"] if v not in merged[key]["verbs"])
        else:
            merged[key] = {**rule, "verbs": list(rule["verbs"])}
    compacted = [*merged.values(), *others]
    return "\n".join(sorted(_compact_string(rule) for rule in compacted))


def _bootstrap_rules(user: UserInfo) -> list[Obj]:
    if ALL_AUTHENTICATED not in user.groups:
        return []
    return [
        {
            "verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": sorted(_SELF_REVIEWS - {"selfsubjectreviews"}),
        },
        {
            "verbs": ["create"],
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["selfsubjectreviews"],
        },
        {"verbs": ["get"], "nonResourceURLs": list(_PUBLIC_PATHS)},
    ]


_GC_FIELDS = ("ownerReferences", "finalizers", "resourceVersion", "managedFields")


def _only_gc_fields_change(new: Obj, old: Obj) -> bool:
    def strip(obj: Obj) -> Obj:
        metadata = {k: v for k, v in meta(obj).items() if k not in _GC_FIELDS}
        return {**obj, "metadata": metadata}

    return strip(new) == strip(old)


def check_escalation(
    authorizer: Authorizer, user: UserInfo, rt: ResourceType, new: Obj, old: Obj | None
) -> None:
    """Refuse a Role/ClusterRole/binding that grants what its author does not hold.

    As ``ConfirmNoEscalation`` does: the ``escalate`` verb on the role (or ``bind`` on a
    binding's role) lifts the check, and an update that only touches owner references or
    finalizers is not checked.
    """
    if user.is_admin or rt.group != RBAC_GROUP:
        return
    if old is not None and _only_gc_fields_change(new, old):
        return
    namespace = str(meta(new).get("namespace") or "")
    name = str(meta(new).get("name") or "")
    if rt.plural in ("roles", "clusterroles"):
        lift = Attributes(
            user, "escalate", group=RBAC_GROUP, resource=rt.plural, namespace=namespace, name=name
        )
        if authorizer.authorize(lift)[0]:
            return
        granted = [rule for rule in new.get("rules") or [] if isinstance(rule, dict)]
    elif rt.plural in ("rolebindings", "clusterrolebindings"):
        ref = new.get("roleRef") or {}
        ref_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        lift = Attributes(
            user,
            "bind",
            group=RBAC_GROUP,
            resource=ref_plural,
            namespace=namespace,  # the binding's: bind on a ClusterRole may be namespaced
            name=str(ref.get("name") or ""),
        )
        if authorizer.authorize(lift)[0]:
            return
        errors: list[str] = []
        granted = authorizer._role_rules(ref, namespace, errors)
        if errors:
            raise StatusError(
                404,
                "NotFound",
                errors[0],
                {"kind": ref_plural[:-1], "group": RBAC_GROUP, "name": str(ref.get("name") or "")},
            )
    else:
        return
    held = [*authorizer.rules_for(user, namespace), *_bootstrap_rules(user)]
    missing = [
        sub
        for rule in granted
        for sub in _breakdown(rule)
        if not any(_rule_covers(owner, sub) for owner in held)
    ]
    if missing:
        detail = (
            f"user {go_repr(user.name)} (groups={_go_strings(user.groups)}) is attempting to "
            f"grant RBAC permissions not currently held:\n{_rules_to_string(missing)}"
        )
        raise forbidden_admission(
            Attributes(user, "create", group=RBAC_GROUP, resource=rt.plural, name=name), detail
        )
