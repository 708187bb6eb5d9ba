"""The Pulumi CLI's project and stack-config rules, ported from its source so they run here.

`pulumi up --stack NAME` loads Pulumi.yaml and stacks/Pulumi.<stack>.yaml and refuses the run,
before the program starts, on what these rules refuse. The CLI cannot be installed on this
machine, so the rules are ported line by line from pulumi/pulumi at commit
1b5949891b3cefcb9974752b24a5ecef0acc86c8; each module names the files it ports:

- goyaml.py: YAML as the CLI's yaml.v3 reads it (sdk/go/common/encoding/marshal.go).
- project.py: Pulumi.yaml (sdk/go/common/workspace/loaders.go `LoadProjectBytes`, project.go).
- stack.py: the stack file and the merge and checks `pulumi up` runs (loaders.go
  `LoadProjectStackBytes`, resource/config/key.go and object.go, pkg/workspace/config.go).
- here: `require_conformance`, a refusal as gpuforge's one `error:` line (exit 2).

What the CLI does NOT refuse is not refused here either: a stack key that Pulumi.yaml does not
declare (`gpuforg:nodeCount`, `gpuforge:nodeCont`) passes the CLI untouched and reaches the
program, so `Report.undeclared` lists such keys as findings, not errors (core/config.py
refuses unknown `gpuforge:` keys itself). Provider keys (`aws:region`) are checked by the
provider plugin, not by these rules.

This package is standalone: it imports nothing from components/ or validate/, and they do not
import it.
"""

from __future__ import annotations

from pathlib import Path

from gpuforge.common.errors import GpuforgeError
from gpuforge.conformance.project import PULUMI_COMMIT, ConformanceError, Project, load_project
from gpuforge.conformance.stack import (
    Report,
    check_stack,
    default_value,
    load_stack_text,
    program_config,
    validate_stack,
)

__all__ = [
    "PULUMI_COMMIT", "CliRefusal", "ConformanceError", "Project", "Report", "check_stack", "default_value",
    "load_project", "load_stack_text", "program_config", "require_conformance", "validate_stack",
]


class CliRefusal(GpuforgeError):
    """A stack the Pulumi CLI would refuse before the program runs: exit 2, the CLI's reason."""


def _hint(message: str, stack: str) -> str:
    if "is missing configuration value" in message:
        return f"set the key(s) in stacks/Pulumi.{stack}.yaml, or give them a `default` in Pulumi.yaml"
    if "must be encrypted as it's secret" in message:
        return "set it with `pulumi config set --secret gpuforge:<key> VALUE`"
    if "must be of type" in message:
        return f"write the value in stacks/Pulumi.{stack}.yaml as the type Pulumi.yaml declares"
    if "could not parse" in message:
        return "write config keys as `<namespace>:<name>`, e.g. gpuforge:nodeCount"
    return "fix Pulumi.yaml (pulumi/pulumi sdk/go/common/workspace/project.json and project.go Validate)"


def require_conformance(project_dir: Path, stack: str, stack_path: Path | None = None) -> Report:
    """check_stack, with a refusal rendered as one `error:` line naming the CLI's reason."""
    try:
        return check_stack(project_dir, stack, stack_path)
    except ConformanceError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise CliRefusal(
            f"{where}{exc} (the Pulumi CLI's own check: `pulumi up` stops here)", _hint(str(exc), stack)
        ) from None
