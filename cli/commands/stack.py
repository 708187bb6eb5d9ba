"""`gpuforge stack new`: a team's stack file from a reference profile, its team data file and
one template (stacks/templates/team-stack.yaml.j2). The rendered file is validated with the same
parser `pulumi up` runs before it is written, and is never half-written (atomic_write)."""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import jinja2

from gpuforge.commands.options import complete_profiles, complete_teams, project_dir_option
from gpuforge.common.errors import GpuforgeError, InputError
from gpuforge.common.results import atomic_write
from gpuforge.common.table import Column, Rows, emit, format_option
from gpuforge.conformance import require_conformance
from gpuforge.core.catalog import did_you_mean, load_catalog
from gpuforge.core.config import parse_stack_config
from gpuforge.core.profiles import load_profile, profile_names
from gpuforge.core.teams import TEAMS_DIR, Team, load_team
from gpuforge.stackfile import load_stack_config

TEMPLATE = "team-stack.yaml.j2"
TRAINING_RECIPES = ("training", "hpc")


@dataclass(frozen=True)
class StackRequest:
    team: str
    profile: str
    region: str | None = None
    budget: int | None = None
    owner: str | None = None
    scheduler: str = "none"  # gpuforge:scheduler (slurm: a head node and slurmd on the GPU nodes)

    @property
    def stack(self) -> str:
        return f"{self.team}-{self.profile}"

    def command_args(self) -> str:
        # What the header records, so a drift test can re-render exactly this file.
        args = ["--team", self.team, "--profile", self.profile]
        for flag, value in (("--region", self.region), ("--budget", self.budget), ("--owner", self.owner)):
            if value is not None:
                args += [flag, str(value)]
        if self.scheduler != "none":
            args += ["--scheduler", self.scheduler]
        return shlex.join(args)


def render_stack(req: StackRequest, project_dir: Path, teams_dir: Path = TEAMS_DIR) -> str:
    """The stack file text for `req`; InputError naming the flag on bad input."""
    team = load_team(req.team, teams_dir)
    if req.profile not in profile_names():
        raise InputError(
            f"--profile: unknown profile {req.profile!r}{did_you_mean(req.profile, profile_names())}",
            f"use one of {', '.join(profile_names())}",
        )
    profile = load_profile(req.profile)
    catalog = load_catalog()
    region = req.region or team.region
    if region not in catalog.regions:
        raise InputError(
            f"--region: {region!r} is not a region the catalog covers{did_you_mean(region, catalog.regions)}",
            f"use one of {', '.join(catalog.regions)}",
        )
    if req.budget is not None and req.budget < 1:
        raise InputError(f"--budget: {req.budget} is not a monthly budget", "give whole USD per month, like 20000")
    instance = catalog.instance(profile.shape.instance_type)
    offering = instance.offering(region)
    both = [a for a in (offering.az_ids if offering else ()) if a in catalog.region(region).s3express_az_ids]
    if not both:
        raise InputError(
            f"--region: {region} has no AZ ID with both {instance.name} and S3 Express One Zone",
            f"use a region that has them ({', '.join(sorted(instance.offerings))})",
        )
    training = profile.bootstrap.recipe in TRAINING_RECIPES
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(project_dir / "stacks" / "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML; every value goes through the `q` (JSON string) filter
    )
    env.filters["q"] = json.dumps  # a JSON string is a YAML string: quotes whatever the value holds
    return env.get_template(TEMPLATE).render(
        command_args=req.command_args(),
        team=team,
        profile=profile,
        region=region,
        az_id=both[0],
        az_reason=f"first AZ ID in {region} with {instance.name} and S3 Express One Zone "
        "(run `gpuforge preflight` to check live capacity)",
        owner=req.owner or team.owner,
        budget_usd=req.budget if req.budget is not None else team.budget_usd,
        purchase_option="spot" if training else "on-demand",
        scheduler=req.scheduler,
        purchase_reason=(
            "training checkpoints and resumes, so it runs on spot (often about a third of the on-demand price)"
            if training
            else "steady inference: on-demand capacity, to be covered by a 1-year commitment (billing, not a resource)"
        ),
    )


def validate_rendered(text: str, stack: str, project_dir: Path) -> None:
    """Parse the rendered file exactly as `gpuforge preview` would, in a scratch project."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        shutil.copy(project_dir / "Pulumi.yaml", scratch / "Pulumi.yaml")
        (scratch / "stacks").mkdir()
        (scratch / "stacks" / f"Pulumi.{stack}.yaml").write_text(text)
        require_conformance(scratch, stack)  # what `pulumi up` itself would refuse
        raw, _ = load_stack_config(scratch, stack)
        parse_stack_config(raw, stack)


@click.group("stack")
def command() -> None:
    """The project's stacks: list them, and create team stacks from the reference profiles."""


@command.command("new")
@click.option("--team", required=True, shell_complete=complete_teams, help="Team data file: stacks/teams/<team>.yaml.")
@click.option("--profile", required=True, shell_complete=complete_profiles,
              help="Reference profile (core/profiles/<name>.yaml).")
@click.option("--region", default=None, help="AWS region; default is the team's.")
@click.option("--budget", type=int, default=None, help="Monthly budget in USD; default is the team's.")
@click.option("--owner", default=None, help="Owner tag; default is the team's owner.")
@click.option("--scheduler", type=click.Choice(["none", "slurm"]), default="none", show_default=True,
              help="slurm: a Slurm cluster (head node with slurmctld, slurmd on the GPU nodes); training profiles.")  # fmt: skip
@click.option("--force", is_flag=True, help="Overwrite an existing stack file.")
@project_dir_option
def new(
    team: str, profile: str, region: str | None, budget: int | None, owner: str | None, scheduler: str, force: bool,
    project_dir: Path,
) -> None:
    """Write stacks/Pulumi.<team>-<profile>.yaml for TEAM from PROFILE.

    \b
    Examples:
      gpuforge stack new --team vision --profile cv-training
      gpuforge stack new --team search --profile nlp-inference --budget 3500
      gpuforge stack new --team vision --profile cv-training --scheduler slurm
    Then: gpuforge preview --stack vision-cv-training; gpuforge cost --stack vision-cv-training
    """
    project_dir = project_dir.resolve()
    req = StackRequest(team, profile, region, budget, owner, scheduler)
    path = project_dir / "stacks" / f"Pulumi.{req.stack}.yaml"
    if path.exists() and not force:
        raise InputError(f"{path.relative_to(project_dir)} exists", "pass --force to overwrite it (review the diff)")
    text = render_stack(req, project_dir, project_dir / "stacks" / "teams")
    validate_rendered(text, req.stack, project_dir)
    atomic_write(path, text)
    click.echo(f"wrote {path.relative_to(project_dir)}")
    click.echo(f"next: gpuforge preview --stack {req.stack} && gpuforge cost --stack {req.stack}")


__all__ = ["StackRequest", "Team", "command", "render_stack"]


@command.command("list")
@format_option
@project_dir_option
def list_cmd(fmt: str, project_dir: Path) -> None:
    """Every stack of the project: team, profile, region, AZ ID, nodes and what it costs an hour.

    $/h is the stack's own purchase option (gpuforge:purchaseOption), from the catalog, at its
    node count (an autoscaled stack at its minimum). A stack whose file does not validate is
    listed with the reason, and the others are still listed.

    \b
    Examples:
      gpuforge stack list
      gpuforge stack list --format json | jq '.[] | select(.team == "vision")'
    """
    from gpuforge.core.costplan import price_option, stack_cost
    from gpuforge.stackfile import stack_names

    records: list[dict[str, object]] = []
    for name in stack_names(project_dir):
        try:
            raw, _ = load_stack_config(project_dir, name)
            cfg = parse_stack_config(raw, name)
        except GpuforgeError as exc:
            records.append({"stack": name, "problem": exc.message})
            continue
        option = price_option(cfg.fleet.purchase_option)
        hourly = None if option is None else stack_cost(cfg).hourly(option)
        records.append({
            "stack": name, "team": cfg.team, "profile": cfg.profile.name, "region": cfg.region, "az_id": cfg.az_id,
            "instance_type": cfg.instance.name, "nodes": cfg.node_count, "purchase_option": cfg.fleet.purchase_option,
            "usd_per_hour": None if hourly is None else round(hourly, 2), "problem": None,
        })
    if fmt == "json":
        click.echo(json.dumps(records, indent=2))
        return
    problems = any(r["problem"] for r in records)
    rows = Rows(f"stacks in {project_dir}", [
        Column("stack"), Column("team"), Column("profile"), Column("region"), Column("AZ ID"),
        Column("nodes", justify="right"), Column("option"), Column("$/h", justify="right"),
        *([Column("problem")] if problems else []),
    ])
    for r in records:
        if "team" not in r:
            rows.add(r["stack"], None, None, None, None, None, None, None, r["problem"])
            continue
        nodes = f"{r['nodes']}× {r['instance_type']}"
        rows.add(r["stack"], r["team"], r["profile"], r["region"], r["az_id"], nodes, r["purchase_option"],
                 "n/a" if r["usd_per_hour"] is None else f"{r['usd_per_hour']:,.2f}", *([None] if problems else []))
    emit(rows, fmt)
