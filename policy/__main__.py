"""The gpuforge guardrail policy pack: `pulumi preview --policy-pack policy`.

PolicyPack() starts the analyzer's gRPC server and blocks (pulumi-feasibility.md §8.12), so it
lives alone here; the policies are in policy/policies.py, which tests and `gpuforge preview` import.
"""

import sys
from pathlib import Path

# The CLI runs this file from policy/; the policies import the project's components and data.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.policies import POLICIES, teams_config

PolicyPack(
    name="gpuforge-guardrails",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
    # Team GPU quotas come from stacks/teams/*.yaml, read when the pack starts.
    initial_config={"gpu-quota": teams_config()},
)
