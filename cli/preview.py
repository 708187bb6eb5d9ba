"""The offline preview: the stack's config exactly as Pulumi would load it, the real program
under the SDK's mock engine, and a report of what `pulumi up` would create and cost."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.common.errors import GpuforgeError
from gpuforge.conformance import require_conformance
from gpuforge.core.config import PROJECT, StackConfig, parse_stack_config
from gpuforge.core.cost import CostEstimate, estimate
from gpuforge.stackfile import SECRET_PLACEHOLDER, load_stack_config, stack_file

DISCLAIMER = (
    "offline preview: the real program ran under the Pulumi SDK's mock engine; no cloud was asked. "
    "It shows what would be declared, not a provider-backed diff (no provider validation, no "
    "default_tags, no transforms, ids and IPs are stand-ins)."
)


@dataclass
class PreviewResult:
    config: StackConfig
    run: Any  # OfflineRun
    cost: CostEstimate
    violations: list[Any] = field(default_factory=list)  # gpuforge.policycheck.Violation
    policies_checked: bool = False
    policy_names: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.config.stack,
            "engine": "offline",
            "note": DISCLAIMER,
            "resources": [
                {"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent, "inputs": _redact(r.inputs)}
                | ({"options": opts} if (opts := resource_options(r)) else {})
                for r in sorted(self.run.resources, key=lambda r: r.urn)
            ],
            "outputs": _redact(self.run.outputs),
            "cost": self.cost.to_dict(),
            # where the nodes' bootstrap downloads from (gpuforge:mirror; empty: the vendors' sites)
            "bootstrap": {"mirror": self.config.mirror.to_dict()},
            "policies": {
                "checked": self.policies_checked,
                "names": self.policy_names,
                "violations": [v.to_dict() for v in self.violations],
            },
            "warnings": self.warnings,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)


class ProgramError(GpuforgeError):
    exit_code = 1


def run_preview(project_dir: Path, stack: str, policies: bool = False) -> PreviewResult:
    """Validate the stack's config (exit 2 on bad input), then run the program offline.

    First what the Pulumi CLI itself refuses before it starts the program (required keys,
    declared types, secrets; cli/conformance/), then core/config.py.
    """
    raw, secrets = load_stack_config(project_dir, stack)  # our own, friendlier YAML errors first
    require_conformance(project_dir, stack, stack_file(project_dir, stack))
    cfg = parse_stack_config(raw, stack)  # before any resource is declared

    from gpuforge.offline.engine import run_program  # imports pulumi: only when needed
    from gpuforge.offline.mocks import MockHints, OfflineMocks

    mocks = OfflineMocks(MockHints(
            region=cfg.region,
            az_id=cfg.az_id,
            subnet_cidr=cfg.subnet_cidr,
            public_ips=cfg.public_ips and cfg.vpc_id is None,
        ))
    try:
        run = run_program(project_dir, PROJECT, stack, raw, secrets, mocks)
    except GpuforgeError:
        raise
    except Exception as exc:  # the program itself failed: show its message, not our stack
        raise ProgramError(f"the Pulumi program failed under the mock engine: {exc}") from exc
    if run.duplicates:
        raise ProgramError(f"duplicate resource URNs (the real engine would refuse): {', '.join(run.duplicates)}")
    _check_kubernetes_schema(cfg, run)
    result = PreviewResult(cfg, run, estimate(cfg))
    if cfg.ami_id is None and run.of_type("aws:ec2/launchTemplate:LaunchTemplate") and any(
        r.type == "gpuforge:aws:Nodes" for r in run.resources
    ):  # components/ami.py require_pinned_ami: the real engine refuses what the mock looked up
        result.warnings.append(
            "gpuforge:amiId is not set: this preview used a stand-in AMI, and `pulumi up` refuses an unpinned one; "
            "pin the image `gpuforge preflight` finds (`pulumi config set gpuforge:amiId ami-...`)"
        )
    from gpuforge.components.deploygate import preview_warnings
    from gpuforge.core.kubernetes.settings import extended_support_warning

    # What `pulumi up` refuses before the first resource, but the offline preview (which creates
    # nothing) only reports: the graph above is still what the stack declares.
    result.warnings += preview_warnings(cfg)
    if cfg.kubernetes is not None and (extended := extended_support_warning(cfg.kubernetes)) is not None:
        result.warnings.append(extended)
    if policies:  # the guardrail pack (policy/), over the graph just recorded
        from gpuforge.core.fleet import guardrails
        from gpuforge.core.teams import load_teams_reporting
        from gpuforge.policy.policies import POLICIES
        from gpuforge.policycheck import check_graph

        # Quotas from this project's team files, the same files `stack new` reads. A broken file
        # of another team is a warning here; the stack's own team's file must be valid.
        teams, problems = load_teams_reporting(project_dir / "stacks" / "teams")
        if cfg.team in problems:
            raise GpuforgeError(problems[cfg.team], f"fix stacks/teams/{cfg.team}.yaml (see platform.yaml for the fields)")
        result.warnings += [f"{msg}; team {name}'s GPU quota is not checked" for name, msg in problems.items()]
        config = {"teamQuotas": {n: t.gpu_quota for n, t in teams.items()},
                  "headroomFraction": guardrails()["quota"]["headroom_fraction"]}
        result.violations = check_graph(run.resources, config)
        result.policies_checked = True
        result.policy_names = [p.name for p in POLICIES]
    return result


def _check_kubernetes_schema(cfg: StackConfig, run: Any) -> None:
    """Every Kubernetes object must pass the API schema (strict) of the stack's version."""
    from gpuforge.components.kubernetes.schema import recorded_manifests, validate_manifests

    docs = recorded_manifests(run.resources)
    if not docs:
        return
    from gpuforge.core.kubernetes.settings import default_eks_version

    version = cfg.kubernetes.version if cfg.kubernetes else default_eks_version()
    problems = validate_manifests(docs, version)
    if problems:
        raise ProgramError(
            f"{len(problems)} Kubernetes object(s) fail the Kubernetes {version} schema: "
            + "; ".join(f"{p.obj}: {p.error}" for p in problems)
        )


_SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        if _SECRET_SIG in value:
            return SECRET_PLACEHOLDER
        return {k: _redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def resource_options(r: Any) -> dict[str, bool | str]:
    """The resource options that change what a create, a delete or a replacement does (only those set)."""
    opts = {"retainOnDelete": getattr(r, "retain_on_delete", False),
            "deleteBeforeReplace": getattr(r, "delete_before_replace", False),
            "import": getattr(r, "import_id", "")}  # fmt: skip
    return {k: v for k, v in opts.items() if v}


def tree_rows(result: PreviewResult) -> list[tuple[int, str, str]]:
    """(depth, type, name) rows in a stable order: children sorted by type then name."""
    children: dict[str, list[Any]] = defaultdict(list)
    roots = []
    urns = {r.urn for r in result.run.resources}
    for r in result.run.resources:
        if r.parent and r.parent in urns:
            children[r.parent].append(r)
        else:
            roots.append(r)
    rows: list[tuple[int, str, str]] = []

    def walk(node: Any, depth: int) -> None:
        kept = " (kept on delete)" if getattr(node, "retain_on_delete", False) else ""
        adopted = f" (adopts {node.import_id})" if getattr(node, "import_id", "") else ""
        rows.append((depth, node.type, node.name + kept + adopted))
        for c in sorted(children[node.urn], key=lambda c: (c.custom, c.type, c.name)):
            walk(c, depth + 1)

    for root in sorted(roots, key=lambda r: r.urn):
        walk(root, 0)
    return rows
