"""Slurm accounting as a stack renders it: the head's phases in the order slurmctld needs, the
teams' accounts and users from stacks/teams, the same UIDs on head and nodes, the existing-database
option, bad input refused with one line naming the key, and the new scripts clean under shellcheck.
(The same files run on real daemons in tests/slurm/test_accounting_testbed.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import render_user_data
from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.common.errors import ConfigError, InputError
from gpuforge.core.costplan import stack_cost
from gpuforge.core.jobcost import NodePricing
from gpuforge.core.teams import Team, TeamUser, check_users_across, load_teams
from tests.slurm.conftest import slurm_stack

EXT = {"accountingDbEndpoint": "acct.cluster-x.us-east-1.rds.amazonaws.com:3307",
       "accountingDbPasswordParameter": "/site/slurm/db-password"}  # fmt: skip


def _head(**extra: str) -> dict[str, str]:
    return render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04", **extra)).files


def test_slurmdbd_comes_up_before_slurmctld_and_accounts_after_it() -> None:
    r = render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04"))
    assert r.plan is not None
    names = [p.name for p in r.plan.phases]
    assert names.index("slurm") < names.index("slurm-accounting") < names.index("slurm-start") < names.index("slurm-accounts")
    phase = r.files["opt/gpuforge/phases/slurm-accounting.sh"]
    assert "apt_install slurmdbd mariadb-server" in phase and "Pin: version 23.11.4-*" in phase
    assert phase.index("dbd-conf") < phase.index("systemctl start slurmdbd") < phase.index("accounting\" cluster")
    assert '"$GF/bin/gpuforge-slurm-accounting" register' in r.files["opt/gpuforge/phases/slurm-accounts.sh"]


def test_the_team_files_become_accounts_quotas_and_users() -> None:
    files = _head()
    script = files["opt/gpuforge/bin/gpuforge-slurm-accounting"]
    for team in load_teams().values():
        assert f"set_gpus account {team.gpu_quota} cluster=\"$CLUSTER\" account={team.name} user=" in script
        for u in team.users:
            limit = -1 if u.gpu_limit is None else u.gpu_limit
            assert f"set_gpus user {limit} cluster=\"$CLUSTER\" account={team.name} user={u.name}" in script
    conf = files["etc/slurm/slurm.conf"]
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:a100\n" in conf
    assert "AccountingStorageEnforce=associations,limits,qos,safe\n" in conf
    dbd = files["etc/slurm/slurmdbd.conf.in"]
    assert "StorageHost=127.0.0.1\nStoragePort=3306\n" in dbd and "DbdHost=cv-training-head\n" in dbd
    assert not [ln for ln in dbd.splitlines() if ln.startswith("StoragePass")]
    cnf = files["etc/mysql/mariadb.conf.d/90-gpuforge.cnf"]
    assert "bind-address = 127.0.0.1" in cnf and "innodb_lock_wait_timeout = 900" in cnf


def test_head_and_nodes_make_the_same_users_with_the_same_uids() -> None:
    cfg = slurm_stack("cv-training", os="ubuntu-24.04")
    head = render_head_user_data(cfg).files["opt/gpuforge/bin/gpuforge-slurm-users"]
    node = render_user_data(cfg, "cv-training-node01")
    assert node.plan is not None and "slurm-users" in [p.name for p in node.plan.phases]
    assert node.files["opt/gpuforge/bin/gpuforge-slurm-users"] == head
    assert "ensure vana 20101" in head and "ensure sbo 20201" in head
    # the GPU nodes never get the database's script, drop-in or password parameter
    assert not [k for k in node.files if "accounting" in k or "mysql" in k]
    assert "db-password" not in node.user_data.decode(errors="replace")


def test_an_existing_database_instead_of_mariadb() -> None:
    files = _head(**EXT)
    dbd = files["etc/slurm/slurmdbd.conf.in"]
    assert "StorageHost=acct.cluster-x.us-east-1.rds.amazonaws.com\nStoragePort=3307\n" in dbd
    assert "etc/mysql/mariadb.conf.d/90-gpuforge.cnf" not in files
    phase = files["opt/gpuforge/phases/slurm-accounting.sh"]
    assert "mariadb" not in phase and "ssm_get /site/slurm/db-password |" in phase


def test_the_head_carries_its_node_price_for_cost_jobs() -> None:
    cfg = slurm_stack("cv-training", os="ubuntu-24.04", purchaseOption="spot")
    doc = render_head_user_data(cfg).files["etc/gpuforge/slurm-pricing.json"]

    p = NodePricing.from_dict(json.loads(doc))
    assert p.purchase_option == "spot" and p.usd_per_node_hour == stack_cost(cfg).per_node_hourly("spot")
    assert cfg.slurm is not None and (p.cpus, p.memory_mb, p.gpus, p.gpu_type) == (
        cfg.slurm.cpus, cfg.slurm.real_memory_mb, 8, "a100")


@pytest.mark.parametrize(("extra", "key"), [
    ({"accountingDbEndpoint": "db.example.internal"}, "gpuforge:accountingDbPasswordParameter"),
    ({"accountingDbPasswordParameter": "/x"}, "gpuforge:accountingDbEndpoint"),
    ({**EXT, "accountingDbEndpoint": "db example:3306"}, "gpuforge:accountingDbEndpoint"),
    ({**EXT, "accountingDbEndpoint": "db.example:99999"}, "gpuforge:accountingDbEndpoint"),
    ({**EXT, "accountingDbVolumeId": "vol-0123456789abcdef0"}, "gpuforge:accountingDbVolumeId"),
    ({"accountingDbVolumeId": "vol-XYZ"}, "gpuforge:accountingDbVolumeId"),
    ({"accountingDbVolumeId": "snap-0123456789abcdef0"}, "gpuforge:accountingDbVolumeId"),
    ({"accountingDbVolumeGib": "5"}, "gpuforge:accountingDbVolumeGib"),
    ({"accountingDbVolumeGib": "20000"}, "gpuforge:accountingDbVolumeGib"),
])  # fmt: skip
def test_bad_accounting_options_name_the_key(extra: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as ex:
        slurm_stack("cv-training", os="ubuntu-24.04", **extra)
    assert ex.value.key == key


def test_accounting_options_without_slurm_are_refused() -> None:
    from gpuforge.core.config import parse_stack_config
    from tests.slurm.conftest import slurm_raw

    raw = {**slurm_raw("cv-training", **EXT), "gpuforge:scheduler": "none"}
    with pytest.raises(ConfigError) as ex:
        parse_stack_config(raw, "cv-training")
    assert ex.value.key == "gpuforge:accountingDbEndpoint"
    raw = {**slurm_raw("cv-training", accountingDbVolumeId="vol-0123456789abcdef0"), "gpuforge:scheduler": "none"}
    with pytest.raises(ConfigError) as ex:
        parse_stack_config(raw, "cv-training")
    assert ex.value.key == "gpuforge:accountingDbVolumeId"


def test_team_users_are_checked() -> None:
    base = {"name": "team-one", "owner": "o", "cost_center": "c", "budget_usd": 1, "gpu_quota": 8}
    with pytest.raises(ValueError, match="gpu_limit 9 is above"):
        Team.model_validate({**base, "users": [{"name": "a", "uid": 20000, "gpu_limit": 9}]})
    with pytest.raises(ValueError, match="two users with uid 20000"):
        Team.model_validate({**base, "users": [{"name": "a", "uid": 20000}, {"name": "b", "uid": 20000}]})
    with pytest.raises(ValueError):
        TeamUser.model_validate({"name": "root", "uid": 0})  # below the login range
    a = Team.model_validate({**base, "users": [{"name": "a", "uid": 20000}]})
    b = Team.model_validate({**base, "name": "team-two", "users": [{"name": "b", "uid": 20000}]})
    with pytest.raises(InputError, match=r"uid 20000 is also in stacks/teams/team-one\.yaml"):
        check_users_across({"team-one": a, "team-two": b})


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (scripts/setup.sh adds it)")
def test_accounting_scripts_and_phases_pass_shellcheck(tmp_path: Path) -> None:
    files = _head()
    rels = ["opt/gpuforge/bin/gpuforge-slurm-accounting", "opt/gpuforge/bin/gpuforge-slurm-users",
            "opt/gpuforge/phases/slurm-accounting.sh", "opt/gpuforge/phases/slurm-accounts.sh"]  # fmt: skip
    node = render_user_data(slurm_stack("cv-training", os="ubuntu-24.04"), "cv-training-node01").files
    for rel, text in [*((r, files[r]) for r in rels), ("opt/gpuforge/phases/slurm-users.sh",
                                                         node["opt/gpuforge/phases/slurm-users.sh"])]:  # fmt: skip
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (tmp_path / "opt/gpuforge/lib.sh").write_text(files["opt/gpuforge/lib.sh"])
    for rel in [*rels, "opt/gpuforge/phases/slurm-users.sh"]:
        out = subprocess.run(["shellcheck", "-x", "-P", str(tmp_path / "opt/gpuforge/phases"), str(tmp_path / rel)],
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert out.returncode == 0, f"{rel}: {out.stdout}"


def test_the_head_checks_its_accounting_store_every_five_minutes(tmp_path: Path) -> None:
    """The head's accounting health (issue 24): a timer runs `gpuforge-slurm-accounting status`,
    whose failure (slurmdbd not answering) shows as a failed unit; slurm-accounts starts it. The
    status itself runs on real daemons in test_accounting_testbed.py."""
    files = _head()
    service = files["etc/systemd/system/gpuforge-accounting-health.service"]
    timer = files["etc/systemd/system/gpuforge-accounting-health.timer"]
    assert "Type=oneshot\nExecStart=/opt/gpuforge/bin/gpuforge-slurm-accounting status\n" in service
    assert "OnUnitActiveSec=5min\n" in timer and "WantedBy=timers.target\n" in timer
    phase = files["opt/gpuforge/phases/slurm-accounts.sh"]
    assert phase.index("gpuforge-slurm-accounting\" register") < phase.index("gpuforge-slurm-accounting\" status") < \
        phase.index("systemctl enable --now gpuforge-accounting-health.timer")  # fmt: skip
    script = files["opt/gpuforge/bin/gpuforge-slurm-accounting"]
    assert "  status) status ;;" in script and "echo \"accounting store unreachable: slurmdbd cv-training-head:6819" in script
    # GPU nodes carry none of it
    node = render_user_data(slurm_stack("cv-training", os="ubuntu-24.04"), "cv-training-node01").files
    assert not [f for f in node if "accounting-health" in f]
    if shutil.which("systemd-analyze") is None:
        return
    # systemd itself reads both units (the script in place, as the head carries it)
    for rel in ("etc/systemd/system/gpuforge-accounting-health.service", "etc/systemd/system/gpuforge-accounting-health.timer",
                "opt/gpuforge/bin/gpuforge-slurm-accounting"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    (tmp_path / "opt/gpuforge/bin/gpuforge-slurm-accounting").chmod(0o755)
    (tmp_path / "usr/lib/systemd").mkdir(parents=True)  # systemd's own targets (timers.target, sysinit.target)
    (tmp_path / "usr/lib/systemd/system").symlink_to(Path("/usr/lib/systemd/system"))
    units = ["gpuforge-accounting-health.timer", "gpuforge-accounting-health.service"]
    out = subprocess.run(["systemd-analyze", "verify", f"--root={tmp_path}", *units],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0 and "gpuforge-accounting-health" not in out.stderr, out.stderr
