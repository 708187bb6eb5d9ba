"""Run the guardrail policies (policy/policies.py) over a graph the offline engine recorded.

The callbacks are the ones the Pulumi CLI runs with `--policy-pack policy`; here they get the
recorded inputs instead of the engine's, as pulumi-feasibility.md §10 describes. Enforcement
levels and remediation are engine features and are not emulated: every violation counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
)

STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass(frozen=True)
class Violation:
    policy: str
    resource: str | None  # resource name, or None for a stack-wide finding
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "resource": self.resource, "message": self.message}


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=None,  # type: ignore[arg-type]
        additional_secret_outputs=[],
    )


def check_graph(resources: list[Any], config: dict[str, Any] | None = None) -> list[Violation]:
    """Violations of every policy over `resources` (engine Registered records), sorted."""
    from gpuforge.policy.policies import POLICIES, teams_config

    config = teams_config() if config is None else config
    custom = sorted((r for r in resources if r.custom and r.type != STACK_TYPE), key=lambda r: r.urn)
    names = {r.urn: r.name for r in custom}
    found: list[Violation] = []
    policy_resources = _policy_resources(custom)
    for policy in POLICIES:
        validate: Any = getattr(policy, "validate", None)
        callbacks = validate if isinstance(validate, list) else [validate]
        if isinstance(policy, ResourceValidationPolicy):
            for r in custom:
                args = ResourceValidationArgs(r.type, r.inputs, r.urn, r.name, _opts(), None, config)
                for cb in callbacks:
                    cb(args, _reporter(found, policy.name, lambda urn, name=r.name: name))
        else:
            stack_args = StackValidationArgs(policy_resources, config)
            for cb in callbacks:
                cb(stack_args, _reporter(found, policy.name, lambda urn: names.get(urn or "")))
    return sorted(found, key=lambda v: (v.policy, v.resource or "", v.message))


def _policy_resources(custom: list[Any]) -> list[PolicyResource]:
    """The stack policies' view of the graph, with dependencies and property dependencies linked
    to the resource objects as pulumi_policy's AnalyzeStack does (policy.py, pulumi-policy 1.21.0)."""
    by_urn = {r.urn: PolicyResource(r.type, r.inputs, r.urn, r.name, _opts(), None, None, [], {}) for r in custom}
    for r in custom:
        res = by_urn[r.urn]
        res.dependencies = [by_urn[u] for u in r.dependencies if u in by_urn]
        for prop, urns in getattr(r, "property_dependencies", ()):
            res.property_dependencies[prop] = [by_urn[u] for u in urns if u in by_urn]
    return list(by_urn.values())


def _reporter(found: list[Violation], policy: str, resource_of: Any) -> Any:
    def report(message: str, urn: str | None = None) -> None:
        found.append(Violation(policy, resource_of(urn), message))

    return report
