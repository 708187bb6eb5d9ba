"""Team data files (stacks/teams/<team>.yaml): who owns a team's stacks, what they may spend and
how many GPUs they may hold. Read by `gpuforge stack new` and by the guardrail policies."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpuforge.common import inputfile
from gpuforge.common.errors import InputError
from gpuforge.core.catalog import did_you_mean
from gpuforge.core.config_rules import internet_wide

TEAMS_DIR = Path(__file__).resolve().parents[1] / "stacks" / "teams"
NAME = r"^[a-z][a-z0-9-]{1,30}[a-z0-9]$"  # becomes part of stack and bucket names


class Team(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME)
    owner: str = Field(min_length=1, max_length=128)
    cost_center: str = Field(min_length=1, max_length=64)
    budget_usd: int = Field(ge=1, description="monthly USD per stack unless `stack new --budget` says otherwise")
    budget_emails: tuple[str, ...] = ()
    gpu_quota: int = Field(ge=0)
    ssh_cidrs: tuple[str, ...] = ()
    region: str = "us-east-1"

    @field_validator("ssh_cidrs")
    @classmethod
    def _private_cidrs(cls, cidrs: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in cidrs:
            ipaddress.ip_network(cidr, strict=True)
        wide = internet_wide(cidrs)  # the union, so 0.0.0.0/1 + 128.0.0.0/1 counts too
        if wide is not None:
            raise ValueError(f"{wide} opens SSH to the internet; team files list the team's own networks")
        return cidrs


def team_names(directory: Path = TEAMS_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_team(name: str, directory: Path = TEAMS_DIR) -> Team:
    path = directory / f"{name}.yaml"
    if path.is_symlink() or path.exists():
        inputfile.check_path(path, inputfile.TEAM)  # a directory, a dangling link: said as such
    if not path.is_file():
        known = team_names(directory)
        raise InputError(
            f"--team: no team file {path.name} in {directory}; known teams: {', '.join(known) or 'none'}"
            f"{did_you_mean(name, known)}",
            f"add stacks/teams/{name}.yaml (owner, cost_center, budget_usd, gpu_quota, ssh_cidrs, region)",
        )
    doc = inputfile.read_document(path, inputfile.TEAM)
    inputfile.refuse_unknown_keys(doc, Team.model_fields, str(path))
    try:
        team = Team.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(file)"
        raise InputError(f"{path}: {where}: {err['msg']}", "see stacks/teams/platform.yaml for the fields") from None
    if team.name != name:
        raise InputError(f"{path}: name is {team.name!r}, the file is {name}.yaml", "make them the same")
    return team


def load_teams(directory: Path = TEAMS_DIR) -> dict[str, Team]:
    return {name: load_team(name, directory) for name in team_names(directory)}


def load_teams_reporting(directory: Path = TEAMS_DIR) -> tuple[dict[str, Team], dict[str, str]]:
    """Every valid team, and for each invalid team file its error: one broken file must not
    stop the preview of every other team's stacks (issue 13 item 6)."""
    teams: dict[str, Team] = {}
    problems: dict[str, str] = {}
    for name in team_names(directory):
        try:
            teams[name] = load_team(name, directory)
        except InputError as exc:
            problems[name] = exc.message
    return teams, problems
