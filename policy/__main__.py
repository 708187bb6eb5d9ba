"""The gpuforge guardrail policy pack: `pulumi preview --policy-pack policy`.

PolicyPack() starts the analyzer's gRPC server and blocks (pulumi-feasibility.md §8.12), so it
lives alone here; the policies are in policy/policies.py (gpuforge.policy.policies, imported from
the project's virtualenv, which PulumiPolicy.yaml names), which tests and `gpuforge preview` import.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from gpuforge.policy.policies import POLICIES, teams_config

PolicyPack(
    name="gpuforge-guardrails",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
    # Team GPU quotas come from stacks/teams/*.yaml, read when the pack starts.
    initial_config={"gpu-quota": teams_config()},
)
