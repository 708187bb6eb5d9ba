"""slurm.conf / gres.conf / topology.conf as rendered for the reference stacks: golden files, and
the GPU-node user data that carries them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import EC2_USER_DATA_LIMIT, render_user_data
from gpuforge.bootstrap.slurm import layout_for, render_slurm
from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.components.userdata import stack_user_data
from tests.slurm.conftest import slurm_stack
from tests.support.golden import check_golden

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = {
    # case -> (stack, os, nodeCount)
    "cv-training-24.04": ("cv-training", "ubuntu-24.04", "4"),
    "risk-sim-24.04": ("risk-sim", "ubuntu-24.04", "2"),
}


def _files(case: str) -> dict[str, str]:
    """The Slurm files as the head node's user data carries them (GPU nodes fetch them: configless)."""
    stack, os_name, count = CASES[case]
    r = render_head_user_data(slurm_stack(stack, os=os_name, nodeCount=count))
    return {k: v for k, v in r.files.items() if k.startswith("etc/slurm/")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_slurm_files_match_golden(case: str, update_golden: bool) -> None:
    files = _files(case)
    check_golden(GOLDEN / case, files, case, "tests/slurm", update_golden)


def test_nvml_where_the_pinned_slurm_has_the_plugin() -> None:
    assert "AutoDetect=nvml" in _files("cv-training-24.04")["etc/slurm/gres.conf"]
    assert "CgroupPlugin=cgroup/v2" in _files("cv-training-24.04")["etc/slurm/cgroup.conf"].splitlines()


def test_node_names_are_the_inventorys_and_the_placement_group_is_one_switch() -> None:
    files = _files("cv-training-24.04")
    conf = files["etc/slurm/slurm.conf"]
    assert ("NodeName=cv-training-node[01-04] CPUs=96 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1120665 "
            "Gres=gpu:a100:8") in conf
    assert "PartitionName=train Nodes=cv-training-node[01-04] Default=YES" in conf
    assert "SlurmctldHost=cv-training-head\n" in conf
    assert files["etc/slurm/topology.conf"].splitlines()[-1] == "SwitchName=cv-training-pg Nodes=cv-training-node[01-04]"


@pytest.mark.parametrize("purchase", ["on-demand", "spot"])  # spot adds the watcher: the fullest user data
def test_gpu_nodes_get_slurm_and_pyxis_phases_and_still_fit_ec2(purchase: str) -> None:
    for stack, os_name, count in CASES.values():
        r = stack_user_data(slurm_stack(stack, os=os_name, nodeCount=count, purchaseOption=purchase),
                            account_id="123456789012")  # fmt: skip
        assert r.plan is not None
        names = [p.name for p in r.plan.phases]
        # slurmd starts after pyxis.conf exists (it reads plugstack.conf at start), and the
        # self-check judges it by its registration with the controller
        assert names.index("slurm") < names.index("pyxis") < names.index("slurm-start") < names.index("self-check")
        assert "scontrol -o show node" in r.files["opt/gpuforge/phases/self-check.sh"]
        assert "systemctl start" not in r.files["opt/gpuforge/phases/slurm.sh"]
        assert len(r.user_data) <= EC2_USER_DATA_LIMIT
        # configless: no Slurm file on the GPU nodes; slurmd asks the head for them
        assert not [k for k in r.files if k.startswith("etc/slurm/")]
        assert f"--conf-server {stack}-head:6817" in r.files["opt/gpuforge/phases/slurm.sh"]
        # the munge key is read at boot: user data names its parameter and carries no key
        assert r.plan.munge_parameter and r.plan.munge_parameter in r.files["opt/gpuforge/phases/slurm.sh"]


def test_the_head_runs_slurmctld_only() -> None:
    r = render_head_user_data(slurm_stack("cv-training"))
    assert r.plan is not None and [p.name for p in r.plan.phases] == [
        "base", "gpuforge", "data-volume", "slurm", "pyxis", "slurm-accounting", "slurm-start", "slurm-accounts",
    ]  # fmt: skip
    phase = r.files["opt/gpuforge/phases/slurm.sh"]
    assert "(apt_install munge slurmctld slurm-client libpmix-dev) || rc=$?\n" in phase and "conf-server" not in phase
    assert "gpuforge-health-check" not in " ".join(r.files) and len(r.user_data) <= EC2_USER_DATA_LIMIT
    assert "SlurmctldParameters=enable_configless" in r.files["etc/slurm/slurm.conf"]


def test_a_layout_without_nodes_is_refused() -> None:
    s = slurm_stack("cv-training").slurm
    assert s is not None
    layout = layout_for(s, "files")
    with pytest.raises(ValueError, match="at least one node"):
        render_slurm(layout.__class__(**{**layout.__dict__, "node_names": ()}))


SHELL_FILES = ("opt/gpuforge/phases/slurm.sh", "opt/gpuforge/phases/pyxis.sh", "opt/gpuforge/phases/slurm-start.sh",
               "opt/gpuforge/phases/self-check.sh", "opt/gpuforge/bin/gpuforge-health-check")
HEAD_SHELL_FILES = ("opt/gpuforge/phases/slurm.sh", "opt/gpuforge/phases/pyxis.sh", "opt/gpuforge/phases/slurm-start.sh")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (scripts/setup.sh adds it)")
def test_slurm_phases_pass_shellcheck(tmp_path: Path) -> None:
    node = render_user_data(slurm_stack("cv-training", os="ubuntu-24.04"), None)
    head = render_head_user_data(slurm_stack("cv-training", os="ubuntu-24.04"))
    for who, r, files in (("node", node, SHELL_FILES), ("head", head, HEAD_SHELL_FILES)):
        for rel in (*files, "opt/gpuforge/lib.sh"):
            p = tmp_path / who / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(r.files[rel])
        for rel in files:
            argv = ["shellcheck", "-x", "-P", str(tmp_path / who / "opt/gpuforge/phases"), str(tmp_path / who / rel)]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            assert out.returncode == 0, f"{who} {rel}: {out.stdout}"


def test_bootstrap_render_writes_the_head_nodes_user_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main
    from tests.slurm.conftest import PROJECT

    proj = tmp_path / "proj"
    (proj / "stacks").mkdir(parents=True)
    shutil.copy(PROJECT / "Pulumi.yaml", proj / "Pulumi.yaml")
    stack_file = (PROJECT / "stacks" / "Pulumi.cv-training.yaml").read_text()
    slurm_stack_file = stack_file.replace("config:\n", "config:\n  gpuforge:scheduler: slurm\n  gpuforge:os: ubuntu-24.04\n", 1)
    (proj / "stacks" / "Pulumi.cv-training.yaml").write_text(slurm_stack_file)
    out = tmp_path / "head"
    with pytest.raises(SystemExit) as ex:
        main(["bootstrap", "render", "--stack", "cv-training", "--node", "cv-training-head", "--out", str(out),
              "--project-dir", str(proj)])  # fmt: skip
    assert ex.value.code == 0, capsys.readouterr().err
    phases = "base -> gpuforge -> data-volume -> slurm -> pyxis -> slurm-accounting -> slurm-start -> slurm-accounts"
    assert f"phases: {phases}" in capsys.readouterr().out
    assert "SlurmctldHost=cv-training-head" in (out / "etc/slurm/slurm.conf").read_text()
    assert "apt_install munge slurmctld" in (out / "opt/gpuforge/phases/slurm.sh").read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_slurm_phase_reads_ssm_with_the_signer_checked_against_botocore(case: str) -> None:
    """The hosts and munge-key parameters are read with lib.sh's ssm_get, the request that
    tests/bootstrap/test_ngc_sigv4.py checks against botocore's SigV4 signer. curl --aws-sigv4
    (as the slurm phase had) sends the session token unsigned on Ubuntu 22.04's curl 7.81, the
    request shape that test shows refused."""
    stack, os_name, count = CASES[case]
    head = render_head_user_data(slurm_stack(stack, os=os_name, nodeCount=count))
    node = stack_user_data(slurm_stack(stack, os=os_name, nodeCount=count), account_id="123456789012")
    for r in (head, node):
        assert "ssm_get() {" in r.files["opt/gpuforge/lib.sh"]
        assert "ssm_get " in r.files["opt/gpuforge/phases/slurm.sh"]
        scripts = {k: text for k, text in r.files.items() if k.startswith("opt/gpuforge/")}  # not the cloud-config
        assert [k for k, text in scripts.items() if "--aws-sigv4" in text or "ssm_get() {" in text] == ["opt/gpuforge/lib.sh"]


def test_a_nodes_name_resolves_to_its_private_ip_not_127_0_1_1(tmp_path: Path) -> None:
    """Finding 8: the base phase's `127.0.1.1 <name>` line stood ahead of the cluster's hosts block,
    so the node's own name resolved to loopback (glibc takes the first match) and slurmd/srun would
    hand 127.0.1.1 to their peers. The rendered lines run here as they are, with this node's name,
    the hosts parameter's text and a root of our own as their only inputs; a second boot changes nothing."""
    r = stack_user_data(slurm_stack("cv-training", nodeCount="2"), account_id="123456789012")
    slurm_sh, base_sh = r.files["opt/gpuforge/phases/slurm.sh"], r.files["opt/gpuforge/phases/base.sh"]
    end = 'removed 127.0.1.1 $me from /etc/hosts"\nfi\n'
    hosts_part = slurm_sh[slurm_sh.index("block=$(printf"):slurm_sh.index(end) + len(end)]
    base_part = next(ln for ln in base_sh.splitlines(keepends=True) if ln.startswith('grep -qE "^127'))
    base_part += base_sh.split(base_part, 1)[1].split("\n", 1)[0] + "\n"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    prelude = (f"set -euo pipefail\nR={tmp_path}\nname=cv-training-node01\nchanged() {{ echo \"changed: $*\"; }}\n"
               "hostname() { echo cv-training-node01; }\n"
               "hosts=$(printf '10.0.0.5 cv-training-head\\n10.0.0.6 cv-training-node01\\n"
               "10.0.0.7 cv-training-node02')\n")  # fmt: skip
    boots = []
    for _ in range(2):  # first boot, then a reboot: base phase, then the slurm phase's hosts block
        run = subprocess.run(["bash", "-c", prelude + base_part + hosts_part], capture_output=True, text=True,
                             timeout=30, check=False)  # fmt: skip
        assert run.returncode == 0, run.stderr
        boots.append(run.stdout.splitlines())
    assert boots[0] == ["changed: added cv-training-node01 to /etc/hosts", "changed: wrote the cluster's names to /etc/hosts",
                        "changed: removed 127.0.1.1 cv-training-node01 from /etc/hosts"]  # fmt: skip
    assert boots[1] == []
    lines = (tmp_path / "etc" / "hosts").read_text().splitlines()
    mine = [ln.split()[0] for ln in lines if not ln.startswith("#") and "cv-training-node01" in ln.split()[1:]]
    assert mine == ["10.0.0.6"]


def test_the_node_reads_every_hosts_parameter_and_waits_for_all_of_them(tmp_path: Path) -> None:
    """At 256 nodes the names span three parameters (finding 7): the rendered loop joins them in
    order, and while one is missing (deploy time writes them once every instance exists) it waits.
    The rendered lines run as they are; ssm_get, lib.sh's SSM reader (tests/bootstrap/test_ngc_sigv4.py
    checks its request against botocore), answers from files here."""
    cfg = slurm_stack("cv-training", nodeCount="256")
    assert cfg.slurm is not None and len(cfg.slurm.hosts_parameters) == 3
    phase = stack_user_data(cfg, account_id="123456789012").files["opt/gpuforge/phases/slurm.sh"]
    start = phase.index('hosts="" params=(')
    loop = phase[start:phase.index("block=$(printf", start)]
    store = tmp_path / "ssm"
    for param, names in zip(cfg.slurm.hosts_parameters, cfg.slurm.hosts_chunks, strict=True):
        (store / param.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (store / param.lstrip("/")).write_text("\n".join(f"10.0.{i // 250}.{i % 250} {n}" for i, n in enumerate(names)))
    late = store / cfg.slurm.hosts_parameters[1].lstrip("/")
    late.rename(late.with_suffix(".late"))  # the second part appears only after the first wait
    prelude = (f"set -euo pipefail\nSTORE={store}\nhostname() {{ echo cv-training-node200; }}\n"
               "die() { echo \"die: $*\"; exit 1; }\nwaits=0\n"
               "sleep() { waits=$((waits + 1)); [ ! -e \"$STORE/gpuforge/cv-training/slurm/hosts/1.late\" ] || "
               "mv \"$STORE/gpuforge/cv-training/slurm/hosts/1.late\" \"$STORE/gpuforge/cv-training/slurm/hosts/1\"; }\n"
               'ssm_get() { cat "$STORE$1"; }\n')  # fmt: skip
    run = subprocess.run(["bash", "-c", prelude + loop + 'echo "waits=$waits"; printf "%s\\n" "$hosts"'],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout.splitlines()
    assert out[0] == "waits=1"
    assert [ln.split()[1] for ln in out[1:]] == ["cv-training-head", *cfg.slurm.node_names]
