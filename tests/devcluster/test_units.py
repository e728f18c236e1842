"""Pure helpers: selectors, patches, JSONPath, durations, mount rewriting."""

from __future__ import annotations

import pytest

from kyai_devcluster._errors import StatusError
from kyai_devcluster._kubelet import expand_references, rewrite_mounts
from kyai_devcluster._patch import merge_patch, strategic_merge_patch
from kyai_devcluster._selectors import (
    parse_field_selector,
    parse_label_selector,
    selector_from_object,
)
from kyai_devcluster._tables import human_duration, jsonpath


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a=1", {"a": "2"}, False),
        ("a!=1", {}, True),
        ("a in (1, 2),b", {"a": "2", "b": ""}, True),
        ("a notin (1,2)", {"a": "3"}, True),
        ("a notin (1,2)", {"a": "1"}, False),
        ("!a", {"b": "1"}, True),
        ("example.com/key=v", {"example.com/key": "v"}, True),
        ("", {"x": "y"}, True),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize("selector", ["a in 1", "=x", "a==b==c", "a in (b", "a b"])
def test_bad_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(StatusError) as caught:
        parse_label_selector(selector)
    assert caught.value.code == 400


def test_label_selector_objects() -> None:
    selector = selector_from_object(
        {
            "matchLabels": {"app": "x"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.matches({"app": "x", "tier": "a"})
    assert not selector.matches({"app": "x", "tier": "c"})
    assert not selector.matches({"app": "x", "tier": "a", "legacy": ""})
    assert not selector_from_object(None).matches({})


def test_field_selector_escapes() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b,metadata.namespace!=x")
    assert selector.matches({"metadata": {"name": "a,b", "namespace": "y"}})
    assert not selector.matches({"metadata": {"name": "a,b", "namespace": "x"}})


def test_merge_patch_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": None}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {}}
    assert target["c"] == {"d": "e", "f": "g"}


def test_strategic_merge_directives() -> None:
    target = {
        "metadata": {"finalizers": ["a"]},
        "spec": {
            "containers": [{"name": "x", "args": ["1"]}, {"name": "y"}],
            "template": {"k": "v", "drop": 1},
        },
    }
    patch = {
        "metadata": {"finalizers": ["b", "a"]},
        "$setElementOrder/containers": [{"name": "y"}, {"name": "x"}],
        "spec": {
            "$setElementOrder/containers": [{"name": "y"}, {"name": "x"}],
            "containers": [{"name": "x", "args": ["2"]}],
            "template": {"$patch": "replace", "only": True},
            "$deleteFromPrimitiveList/list": [1],
        },
    }
    result = strategic_merge_patch(target, patch, kind="Pod")
    assert result["metadata"]["finalizers"] == ["a", "b"]
    assert result["spec"]["containers"] == [{"name": "y"}, {"name": "x", "args": ["2"]}]
    assert result["spec"]["template"] == {"only": True}


def test_jsonpath_subset() -> None:
    obj = {
        "metadata": {"labels": {"app.kubernetes.io/name": "x"}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Done", "status": "False"}]
        },
        "spec": {"items": [{"n": 1}, {"n": 2}]},
    }
    assert jsonpath(obj, '.status.conditions[?(@.type=="Ready")].status') == ["True"]
    assert jsonpath(obj, ".spec.items[*].n") == [1, 2]
    assert jsonpath(obj, ".spec.items[-1].n") == [2]
    assert jsonpath(obj, ".metadata.labels['app.kubernetes.io/name']") == ["x"]
    assert jsonpath(obj, "{.spec.missing}") == []


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5, "5s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (10 * 3600, "10h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (-5, "<invalid>"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_mount_rewriting_and_references() -> None:
    mounts = [("/data/sub", "/w/b"), ("/data", "/w/a")]
    assert rewrite_mounts("--out=/data/x.json", mounts) == "--out=/w/a/x.json"
    assert rewrite_mounts("/data/sub/y", mounts) == "/w/b/y"
    assert rewrite_mounts("/database /data", mounts) == "/database /w/a"
    assert expand_references("$(A)-$$(A)-$(B)", {"A": "1"}) == "1-$(A)-$(B)"


def test_rewrite_mounts_is_one_pass() -> None:
    from kyai_devcluster._kubelet import rewrite_mounts

    mounts = [
        ("/etc/kyai/snapshot", "/tmp/work/pod/volumes/snapshot"),
        ("/tmp", "/tmp/work/pod/tmp"),
    ]
    assert rewrite_mounts("--snapshot /etc/kyai/snapshot --out /tmp/x", mounts) == (
        "--snapshot /tmp/work/pod/volumes/snapshot --out /tmp/work/pod/tmp/x"
    )
    assert rewrite_mounts("/tmpfoo /tmp", mounts) == "/tmpfoo /tmp/work/pod/tmp"


def test_a_pods_kubeconfig_is_the_documents_yaml_whatever_its_token() -> None:
    import yaml

    from kyai_devcluster._cluster import _kubeconfig_text, kubeconfig
    from kyai_devcluster._tokens import ADMIN_TOKEN, issue, new_signing_key

    url = "http://127.0.0.1:6443"
    key = new_signing_key()
    for namespace, token in (("team-a", issue(key, "team-a", "worker")),
                             ("team-a", issue(key, "team-a", "other")),
                             ("default", ADMIN_TOKEN), ("default", ""),
                             ("x", "needs: quoting")):  # fmt: skip
        text = _kubeconfig_text(url, namespace, token)
        assert text == yaml.safe_dump(kubeconfig(url, namespace=namespace, token=token),
                                      sort_keys=False)  # fmt: skip
        assert yaml.safe_load(text)["users"][0]["user"] == ({"token": token} if token else {})
