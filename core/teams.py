"""Team data files (stacks/teams/<team>.yaml): who owns a team's stacks, what they may spend and
how many GPUs they may hold. Read by `gpuforge stack new` and by the guardrail policies."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuforge.common import inputfile
from gpuforge.common.errors import InputError
from gpuforge.core.catalog import did_you_mean
from gpuforge.core.config_rules import internet_wide

TEAMS_DIR = Path(__file__).resolve().parents[1] / "stacks" / "teams"
NAME = r"^[a-z][a-z0-9-]{1,30}[a-z0-9]$"  # becomes part of stack and bucket names
USER = r"^[a-z_][a-z0-9_-]{0,31}$"  # a Linux user name (useradd's default NAME_REGEX, 32 characters)
# UIDs the team files may give: above the distributions' login range start (1000, Ubuntu's first
# user is the AMI's) and below 60000 (UID_MAX in login.defs; nobody is 65534).
UID_MIN, UID_MAX = 2000, 59999


class TeamUser(BaseModel):
    """A member who runs Slurm jobs: the same UID on the head and every node of the team's
    clusters; `gpu_limit` caps the GPUs their running jobs hold at once (Slurm GrpTRES)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=USER)
    uid: int = Field(ge=UID_MIN, le=UID_MAX)
    gpu_limit: int | None = Field(default=None, ge=0)


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
    users: tuple[TeamUser, ...] = ()

    @field_validator("users")
    @classmethod
    def _distinct_users(cls, users: tuple[TeamUser, ...]) -> tuple[TeamUser, ...]:
        names, uids = [u.name for u in users], [u.uid for u in users]
        for what, dup in (("name", {n for n in names if names.count(n) > 1}), ("uid", {i for i in uids if uids.count(i) > 1})):
            if dup:
                raise ValueError(f"two users with {what} {sorted(dup, key=str)[0]}")
        return users

    @model_validator(mode="after")
    def _limits_within_quota(self) -> Team:
        for u in self.users:
            if u.gpu_limit is not None and u.gpu_limit > self.gpu_quota:
                raise ValueError(f"user {u.name}: gpu_limit {u.gpu_limit} is above the team's gpu_quota {self.gpu_quota}")
        return self

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


def check_users_across(teams: dict[str, Team]) -> None:
    """A user name or UID in two team files would be one Linux user in two accounts, or two users
    with one UID: refuse it, naming both files."""
    by_name: dict[str, str] = {}
    by_uid: dict[int, str] = {}
    for team in teams.values():
        for u in team.users:
            clash = (f"user {u.name}", by_name.get(u.name)) if u.name in by_name else (f"uid {u.uid}", by_uid.get(u.uid))
            if clash[1] is not None:
                raise InputError(
                    f"stacks/teams/{team.name}.yaml: {clash[0]} is also in stacks/teams/{clash[1]}.yaml",
                    "give each person one team file entry and a UID of their own",
                )
            by_name[u.name] = by_uid[u.uid] = team.name
