"""Failures say why, end to end: a judge's trouble reaches the run and an Event at once.

The operator checks a run's judge before it makes the generation Job (as ``kyai run`` does:
reachable, the model served, the key taken); a judge that fails ends the run with the check's
reason and its words, in the Failed condition's message and a Warning Event, before the
candidate is asked anything. The judge's key is in none of them, nor in the operator's log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kyai_testing import LLMDouble, ModelSpec, Rule, substring_judge
from system.helpers import (
    Kubectl,
    Operator,
    condition,
    events_of,
    finished,
    free_port,
    keyed_judge,
    secret,
)
from system.test_operator import run, snapshot, workload

#: The key the run's Secret holds: the judge refuses it.
CANARY_KEY = "sk-canary-7f3a9c-wrong"


@pytest.fixture(scope="module")
def keyed() -> Iterator[LLMDouble]:
    """A judge that accepts only another key than the run's: every request gets a 401."""
    double = LLMDouble(
        models=[ModelSpec("judge", max_model_len=8192)],
        rules=[Rule(model="judge", content=substring_judge)],
        api_key="sk-the-right-one",
    )
    with double.start_in_thread() as running:
        yield running


def failed_run(
    kubectl: Kubectl, operator: Operator, name: str, namespace: str, reason: str
) -> tuple[dict[str, Any], str, list[dict[str, Any]]]:
    """The finished run (Failed with ``reason``), its Ready condition's message and the run's
    Events of that reason."""
    done = finished(kubectl, name, namespace, timeout=120)
    assert done["status"]["phase"] == "Failed", (done["status"], operator.logs())
    ready = condition(done, "Ready")
    assert ready["reason"] == reason, ready
    events = events_of(kubectl, name, namespace, reason)
    return done, str(ready["message"]), events


def before_generation(
    kubectl: Kubectl,
    done: dict[str, Any],
    message: str,
    namespace: str,
    asked: int,
    double: LLMDouble,
) -> None:
    """The operator found the judge's trouble before the generation Job was made.

    No Job of the run exists, and the candidate (``double``) got no chat request since
    ``asked``.
    """
    assert message.endswith(
        "(checked before the generation Job was made: the candidate was asked nothing)"
    ), message
    assert kubectl.items("jobs", namespace) == []
    assert len(double.requests) == asked, double.requests[asked:]


def test_a_judge_refusing_the_key_fails_the_run_before_generating(
    kubectl: Kubectl,
    operator: Operator,
    double: LLMDouble,
    keyed: LLMDouble,
    namespace: str,
) -> None:
    asked = len(double.requests)
    started = time.monotonic()
    kubectl.apply(
        secret("judge-key", namespace, token=CANARY_KEY),
        snapshot("capitals", namespace), workload("cand", namespace, double),
        run("refused", namespace, double, judge=keyed_judge(keyed.base_url),
            jobs={"backoffLimit": 0}),
    )  # fmt: skip
    # The operator checked the run's judge first: the key refused, nothing generated.
    done, message, events = failed_run(kubectl, operator, "refused", namespace, "JudgeKeyRefused")
    print(f"judge refusing the key -> run Failed in {time.monotonic() - started:.1f} s")
    before_generation(kubectl, done, message, namespace, asked, double)
    assert "refused the credentials (HTTP 401)" in message, message
    assert "(the judge's key: the Secret judge-key, key" in message, message
    assert done["status"]["message"] == message
    assert events, kubectl.items("events", namespace)
    assert any("refused the credentials (HTTP 401)" in e["message"] for e in events), events
    everything = json.dumps([done, events, kubectl.items("events", namespace)])
    assert CANARY_KEY not in everything
    assert CANARY_KEY not in operator.logs()


def test_an_unreachable_judge_fails_the_run_before_generating(
    kubectl: Kubectl, operator: Operator, double: LLMDouble, namespace: str
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    judge = {"type": "llm", "llm": {"endpoint": closed, "model": "judge"}}
    asked = len(double.requests)
    started = time.monotonic()
    kubectl.apply(
        snapshot("capitals", namespace), workload("cand", namespace, double),
        run("unreachable", namespace, double, judge=judge, jobs={"backoffLimit": 0},
            generation={"maxRetries": 0}),
    )  # fmt: skip
    done, message, events = failed_run(
        kubectl, operator, "unreachable", namespace, "JudgeUnreachable"
    )
    took = time.monotonic() - started
    print(f"unreachable judge -> run Failed in {took:.1f} s")
    before_generation(kubectl, done, message, namespace, asked, double)
    assert message.startswith(
        f"spec.judge.llm.endpoint: Cannot reach {closed}/models (4 attempts"
    ), message
    assert any(f"Cannot reach {closed}/models" in e["message"] for e in events), events
    assert took < 90, took  # the bound; about 8 s here (4 attempts, 7 s of waits)
