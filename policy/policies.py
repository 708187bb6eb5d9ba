"""gpuforge guardrails as CrossGuard policies (pulumi-policy).

Each policy reads the resource inputs as the engine sends them (camelCase), so the same
callbacks run under `pulumi preview --policy-pack policy` and over the graph that
`gpuforge preview` records offline (cli/policycheck.py). The GPU quota per team comes from
the team data files (stacks/teams/*.yaml) through the policy config; prices come from the catalog.

The policies are in resource_policies.py (one resource at a time) and stack_policies.py (the
whole graph); what both read from the graph is in graph.py. This module is the pack's list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuforge.core.fleet import guardrails
from gpuforge.policy.resource_policies import RESOURCE_POLICIES
from gpuforge.policy.stack_policies import STACK_POLICIES

TEAMS_DIR = Path(__file__).resolve().parents[1] / "stacks" / "teams"


def teams_config(directory: Path = TEAMS_DIR) -> dict[str, Any]:
    """Policy config from the team data files: {team: gpu_quota}, and the headroom to keep."""
    from gpuforge.core.teams import load_teams

    quotas = {name: team.gpu_quota for name, team in load_teams(directory).items()}
    return {"teamQuotas": quotas, "headroomFraction": guardrails()["quota"]["headroom_fraction"]}


POLICIES = [*RESOURCE_POLICIES, *STACK_POLICIES]
