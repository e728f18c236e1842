"""The gateway's settings: environment, flags, validation messages, per-namespace limits."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from kyai.gateway import (
    DEFAULT_AUDIENCE,
    GatewaySettings,
    describe_errors,
    env_variable,
    normalise_upstream,
)
from kyai.gateway.cli import register
from kyai.label_selector import LabelSelector

BASE = {"KYAI_GATEWAY_UPSTREAM_URL": "https://judge.example.com", "KYAI_GATEWAY_MODEL": "m"}


def test_defaults_and_the_environment() -> None:
    settings = GatewaySettings.from_env(BASE)
    assert settings.upstream_url == "https://judge.example.com/v1"
    assert settings.audience == DEFAULT_AUDIENCE
    assert (settings.port, settings.metrics_port) == (8080, 9090)
    assert settings.worker_components == ("judge",)
    assert settings.namespace_selector.empty and settings.api_key_file is None
    env = {
        **BASE,
        "KYAI_GATEWAY_API_KEY_FILE": "/etc/kyai/judge-key/api-key",
        "KYAI_GATEWAY_CONCURRENCY": "8",
        "KYAI_GATEWAY_REQUESTS_PER_SECOND": "2.5",
        "KYAI_GATEWAY_WORKER_COMPONENTS": "judge, generate",
        "KYAI_GATEWAY_NAMESPACE_SELECTOR": '{"matchExpressions": [{"key": "tier", '
        '"operator": "In", "values": ["gold"]}]}',
        "KYAI_GATEWAY_NAMESPACE_LIMITS": '{"team-a": {"concurrency": 64, '
        '"queueTimeoutSeconds": 1}}',
        "KYAI_UNRELATED": "x",
    }
    settings = GatewaySettings.from_env(env, port=9000, audience=None)
    assert settings.port == 9000 and settings.audience == DEFAULT_AUDIENCE
    assert settings.worker_components == ("judge", "generate")
    assert settings.namespace_selector.matches({"tier": "gold"})
    assert not settings.namespace_selector.matches({"tier": "bronze"})
    team_a, other = settings.limits_for("team-a"), settings.limits_for("team-b")
    assert (team_a.concurrency, team_a.queue_timeout_seconds) == (64, 1.0)
    assert (team_a.requests_per_second, other.concurrency) == (2.5, 8)


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://judge:8000", "http://judge:8000/v1"),
        ("http://judge:8000/v1/", "http://judge:8000/v1"),
        ("https://api.example.com/openai/v1/chat/completions", "https://api.example.com/openai/v1"),
    ],
)
def test_upstream_urls_are_normalised(url: str, base: str) -> None:
    assert normalise_upstream(url) == base


LIMITS = "KYAI_GATEWAY_NAMESPACE_LIMITS"
SELECTOR = "KYAI_GATEWAY_NAMESPACE_SELECTOR"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"KYAI_GATEWAY_MODEL": "m"}, "upstream_url (KYAI_GATEWAY_UPSTREAM_URL): required"),
        ({**BASE, "KYAI_GATEWAY_UPSTREAM_URL": "judge:8000"}, "KYAI_GATEWAY_UPSTREAM_URL"),
        ({**BASE, "KYAI_GATEWAY_MODEL": ""}, "model (KYAI_GATEWAY_MODEL)"),
        ({**BASE, "KYAI_GATEWAY_CONCURRENCY": "0"}, "concurrency (KYAI_GATEWAY_CONCURRENCY)"),
        ({**BASE, "KYAI_GATEWAY_BIND_ADDRESS": "localhost"}, "is not an IP address"),
        ({**BASE, LIMITS: "{"}, f"namespace_limits ({LIMITS}): Value error, not JSON"),
        ({**BASE, LIMITS: '{"a": {"burst": 0}}'}, "namespace_limits.a.burst"),
        ({**BASE, LIMITS: '{"a": {"rps": 1}}'}, "namespace_limits.a.rps"),
        ({**BASE, SELECTOR: '{"matchExpressions": [{"key": "k", "operator": "In"}]}'},
         "In needs values"),
        ({**BASE, "KYAI_GATEWAY_WORKER_COMPONENTS": " , "}, "at least one worker component"),
    ],
)  # fmt: skip
def test_bad_settings_name_their_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ValidationError) as error:
        GatewaySettings.from_env(env)
    assert named in describe_errors(error.value)


def test_every_field_has_a_variable_and_a_description() -> None:
    for name, field in GatewaySettings.model_fields.items():
        assert env_variable(name) == f"KYAI_GATEWAY_{name.upper()}"
        assert field.description and len(field.description) > 20, name


def test_flags_reach_the_settings() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["judge-gateway", "--upstream-url", "http://j:1", "--model", "m", "--port", "1234",
         "--metrics-port", "0", "--api-key-file", "/k", "--kubeconfig", "/kc"]
    )  # fmt: skip
    from kyai.gateway.cli import _settings

    settings = _settings(args)
    assert (settings.upstream_url, settings.port, settings.metrics_port) == (
        "http://j:1/v1",
        1234,
        0,
    )
    assert (settings.api_key_file, settings.kubeconfig) == ("/k", "/kc")
    assert args.handler.__name__ == "run"


def test_the_selector_describes_itself_as_kubectl_does() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["x", "y"]},
                {"key": "ok", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist"},
            ],
        }
    )
    assert selector.describe() == "team=a,tier notin (x,y),ok,!legacy"
    assert selector.matches({"team": "a", "ok": ""})
    assert selector.matches({"team": "a", "ok": "1", "tier": "z"})
    for labels in ({"team": "a"}, {"team": "b", "ok": ""}, {"team": "a", "ok": "", "tier": "x"},
                   {"team": "a", "ok": "", "legacy": "1"}):  # fmt: skip
        assert not selector.matches(labels), labels
    assert LabelSelector().describe() == "(everything)" and LabelSelector().matches({})
    with pytest.raises(ValidationError):
        LabelSelector.model_validate({"matchExpressions": [{"key": "k", "operator": "Exists",
                                                            "values": ["v"]}]})  # fmt: skip
    with pytest.raises(ValidationError):
        LabelSelector.model_validate({"matchLabel": {"a": "b"}})
