"""gpuforge:enaExpress on the node: MTU 8900 on the primary interface, for every boot, checked.

ENA Express (SRD) carries packets of up to MTU 8900 (EC2 User Guide, "Improve network performance
between EC2 instances with ENA Express", Prerequisites; amzn/amzn-ec2-ena-utilities
ena-express/check-ena-express-settings.sh @ 6ecb14cf1dc3f17a375ea72c1aa3dfd72dc5a1e7: "MTU <= 8900
(required)"). EC2's default is 9001, so without the bootstrap's step TCP's large packets go by
plain ENA and validate's 25 Gbit/s per-flow model does not hold.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuforge.bootstrap.render import EC2_USER_DATA_LIMIT
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config
from tests.bootstrap.bootstrap_sandbox import Sandbox

PROJECT = Path(__file__).resolve().parents[2]
BASE = "opt/gpuforge/phases/base.sh"  # the step lives in the base phase: no phase file of its own (user data is 16 KB)
SELF_CHECK = "opt/gpuforge/phases/self-check.sh"
DROP_IN = "etc/netplan/60-gpuforge-ena.yaml"
# netplan's generator as Debian and Ubuntu ship it (netplan.io; scripts/setup.sh installs it).
NETPLAN_GENERATE = next((p for p in ("/usr/libexec/netplan/generate", "/lib/netplan/generate") if Path(p).exists()), None)


@pytest.fixture(scope="module")
def ena_cfg() -> StackConfig:
    """cv-training as a user would write it with ENA Express: on p5.48xlarge, which supports it."""
    raw, _ = load_stack_config(PROJECT, "cv-training")
    raw = {**raw, "gpuforge:instanceType": "p5.48xlarge", "gpuforge:enaExpress": "true"}
    cfg = parse_stack_config(raw, "cv-training")
    assert cfg.ena_express
    return cfg


def test_render_has_the_mtu_step_and_its_self_check_only_with_ena_express(
    ena_cfg: StackConfig, stack_cfg: dict[str, StackConfig]
) -> None:
    for node in ("cv-training-node01", None):
        files = stack_user_data(ena_cfg, node).files
        base = files[BASE]
        assert 'ip link set "${d##*/}" mtu 8900' in base
        assert "f=$R/" + DROP_IN in base
        assert "ENA Express NIC MTU is not 8900" in files[SELF_CHECK]
    off = ena_cfg.model_copy(update={"ena_express": False})
    for cfg in (off, *stack_cfg.values()):
        files = stack_user_data(cfg, None).files
        assert not [rel for rel, text in files.items() if "8900" in text or "netplan" in text], "nothing without enaExpress"


def test_ena_express_spot_training_still_fits_ec2(ena_cfg: StackConfig) -> None:
    spot = ena_cfg.model_copy(update={"fleet": ena_cfg.fleet.model_copy(update={"purchase_option": "spot"})})
    for node in ("cv-training-node01", None):
        assert len(stack_user_data(spot, node, account_id="123456789012").user_data) <= EC2_USER_DATA_LIMIT


def test_ena_express_scripts_pass_shellcheck(ena_cfg: StackConfig, tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (scripts/setup.sh adds it)")
    files = stack_user_data(ena_cfg, None).files
    for rel in ("opt/gpuforge/lib.sh", BASE, SELF_CHECK):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(files[rel])
    out = subprocess.run(
        ["shellcheck", "-x", "-P", "SCRIPTDIR", "-S", "style", "-f", "gcc", BASE, SELF_CHECK],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_phase_sets_mtu_persistently_then_a_rerun_changes_nothing(ena_cfg: StackConfig, tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, ena_cfg, "cv-training-node01")
    first = sb.run()
    assert first.returncode == 0, first.stderr + sb.log()[-2000:]
    net = sb.root / "sys/class/net"
    assert (net / "ens5/mtu").read_text().strip() == "8900"
    assert (net / "docker0/mtu").read_text().strip() == "1500", "only the ENA Express interface"
    assert ["ip", "link", "set", "ens5", "mtu", "8900"] in sb.calls()
    drop_in = sb.root / DROP_IN
    assert drop_in.read_text() == "network: {version: 2, ethernets: {ens5: {mtu: 8900}}}\n"
    assert drop_in.stat().st_mode & 0o777 == 0o600, "netplan warns about (and may refuse) readable files"
    assert "[base] changed: MTU 8900" in sb.log()
    assert {p["name"]: p["state"] for p in sb.status()["phases"]}["self-check"] == "succeeded"

    second = sb.run()
    assert second.returncode == 0, second.stderr
    assert not [c for c in sb.last_run_calls() if c[0] == "ip"], "a second run leaves the link alone"
    st = sb.status()
    assert st["run"] == 2 and [p["changed"] for p in st["phases"]] == [False] * len(st["phases"])


def test_self_check_fails_when_the_mtu_did_not_stick(ena_cfg: StackConfig, tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, ena_cfg, "cv-training-node01")
    assert sb.run().returncode == 0
    # As if networkd re-applied the DHCP-offered 9001 after the bootstrap set 8900.
    (sb.root / "sys/class/net/ens5/mtu").write_text("9001\n")
    out = subprocess.run(
        [str(sb.root / SELF_CHECK)], env=sb.env(), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "ENA Express NIC MTU is not 8900" in out.stderr


def test_phase_fails_clearly_when_no_interface_has_the_primary_mac(ena_cfg: StackConfig, tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, ena_cfg, "n1", env_overrides={"FAKE_MAC": "0a:ff:ff:ff:ff:ff"})
    assert sb.run().returncode != 0
    failed = [p for p in sb.status()["phases"] if p["state"] == "failed"]
    assert [p["name"] for p in failed] == ["base"]
    assert "no NIC has the IMDS MAC" in sb.log()


@pytest.mark.skipif(NETPLAN_GENERATE is None, reason="netplan.io not installed (scripts/setup.sh --with-test-hosts adds it)")
@pytest.mark.skipif(shutil.which("python3") is None, reason="no system python3")
def test_real_netplan_merges_the_drop_in_into_cloud_inits_config(ena_cfg: StackConfig, tmp_path: Path) -> None:
    """cloud-init's own EC2 network config, rendered by its own netplan renderer (the Debian
    cloud-init package; the id is the interface name: DataSourceEc2.convert_ec2_metadata_network_config,
    canonical/cloud-init @ 04eacd06ee60de9dbb9e7be784be20dab7342c1a), plus the drop-in the phase
    wrote, through netplan's real generator: networkd must get MTUBytes=8900 on the DHCP link."""
    sb = Sandbox(tmp_path / "sb", ena_cfg, "n1")
    assert sb.run().returncode == 0
    root = tmp_path / "netplan-root"
    render = (
        "import sys\n"
        "from cloudinit.sources import DataSourceEc2 as ec2\n"
        "from cloudinit.net import netplan, network_state\n"
        "mac = '0a:1b:2c:3d:4e:5f'\n"
        "md = {'interfaces': {'macs': {mac: {'device-number': '0', 'local-ipv4s': '10.42.0.5', 'mac': mac}}}}\n"
        "cfg = ec2.convert_ec2_metadata_network_config(md, macs_to_nics={mac: 'ens5'}, fallback_nic='ens5')\n"
        "netplan.Renderer().render_network_state(network_state.parse_net_config_data(cfg), target=sys.argv[1])\n"
    )
    ci = subprocess.run(["/usr/bin/python3", "-c", render, str(root)], capture_output=True, text=True, timeout=60, check=False)
    if ci.returncode != 0 and "No module named 'cloudinit'" in ci.stderr:
        pytest.skip("cloud-init not installed (scripts/setup.sh --with-test-hosts adds it)")
    assert ci.returncode == 0, ci.stderr
    assert (root / "etc/netplan/50-cloud-init.yaml").exists()
    shutil.copy2(sb.root / DROP_IN, root / DROP_IN)
    gen = subprocess.run(
        [str(NETPLAN_GENERATE), "--root-dir", str(root)], capture_output=True, text=True, timeout=60, check=False
    )
    assert gen.returncode == 0, gen.stderr
    assert DROP_IN.rsplit("/", 1)[1] not in gen.stderr, gen.stderr  # no "permissions ... too open" for ours
    network = (root / "run/systemd/network/10-netplan-ens5.network").read_text()
    # One .network for the link, with DHCP and the MTU: MTUBytes= also turns off the DHCP
    # server's 9001 (networkd's network_verify: "MTUBytes= ... and UseMTU= ... Disabling UseMTU=").
    assert "DHCP=ipv4" in network and "[Link]\nMTUBytes=8900" in network
    assert "MTUBytes=8900" in (root / "run/systemd/network/10-netplan-ens5.link").read_text()
    assert sorted(p.name for p in (root / "run/systemd/network").glob("*.network")) == ["10-netplan-ens5.network"]
