"""The typed run plans the builders turn into Jobs (they live in :mod:`kyai.api.plan`).

``status.plan`` is part of the status contract, so its models are API models; the builders
read them from here as well as from :mod:`kyai.api`.
"""

from __future__ import annotations

from kyai.api.plan import (
    GatewayToken,
    GeneratePlan,
    JudgedPlan,
    JudgesPlan,
    LLMJudgePlan,
    LmEvalPlan,
    PlanBase,
    RejudgePlan,
    RunPlan,
    SecretEnv,
    plan_from_status,
)

__all__ = [
    "GatewayToken",
    "GeneratePlan",
    "JudgedPlan",
    "JudgesPlan",
    "LLMJudgePlan",
    "LmEvalPlan",
    "PlanBase",
    "RejudgePlan",
    "RunPlan",
    "SecretEnv",
    "plan_from_status",
]
