"""The chart as installed in a real cluster (``make e2e``): the operator's pod, its RBAC.

Opt-in: marked ``e2e``, run with ``--with-e2e --kubeconfig PATH``; the system tests in
tests/system then exercise the same installation end to end.
"""

from __future__ import annotations

import pytest

from e2e.conftest import Release

pytestmark = pytest.mark.e2e


def test_operator_runs_the_chart_image_restricted(release: Release) -> None:
    deployment = release.one("deployments")
    status = deployment.get("status") or {}
    assert status.get("availableReplicas") == 1, status
    pod = release.one("pods")
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["kyai", "operator"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert pod["status"]["phase"] == "Running"
    (state,) = pod["status"]["containerStatuses"]
    assert state["ready"] is True and state["image"].endswith(container["image"].split("/")[-1])


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("create", "jobs.batch", True),
        ("create", "deployments.apps", True),
        ("patch", "evaluationruns.kyai.io/status", True),
        ("patch", "evaluationsweeps.kyai.io/status", True),
        ("watch", "evaluationsweeps.kyai.io", True),
        ("create", "evaluationsweeps.kyai.io", False),
        ("create", "networkpolicies.networking.k8s.io", True),
        ("create", "events", True),
        ("delete", "nodes", False),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", False),
    ],
)
def test_service_account_may_do_what_the_operator_does_and_no_more(
    release: Release, verb: str, resource: str, allowed: bool
) -> None:
    account = release.one("deployments")["spec"]["template"]["spec"]["serviceAccountName"]
    subject = f"system:serviceaccount:{release.namespace}:{account}"
    resource_name, _, subresource = resource.partition("/")
    args = ["auth", "can-i", verb, resource_name, "--as", subject, "-n", "default"]
    if subresource:
        args.append(f"--subresource={subresource}")
    answer = release.kubectl(*args, check=False).stdout.strip()
    assert answer == ("yes" if allowed else "no"), (verb, resource, answer)
