"""The authentication and authorization reviews: TokenReview, ``kubectl auth whoami``, ``can-i``.

``TokenReview`` authenticates a token for some audiences (what a service that accepts
projected ServiceAccount tokens asks); ``SelfSubjectReview`` says who a request speaks for;
``SelfSubjectAccessReview``,
``SubjectAccessReview`` and ``SelfSubjectRulesReview`` ask the RBAC authorizer
(:mod:`kyai_devcluster._rbac`) what a user may do. The API server reads and authorizes the
request; these functions build the answers from its decoded body.
"""

from __future__ import annotations

from typing import Any

from kyai_devcluster import _rbac, _tokens
from kyai_devcluster._errors import FieldError, bad_request, invalid

Obj = dict[str, Any]

#: The review resources of ``authorization.k8s.io/v1``, by plural.
REVIEW_KINDS: dict[str, str] = {
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "subjectaccessreviews": "SubjectAccessReview",
    "selfsubjectrulesreviews": "SelfSubjectRulesReview",
}


def self_subject_review(user: _rbac.UserInfo) -> Obj:
    """The ``SelfSubjectReview`` of ``user``."""
    info: Obj = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        info["uid"] = user.uid
    if user.extra:
        info["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {"userInfo": info},
    }


def token_review(tokens: _tokens.TokenAuthenticator | None, body: Any) -> Obj:
    """The answered ``TokenReview`` of ``body``, as kube-apiserver's tokenreview storage.

    The spec is echoed; ``spec.audiences`` empty means the API server's own. A token that
    does not authenticate gives ``authenticated`` unset, ``user: {}`` and the server's
    ``error`` text; one that does gives the user (``system:serviceaccount:NS:SA``, the
    ServiceAccount's uid, its groups, ``extra`` with the bound pod) and the ``audiences``
    both the token and the request have.
    """
    if not isinstance(body, dict):
        raise bad_request("the body of a TokenReview must be an object")
    spec = body.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    token = spec.get("token")
    if not isinstance(token, str) or not token:
        raise bad_request("token is required for TokenReview in authentication")
    wanted = [str(audience) for audience in spec.get("audiences") or []]
    status: Obj = {"user": {}}
    api_audiences = tokens.api_audiences if tokens is not None else _tokens.API_AUDIENCES
    audiences = tuple(wanted) or api_audiences
    if token == _tokens.ADMIN_TOKEN:  # a static token: only for the API server's audiences
        matched = [audience for audience in audiences if audience in api_audiences]
        if matched:
            admin = _rbac.ADMIN
            status = {
                "authenticated": True,
                "user": {"username": admin.name, "groups": list(admin.groups)},
                "audiences": matched,
            }
        else:
            status["error"] = (
                f"[invalid bearer token, token audiences {_tokens.go_quote(api_audiences)} is "
                f"invalid for the target audiences {_tokens.go_quote(audiences)}]"
            )
    elif tokens is None:
        status["error"] = _tokens.UNKNOWN_TOKEN
    else:
        try:
            identity = tokens.authenticate(token, audiences)
        except _tokens.TokenRefusedError as refused:
            status["error"] = str(refused)
        else:
            user: Obj = {"username": identity.username}
            if identity.uid:
                user["uid"] = identity.uid
            user["groups"] = list(identity.groups)
            if identity.extra:
                user["extra"] = {key: list(values) for key, values in identity.extra.items()}
            status = {"authenticated": True, "user": user, "audiences": list(identity.audiences)}
    return {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def access_review(
    authorizer: _rbac.Authorizer, user: _rbac.UserInfo, plural: str, body: Any
) -> Obj:
    """The answered review of ``plural`` (a key of :data:`REVIEW_KINDS`) asked by ``user``."""
    kind = REVIEW_KINDS[plural]
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise bad_request(f"the body of a {kind} must be an object with a spec")
    spec: Obj = body["spec"]
    answer = {
        **body,
        "apiVersion": "authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {**(body.get("metadata") or {}), "creationTimestamp": None},
    }
    if plural == "selfsubjectrulesreviews":
        return {**answer, "status": authorizer.rules_review(user, str(spec.get("namespace") or ""))}
    subject = user
    if plural == "subjectaccessreviews":
        subject = _rbac.UserInfo(
            str(spec.get("user") or ""),
            tuple(str(group) for group in spec.get("groups") or []),
            str(spec.get("uid") or ""),
        )
    allowed, reason = authorizer.authorize(_attributes(subject, spec, kind))
    status: Obj = {"allowed": allowed}
    if reason:
        status["reason"] = reason
    return {**answer, "status": status}


def _attributes(subject: _rbac.UserInfo, spec: Obj, kind: str) -> _rbac.Attributes:
    """The request a review's ``resourceAttributes`` or ``nonResourceAttributes`` describe."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict):
        return _rbac.Attributes(
            subject,
            str(resource.get("verb") or ""),
            group=str(resource.get("group") or ""),
            version=str(resource.get("version") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            namespace=str(resource.get("namespace") or ""),
            name=str(resource.get("name") or ""),
        )
    if isinstance(non_resource, dict):
        return _rbac.Attributes(
            subject,
            str(non_resource.get("verb") or ""),
            resource_request=False,
            path=str(non_resource.get("path") or ""),
        )
    raise invalid(
        kind,
        "authorization.k8s.io",
        "",
        [
            FieldError.invalid(
                "spec.resourceAttributes",
                "null",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )
        ],
    )
