"""The default judge's settings and who may use it: gateway, token, namespace selector.

Pure: the operator's settings parsed from the environment the chart sets, and the decisions
:func:`namespace_refusal` and :func:`default_judge_plan` make, with no API server.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kyai.api import GatewayToken, JudgeSpec, SecretEnv
from kyai.constants import JUDGE_GATEWAY_AUDIENCE
from kyai.controllers import _conditions as c
from kyai.controllers._references import default_judge_plan, namespace_refusal
from kyai.controllers.runkind import Invalid, Waiting
from kyai.gateway import DEFAULT_AUDIENCE, MIN_TOKEN_EXPIRATION_SECONDS
from kyai.label_selector import LabelSelector
from kyai.settings import OperatorSettings

GATEWAY = "http://kyai-judge-gateway.kyai-system.svc:8080/v1"


def settings(**env: str) -> OperatorSettings:
    return OperatorSettings.from_env({f"KYAI_{key.upper()}": value for key, value in env.items()})


# -- settings ---------------------------------------------------------------------------------


def test_gateway_settings_from_the_environment() -> None:
    parsed = settings(
        default_judge_model="big",
        default_judge_gateway=GATEWAY + "/",
        default_judge_gateway_audience="aud-x",
        default_judge_gateway_token_seconds="900",
        default_judge_namespace_selector='{"matchLabels": {"team": "a"}, "matchExpressions": '
        '[{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}',
    )
    assert parsed.default_judge_gateway == GATEWAY  # the trailing slash dropped
    assert parsed.default_judge_gateway_audience == "aud-x"
    assert parsed.default_judge_gateway_token_seconds == 900
    selector = parsed.default_judge_namespace_selector
    assert selector.describe() == "team=a,tier in (gold,silver)"


def test_gateway_settings_defaults_agree_with_the_gateway() -> None:
    parsed = OperatorSettings()
    assert parsed.default_judge_gateway is None
    assert parsed.default_judge_gateway_audience == DEFAULT_AUDIENCE == JUDGE_GATEWAY_AUDIENCE
    assert parsed.default_judge_gateway_token_seconds == MIN_TOKEN_EXPIRATION_SECONDS
    assert parsed.default_judge_namespace_selector.empty
    assert settings(default_judge_namespace_selector="").default_judge_namespace_selector.empty


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"default_judge_gateway_token_seconds": "599"}, "default_judge_gateway_token_seconds"),
        ({"default_judge_gateway": "judge-gateway:8080"}, "is not an http:// or https:// URL"),
        ({"default_judge_gateway": GATEWAY}, "without default_judge_model"),
        ({"default_judge_namespace_selector": "{matchLabels"}, "not JSON"),
        (
            {"default_judge_namespace_selector": '{"matchLabel": {"a": "b"}}'},
            "default_judge_namespace_selector.matchLabel",
        ),
        (
            {"default_judge_namespace_selector": '{"matchExpressions": [{"key": "a", '
             '"operator": "In"}]}'},
            "In needs values",
        ),
    ],
)  # fmt: skip
def test_bad_gateway_settings_are_refused_naming_the_setting(
    env: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        settings(**env)
    assert complaint in str(caught.value)


# -- the namespace selector --------------------------------------------------------------------

OPT_IN = LabelSelector.model_validate(
    {
        "matchLabels": {"kyai.io/default-judge": "enabled"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["sandbox"]}],
    }
)


@pytest.mark.parametrize(
    ("labels", "allowed"),
    [
        ({"kyai.io/default-judge": "enabled"}, True),
        ({"kyai.io/default-judge": "enabled", "tier": "prod"}, True),
        ({"kyai.io/default-judge": "enabled", "tier": "sandbox"}, False),
        ({"kyai.io/default-judge": "disabled"}, False),
        ({}, False),
        (None, False),  # the namespace could not be found
    ],
)
def test_the_selector_decides_which_namespaces_may_use_the_default_judge(
    labels: dict[str, str] | None, allowed: bool
) -> None:
    refusal = namespace_refusal(OPT_IN, "team-a", labels)
    if allowed:
        assert refusal is None
        return
    assert isinstance(refusal, Waiting)
    assert refusal.reason == c.DEFAULT_JUDGE_NOT_ALLOWED
    assert "namespace team-a" in refusal.message
    assert "defaultJudge.namespaceSelector" in refusal.message
    assert "kyai.io/default-judge=enabled,tier notin (sandbox)" in refusal.message


def test_an_empty_selector_allows_every_namespace() -> None:
    assert namespace_refusal(LabelSelector(), "anywhere", {}) is None
    assert namespace_refusal(LabelSelector(), "anywhere", None) is None


def test_the_refusals_are_stalled_at_once_and_end_when_the_cause_goes() -> None:
    for reason in (c.DEFAULT_JUDGE_NOT_ALLOWED, c.DEFAULT_JUDGE_NEEDS_GATEWAY):
        reconciling, stalled = c.kstatus_changes("EvaluationRun", "Pending", reason, "m")
        assert (reconciling.status, stalled.status) == (False, True)
        assert stalled.reason == reason
    # Labelled: the run waits for ordinary things again, no longer Stalled.
    _, stalled = c.kstatus_changes("EvaluationRun", "Pending", c.WORKLOAD_NOT_READY, "m")
    assert stalled.status is False


# -- routing ----------------------------------------------------------------------------------


def plan_for(namespace: str, judge: JudgeSpec | None = None, **fields: Any) -> Any:
    return default_judge_plan(OperatorSettings(**fields), namespace, judge or JudgeSpec())


def test_the_gateway_wins_over_a_key_secret() -> None:
    llm = plan_for(
        "team-a",
        JudgeSpec(prompt="Be strict."),
        default_judge_endpoint="https://judge.example/v1",
        default_judge_model="big",
        default_judge_gateway=GATEWAY,
        default_judge_secret_namespace="kyai-system",
        default_judge_secret_name="judge-key",
    )
    assert (llm.endpoint, llm.model, llm.secret, llm.prompt) == (GATEWAY, "big", None, "Be strict.")
    assert llm.gateway_token == GatewayToken(
        audience=JUDGE_GATEWAY_AUDIENCE, expiration_seconds=MIN_TOKEN_EXPIRATION_SECONDS
    )


def test_without_a_gateway_only_the_runs_own_namespace_reads_the_key() -> None:
    fields = {
        "default_judge_endpoint": "https://judge.example/v1",
        "default_judge_model": "big",
        "default_judge_secret_namespace": "kyai-system",
        "default_judge_secret_name": "judge-key",
    }
    own = plan_for("kyai-system", **fields)
    assert own.secret == SecretEnv(env="KYAI_JUDGE_API_KEY", secret="judge-key", key="api-key")
    with pytest.raises(Waiting) as caught:
        plan_for("team-a", **fields)
    assert caught.value.reason == c.DEFAULT_JUDGE_NEEDS_GATEWAY
    # No key at all: the default judge is called without one, from any namespace.
    keyless = plan_for("team-a", default_judge_endpoint="https://j/v1", default_judge_model="m")
    assert keyless.secret is None and keyless.gateway_token is None


def test_no_default_judge_is_invalid() -> None:
    with pytest.raises(Invalid) as caught:
        plan_for("team-a", default_judge_endpoint="https://judge.example/v1")
    assert caught.value.reason == c.JUDGE_NOT_CONFIGURED
