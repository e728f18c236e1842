"""``kyai operator --leader-elect`` and its settings: flags, environment, refused timings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kyai.cli import build_parser
from kyai.controllers.leader import default_identity, default_namespace
from kyai.settings import OperatorSettings


def test_leader_election_is_off_by_default_with_controller_runtimes_timings() -> None:
    settings = OperatorSettings.from_env({})
    assert settings.leader_elect is False
    assert settings.leader_election_id == "kyai-operator"
    timings = (
        settings.leader_election_lease_seconds,
        settings.leader_election_renew_deadline_seconds,
        settings.leader_election_retry_seconds,
    )
    assert timings == (15.0, 10.0, 2.0)


def test_flags_reach_the_settings() -> None:
    args = build_parser(["operator"]).parse_args(
        ["operator", "--leader-elect", "--leader-election-namespace", "ops",
         "--leader-election-id", "lease", "--leader-election-identity", "me",
         "--leader-election-lease-seconds", "30", "--leader-election-renew-deadline-seconds",
         "20", "--leader-election-retry-seconds", "4"]
    )  # fmt: skip
    assert args.leader_elect is True
    assert build_parser(["operator"]).parse_args(["operator"]).leader_elect is None  # env's
    settings = OperatorSettings.from_env(
        {"KYAI_LEADER_ELECT": "false"},
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        leader_election_id=args.leader_election_id,
        leader_election_identity=args.leader_election_identity,
        leader_election_lease_seconds=args.leader_election_lease_seconds,
        leader_election_renew_deadline_seconds=args.leader_election_renew_deadline_seconds,
        leader_election_retry_seconds=args.leader_election_retry_seconds,
    )
    assert settings.leader_elect is True  # the flag wins over the environment
    assert (settings.leader_election_namespace, settings.leader_election_id) == ("ops", "lease")
    assert settings.leader_election_identity == "me"
    assert settings.leader_election_lease_seconds == 30


@pytest.mark.parametrize(
    "environ",
    [
        {"KYAI_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "15"},
        {"KYAI_LEADER_ELECTION_RETRY_SECONDS": "10"},
    ],
)
def test_timings_that_let_two_replicas_lead_are_refused(environ: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="leader_election_renew_deadline_seconds"):
        OperatorSettings.from_env(environ)


def test_defaults_name_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "kyai-operator-abc")
    monkeypatch.setenv("POD_NAMESPACE", "kyai-system")
    assert default_identity() == "kyai-operator-abc"
    assert default_namespace() == "kyai-system"
    monkeypatch.delenv("POD_NAME")
    first, second = default_identity(), default_identity()
    assert first != second and first.rsplit("_", 1)[0] == second.rsplit("_", 1)[0]
