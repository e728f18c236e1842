"""Authentication and RBAC of the devcluster: real 401/403 bodies, roles, bindings, reviews."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
import yaml

from devcluster.helpers import Api
from kyai_devcluster import DevCluster, DevClusterThread, _rbac
from kyai_devcluster._tokens import ADMIN_TOKEN, issue, new_signing_key

RBAC = "/apis/rbac.authorization.k8s.io/v1"
SA_USER = "system:serviceaccount:team-a:worker"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def namespace(api: Api, name: str) -> None:
    await api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})


async def role(api: Api, ns: str, name: str, rules: list[dict[str, Any]]) -> None:
    await api.ok(
        "POST", f"{RBAC}/namespaces/{ns}/roles", {"metadata": {"name": name}, "rules": rules}
    )


async def cluster_role(api: Api, name: str, rules: list[dict[str, Any]]) -> None:
    await api.ok("POST", f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules})


def sa_subject(ns: str = "team-a", name: str = "worker") -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


async def role_binding(
    api: Api, ns: str, name: str, ref_kind: str, ref: str, subjects: list[dict[str, str]]
) -> None:
    body = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref},
        "subjects": subjects,
    }
    await api.ok("POST", f"{RBAC}/namespaces/{ns}/rolebindings", body)


async def cluster_role_binding(
    api: Api, name: str, ref: str, subjects: list[dict[str, str]]
) -> None:
    body = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ref},
        "subjects": subjects,
    }
    await api.ok("POST", f"{RBAC}/clusterrolebindings", body)


@pytest.fixture
async def sa(cluster: DevCluster, api: Api) -> dict[str, str]:
    """Namespaces team-a and team-b, a config map in each, and the worker SA's token."""
    for ns in ("team-a", "team-b"):
        await namespace(api, ns)
        for cm in ("settings", "other"):
            await api.ok(
                "POST",
                f"/api/v1/namespaces/{ns}/configmaps",
                {"metadata": {"name": cm}, "data": {"k": "v"}},
            )
    return bearer(issue(cluster.token_key, "team-a", "worker"))


async def test_invalid_token_gets_the_real_401(api: Api, cluster: DevCluster) -> None:
    forged = issue(new_signing_key(), "team-a", "worker")
    for headers in (bearer(forged), bearer("nonsense"), {"Authorization": "Basic YTpi"}):
        status, body = await api.get("/api/v1/namespaces", headers=headers)
        assert status == 401
        assert body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    status, _ = await api.get("/api/v1/namespaces", headers=bearer(ADMIN_TOKEN))
    assert status == 200


async def test_service_account_without_bindings_gets_real_403_bodies(
    api: Api, sa: dict[str, str]
) -> None:
    status, body = await api.get("/api/v1/namespaces/team-a/configmaps/settings", headers=sa)
    assert status == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'configmaps "settings" is forbidden: User "{SA_USER}" cannot get resource '
        '"configmaps" in API group "" in the namespace "team-a"',
        "reason": "Forbidden",
        "details": {"name": "settings", "kind": "configmaps"},
        "code": 403,
    }
    status, body = await api.get("/apis/batch/v1/namespaces/team-a/jobs", headers=sa)
    assert status == 403
    assert body["message"] == (
        f'jobs.batch is forbidden: User "{SA_USER}" cannot list resource "jobs" in API group '
        '"batch" in the namespace "team-a"'
    )
    assert body["details"] == {"group": "batch", "kind": "jobs"}
    status, body = await api.get("/api/v1/nodes", headers=sa)
    assert status == 403
    assert body["message"] == (
        f'nodes is forbidden: User "{SA_USER}" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )
    status, body = await api.get("/api/v1/namespaces/team-a/configmaps?watch=true", headers=sa)
    assert status == 403 and "cannot watch resource" in body["message"]


async def test_discovery_and_version_are_open_to_any_service_account(
    api: Api, sa: dict[str, str]
) -> None:
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/batch/v1", "/openapi/v3"):
        status, _ = await api.get(path, headers=sa)
        assert status == 200, path


async def test_role_binding_grants_only_in_its_namespace_and_only_named_verbs(
    api: Api, sa: dict[str, str]
) -> None:
    await role(
        api,
        "team-a",
        "read-cm",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
    )
    await role_binding(api, "team-a", "worker-read", "Role", "read-cm", [sa_subject()])
    status, body = await api.get("/api/v1/namespaces/team-a/configmaps", headers=sa)
    assert status == 200 and len(body["items"]) == 2
    status, _ = await api.get("/api/v1/namespaces/team-a/configmaps/settings", headers=sa)
    assert status == 200
    status, body = await api.get("/api/v1/namespaces/team-b/configmaps/settings", headers=sa)
    assert status == 403 and 'in the namespace "team-b"' in body["message"]
    status, body = await api.delete("/api/v1/namespaces/team-a/configmaps/settings", headers=sa)
    assert status == 403 and "cannot delete resource" in body["message"]
    status, body = await api.delete("/api/v1/namespaces/team-a/configmaps", headers=sa)
    assert status == 403 and "cannot deletecollection resource" in body["message"]


async def test_resource_names_restrict_get_but_never_grant_list_or_create(
    api: Api, sa: dict[str, str]
) -> None:
    rule = {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["settings"],
        "verbs": ["get", "list", "watch", "create", "update"],
    }
    await role(api, "team-a", "one-cm", [rule])
    await role_binding(api, "team-a", "worker-one", "Role", "one-cm", [sa_subject()])
    base = "/api/v1/namespaces/team-a/configmaps"
    assert (await api.get(f"{base}/settings", headers=sa))[0] == 200
    assert (await api.get(f"{base}/other", headers=sa))[0] == 403
    assert (await api.get(base, headers=sa))[0] == 403
    created = {"metadata": {"name": "settings2"}, "data": {}}
    status, body = await api.post(base, created, headers=sa)
    assert status == 403 and body["message"].startswith("configmaps is forbidden: ")
    # A list or watch narrowed to one name by a field selector is that name (RequestInfo).
    narrowed = {"fieldSelector": "metadata.name=settings"}
    status, body = await api.get(base, params=narrowed, headers=sa)
    assert status == 200 and [i["metadata"]["name"] for i in body["items"]] == ["settings"]
    narrowed = {"fieldSelector": "metadata.name=other"}
    assert (await api.get(base, params=narrowed, headers=sa))[0] == 403


async def test_cluster_role_via_role_binding_is_namespaced_via_cluster_binding_is_global(
    api: Api, sa: dict[str, str]
) -> None:
    await cluster_role(
        api,
        "cm-reader",
        [{"apiGroups": ["*"], "resources": ["configmaps", "namespaces"], "verbs": ["*"]}],
    )
    await role_binding(api, "team-b", "worker-b", "ClusterRole", "cm-reader", [sa_subject()])
    assert (await api.get("/api/v1/namespaces/team-b/configmaps", headers=sa))[0] == 200
    assert (await api.get("/api/v1/namespaces/team-a/configmaps", headers=sa))[0] == 403
    # A namespace's own object counts as inside it, as in Kubernetes.
    assert (await api.get("/api/v1/namespaces/team-b", headers=sa))[0] == 200
    status, body = await api.get("/api/v1/namespaces", headers=sa)
    assert status == 403 and body["message"].endswith("at the cluster scope")
    await cluster_role_binding(api, "worker-all", "cm-reader", [sa_subject()])
    assert (await api.get("/api/v1/namespaces/team-a/configmaps", headers=sa))[0] == 200
    assert (await api.get("/api/v1/namespaces", headers=sa))[0] == 200
    assert (await api.get("/api/v1/configmaps", headers=sa))[0] == 200


async def test_group_and_user_subjects(api: Api, sa: dict[str, str], cluster: DevCluster) -> None:
    await cluster_role(
        api, "list-cm", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    )
    group = {
        "kind": "Group",
        "name": "system:serviceaccounts:team-a",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    await role_binding(api, "team-b", "team-a-sas", "ClusterRole", "list-cm", [group])
    assert (await api.get("/api/v1/namespaces/team-b/configmaps", headers=sa))[0] == 200
    other = bearer(issue(cluster.token_key, "team-b", "worker"))
    assert (await api.get("/api/v1/namespaces/team-b/configmaps", headers=other))[0] == 403
    user = {
        "kind": "User",
        "name": "system:serviceaccount:team-b:worker",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    await role_binding(api, "team-b", "user-b", "ClusterRole", "list-cm", [user])
    assert (await api.get("/api/v1/namespaces/team-b/configmaps", headers=other))[0] == 200
    everyone = {
        "kind": "Group",
        "name": "system:authenticated",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    await cluster_role_binding(api, "all-list", "list-cm", [everyone])
    assert (await api.get("/api/v1/namespaces/team-a/configmaps", headers=other))[0] == 200


async def test_subresources_need_their_own_rules(api: Api, sa: dict[str, str]) -> None:
    await api.create_crd()
    await api.ok(
        "POST",
        "/apis/example.com/v1/namespaces/team-a/widgets",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 1},
        },
    )
    await role(
        api,
        "team-a",
        "widgets",
        [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "patch"]}],
    )
    await role_binding(api, "team-a", "worker-widgets", "Role", "widgets", [sa_subject()])
    path = "/apis/example.com/v1/namespaces/team-a/widgets/w"
    assert (await api.patch(path, {"metadata": {"labels": {"a": "b"}}}, headers=sa))[0] == 200
    status, body = await api.patch(f"{path}/status", {"status": {"phase": "x"}}, headers=sa)
    assert status == 403
    assert body["message"] == (
        f'widgets.example.com "w" is forbidden: User "{SA_USER}" cannot patch resource '
        '"widgets/status" in API group "example.com" in the namespace "team-a"'
    )
    await role(
        api,
        "team-a",
        "status",
        [{"apiGroups": ["example.com"], "resources": ["*/status"], "verbs": ["patch"]}],
    )
    await role_binding(api, "team-a", "worker-status", "Role", "status", [sa_subject()])
    assert (await api.patch(f"{path}/status", {"status": {"phase": "x"}}, headers=sa))[0] == 200


async def test_missing_role_is_named_in_the_reason(api: Api, sa: dict[str, str]) -> None:
    await role_binding(api, "team-a", "dangling", "Role", "gone", [sa_subject()])
    status, body = await api.get("/api/v1/namespaces/team-a/configmaps", headers=sa)
    assert status == 403
    assert body["message"].endswith(
        'in the namespace "team-a": RBAC: role.rbac.authorization.k8s.io "gone" not found'
    )


async def test_impersonation_headers(api: Api, sa: dict[str, str]) -> None:
    headers = {"Impersonate-User": SA_USER}
    status, body = await api.get("/api/v1/namespaces/team-a/configmaps", headers=headers)
    assert status == 403 and f'User "{SA_USER}" cannot list' in body["message"]
    await role(
        api,
        "team-a",
        "read-cm",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    )
    await role_binding(api, "team-a", "worker-read", "Role", "read-cm", [sa_subject()])
    assert (await api.get("/api/v1/namespaces/team-a/configmaps", headers=headers))[0] == 200
    # The group system:serviceaccounts:team-a comes with the impersonated service account.
    team_b = "/api/v1/namespaces/team-b/configmaps"
    assert (await api.get(team_b, headers=headers))[0] == 403
    group = {
        "kind": "Group",
        "name": "system:serviceaccounts:team-a",
        "apiGroup": "rbac.authorization.k8s.io",
    }
    await role(
        api,
        "team-b",
        "read-cm",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
    )
    await role_binding(api, "team-b", "sas", "Role", "read-cm", [group])
    assert (await api.get(team_b, headers=headers))[0] == 200
    # Impersonating a group replaces the service account's own groups.
    only_group = {**headers, "Impersonate-Group": "other"}
    assert (await api.get(team_b, headers=only_group))[0] == 403
    # A service account may not impersonate without the impersonate verb.
    status, body = await api.get(
        "/api/v1/namespaces/team-a/configmaps", headers={**sa, "Impersonate-User": "alice"}
    )
    assert status == 403
    assert body["message"] == (
        f'users "alice" is forbidden: User "{SA_USER}" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )


async def test_self_subject_access_review(api: Api, sa: dict[str, str]) -> None:
    await role(
        api,
        "team-a",
        "read-cm",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    )
    await role_binding(api, "team-a", "worker-read", "Role", "read-cm", [sa_subject()])
    path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    async def can(verb: str, ns: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {"verb": verb, "resource": "configmaps", "namespace": ns}
            },
        }
        status, body = await api.post(path, review, headers=sa)
        assert status == 201, body
        return bool(body["status"]["allowed"])

    assert await can("get", "team-a")
    assert not await can("delete", "team-a")
    assert not await can("get", "team-b")


async def test_anonymous_requests_when_not_admin(tmp_path: Any) -> None:
    async with DevCluster(workdir=tmp_path / "w") as running:
        running.server.anonymous_admin = False
        async with aiohttp.ClientSession() as session:
            api = Api(session, running.url)
            status, body = await api.get("/api/v1/namespaces")
            assert status == 403
            assert body["message"] == (
                'namespaces is forbidden: User "system:anonymous" cannot list resource '
                '"namespaces" in API group "" at the cluster scope'
            )
            assert (await api.get("/version"))[0] == 200
            assert (await api.get("/api"))[0] == 403


def test_kubectl_auth_can_i_as_a_service_account(
    thread_cluster: DevClusterThread, kubectl: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    manifest = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "canitest"}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "jobs", "namespace": "canitest"},
                "rules": [
                    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "jobs", "namespace": "canitest"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "jobs",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "canitest"}],
            },
        ],
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(manifest["items"]))
    who = "--as=system:serviceaccount:canitest:runner"
    yes = kubectl("auth", "can-i", "create", "jobs", "-n", "canitest", who, check=False)
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
    no = kubectl("auth", "can-i", "delete", "jobs", "-n", "canitest", who, check=False)
    assert (no.returncode, no.stdout.strip()) == (1, "no"), no.stderr
    whoami = kubectl("auth", "whoami", who, "-o", "json")
    user_info = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user_info == {
        "username": "system:serviceaccount:canitest:runner",
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:canitest",
            "system:authenticated",
        ],
    }
    listed = kubectl("auth", "can-i", "--list", "-n", "canitest", who)
    assert any(
        line.split()[:1] == ["jobs.batch"] and "[create get]" in line
        for line in listed.stdout.splitlines()
    ), listed.stdout
    refused = kubectl("get", "configmaps", "-n", "canitest", who, check=False)
    assert refused.returncode != 0
    assert (
        'configmaps is forbidden: User "system:serviceaccount:canitest:runner" cannot list '
        'resource "configmaps" in API group "" in the namespace "canitest"' in refused.stderr
    )


async def test_owner_reference_permission_enforcement(
    api: Api, sa: dict[str, str], cluster: DevCluster
) -> None:
    cluster.server.enforce_owner_references = True
    await api.create_crd()
    owner = await api.ok(
        "POST",
        "/apis/example.com/v1/namespaces/team-a/widgets",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "owner"},
            "spec": {"size": 1},
        },
    )
    ref = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await role(
        api,
        "team-a",
        "cm",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}],
    )
    await role_binding(api, "team-a", "worker-cm", "Role", "cm", [sa_subject()])
    base = "/api/v1/namespaces/team-a/configmaps"

    def child(name: str, **extra: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [{**ref, **extra}]}}

    status, body = await api.post(base, child("c1"), headers=sa)
    assert status == 403
    assert body["message"] == (
        'configmaps "c1" is forbidden: cannot set an ownerRef on a resource you can\'t '
        "delete: , <nil>"
    )
    await role(
        api,
        "team-a",
        "cm-delete",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}],
    )
    await role_binding(api, "team-a", "worker-cm-delete", "Role", "cm-delete", [sa_subject()])
    assert (await api.post(base, child("c1"), headers=sa))[0] == 201
    status, body = await api.post(base, child("c2", blockOwnerDeletion=True), headers=sa)
    assert status == 403
    assert body["message"] == (
        'configmaps "c2" is forbidden: cannot set blockOwnerDeletion if an ownerReference '
        "refers to a resource you can't set finalizers on: , <nil>"
    )
    await role(
        api,
        "team-a",
        "finalizers",
        [{"apiGroups": ["example.com"], "resources": ["widgets/finalizers"], "verbs": ["update"]}],
    )
    await role_binding(api, "team-a", "worker-fin", "Role", "finalizers", [sa_subject()])
    assert (await api.post(base, child("c2", blockOwnerDeletion=True), headers=sa))[0] == 201
    # The admin is never checked.
    assert (await api.post(base, child("c3", blockOwnerDeletion=True)))[0] == 201


async def test_a_missing_resource_is_403_before_404(api: Api, sa: dict[str, str]) -> None:
    path = "/apis/example.com/v1/namespaces/team-a/widgets"
    status, body = await api.get(path, headers=sa)
    assert status == 403
    assert body["message"] == (
        f'widgets.example.com is forbidden: User "{SA_USER}" cannot list resource "widgets" '
        'in API group "example.com" in the namespace "team-a"'
    )
    await role(
        api, "team-a", "w", [{"apiGroups": ["example.com"], "resources": ["*"], "verbs": ["list"]}]
    )
    await role_binding(api, "team-a", "worker-w", "Role", "w", [sa_subject()])
    assert (await api.get(path, headers=sa))[0] == 404
    assert (await api.get(path))[0] == 404


async def test_self_subject_rules_review_and_kubectl_can_i_list(
    api: Api, sa: dict[str, str]
) -> None:
    await role(
        api,
        "team-a",
        "read-cm",
        [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get"],
                "resourceNames": ["a"],
            }
        ],
    )
    await role_binding(api, "team-a", "worker-read", "Role", "read-cm", [sa_subject()])
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": "team-a"},
    }
    path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
    status, body = await api.post(path, review, headers=sa)
    assert status == 201, body
    rules = body["status"]["resourceRules"]
    assert {
        "verbs": ["get"],
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["a"],
    } in rules
    assert body["status"]["incomplete"] is False
    status, body = await api.post(path, {**review, "spec": {"namespace": "team-b"}}, headers=sa)
    assert all(rule.get("resources") != ["configmaps"] for rule in body["status"]["resourceRules"])


@pytest.mark.parametrize(
    ("rule", "request_", "allowed"),
    [
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            ("get", "", "pods", ""),
            True,
        ),
        (
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
            ("get", "", "pods", "log"),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ("get", "", "pods", "log"),
            True,
        ),
        (
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            ("patch", "batch", "jobs", "status"),
            True,
        ),
        (
            {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
            ("update", "apps", "deployments", "scale"),
            True,
        ),
        (
            {"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["update"]},
            ("update", "apps", "deployments", ""),
            False,
        ),
        (
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
            ("get", "", "jobs", ""),
            False,
        ),
        (
            {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            ("create", "", "serviceaccounts", "token"),
            True,
        ),
    ],
)
def test_rule_matching(
    rule: dict[str, Any], request_: tuple[str, str, str, str], allowed: bool
) -> None:
    verb, group, resource, sub = request_
    user = _rbac.service_account_user("ns", "sa")
    attrs = _rbac.Attributes(
        user, verb, group=group, resource=resource, subresource=sub, namespace="ns"
    )
    assert _rbac.rule_allows(attrs, rule) is allowed


def test_non_resource_rules() -> None:
    user = _rbac.service_account_user("ns", "sa")
    metrics = _rbac.Attributes(user, "get", resource_request=False, path="/metrics")
    assert _rbac.rule_allows(metrics, {"nonResourceURLs": ["/metrics"], "verbs": ["get"]})
    assert _rbac.rule_allows(metrics, {"nonResourceURLs": ["/met*"], "verbs": ["*"]})
    assert not _rbac.rule_allows(metrics, {"nonResourceURLs": ["/metrics"], "verbs": ["post"]})
    assert _rbac.forbidden(metrics).status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'forbidden: User "system:serviceaccount:ns:sa" cannot get path "/metrics"',
        "reason": "Forbidden",
        "code": 403,
    }


async def test_unserved_paths_are_403_for_service_accounts(api: Api, sa: dict[str, str]) -> None:
    status, body = await api.get("/metrics", headers=sa)
    assert status == 403
    assert body["message"] == f'forbidden: User "{SA_USER}" cannot get path "/metrics"'
    assert (await api.get("/metrics"))[0] == 404
    await cluster_role(api, "metrics", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    await cluster_role_binding(api, "metrics", "metrics", [sa_subject()])
    assert (await api.get("/metrics", headers=sa))[0] == 404


SA_GROUPS = '["system:serviceaccounts" "system:serviceaccounts:team-a" "system:authenticated"]'


async def test_roles_and_bindings_cannot_grant_what_their_author_lacks(
    api: Api, sa: dict[str, str]
) -> None:
    rbac_rule = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["create"],
    }
    await role(api, "team-a", "rbac-writer", [rbac_rule])
    await role_binding(api, "team-a", "worker-rbac", "Role", "rbac-writer", [sa_subject()])
    wanted = {
        "metadata": {"name": "readers"},
        "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
        ],
    }
    path = f"{RBAC}/namespaces/team-a/roles"
    status, body = await api.post(path, wanted, headers=sa)
    assert status == 403
    assert body["message"] == (
        f'roles.rbac.authorization.k8s.io "readers" is forbidden: user "{SA_USER}" '
        f"(groups={SA_GROUPS}) is attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}\n'
        '{APIGroups:["batch"], Resources:["jobs/status"], Verbs:["get"]}'
    )
    # Holding the permissions (here: configmaps via a ClusterRole, jobs via */status) is enough.
    await cluster_role(
        api,
        "holder",
        [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
            {"apiGroups": ["batch"], "resources": ["*/status"], "verbs": ["get"]},
        ],
    )
    await role_binding(api, "team-a", "worker-holder", "ClusterRole", "holder", [sa_subject()])
    assert (await api.post(path, wanted, headers=sa))[0] == 201
    # A binding may only grant a role whose rules its author holds, unless it may bind it.
    await cluster_role(
        api, "secrets", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    )
    binding = {
        "metadata": {"name": "give-secrets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "secrets",
        },
        "subjects": [sa_subject("team-a", "other")],
    }
    status, body = await api.post(f"{RBAC}/namespaces/team-a/rolebindings", binding, headers=sa)
    assert status == 403
    assert body["message"].endswith(
        'not currently held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    bind = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "resourceNames": ["secrets"],
        "verbs": ["bind"],
    }
    await role(api, "team-a", "binder", [bind])
    await role_binding(api, "team-a", "worker-binder", "Role", "binder", [sa_subject()])
    status, _ = await api.post(f"{RBAC}/namespaces/team-a/rolebindings", binding, headers=sa)
    assert status == 201
    # escalate lifts the check for roles.
    wild = {
        "metadata": {"name": "wild"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    assert (await api.post(path, wild, headers=sa))[0] == 403
    escalate = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles"],
        "verbs": ["escalate"],
    }
    await role(api, "team-a", "escalator", [escalate])
    await role_binding(api, "team-a", "worker-escalator", "Role", "escalator", [sa_subject()])
    assert (await api.post(path, wild, headers=sa))[0] == 201


async def test_a_bindings_role_ref_cannot_change(api: Api, sa: dict[str, str]) -> None:
    await cluster_role(api, "one", [])
    await role_binding(api, "team-a", "b", "ClusterRole", "one", [sa_subject()])
    path = f"{RBAC}/namespaces/team-a/rolebindings/b"
    status, body = await api.patch(path, {"roleRef": {"name": "two"}})
    assert status == 422
    assert body["message"] == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef: Invalid value: '
        'rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"two"}: '
        "cannot change roleRef"
    )
    assert (await api.patch(path, {"subjects": []}))[0] == 200


async def test_binding_changes_take_effect_at_once_among_many_bindings(
    api: Api, sa: dict[str, str]
) -> None:
    """Bindings are indexed by subject: edits and deletes count from the next request."""
    read = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
    await role(api, "team-a", "read-cm", read)
    for index in range(50):  # other subjects' bindings around the one that matters
        await role_binding(
            api, "team-a", f"other-{index}", "Role", "read-cm", [sa_subject(name=f"w{index}")]
        )
    path = "/api/v1/namespaces/team-a/configmaps/settings"
    assert (await api.get(path, headers=sa))[0] == 403
    await role_binding(api, "team-a", "worker-read", "Role", "read-cm", [sa_subject()])
    assert (await api.get(path, headers=sa))[0] == 200
    binding = f"{RBAC}/namespaces/team-a/rolebindings/worker-read"
    # The subject replaced by another: no longer granted.
    await api.ok("PATCH", binding, {"subjects": [sa_subject(name="someone-else")]},
                 content_type="application/merge-patch+json")  # fmt: skip
    assert (await api.get(path, headers=sa))[0] == 403
    # As a group subject (every service account of the namespace), then deleted.
    group = {"kind": "Group", "name": "system:serviceaccounts:team-a"}
    await api.ok("PATCH", binding, {"subjects": [group]},
                 content_type="application/merge-patch+json")  # fmt: skip
    assert (await api.get(path, headers=sa))[0] == 200
    await api.ok("DELETE", binding)
    status, body = await api.get(path, headers=sa)
    assert status == 403 and "cannot get resource" in body["message"]
    # A ClusterRoleBinding grants in every namespace.
    await cluster_role(api, "read-all-cm", read)
    assert (await api.get("/api/v1/namespaces/team-b/configmaps/settings", headers=sa))[0] == 403
    await cluster_role_binding(api, "everywhere", "read-all-cm", [sa_subject()])
    assert (await api.get("/api/v1/namespaces/team-b/configmaps/settings", headers=sa))[0] == 200
