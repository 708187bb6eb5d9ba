"""The rendered phases, run for real in a temp root with stand-in system commands (bootstrap_sandbox.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bootstrap.versions import load_versions
from gpuforge.components.monitoring import agent_config
from gpuforge.components.purchase import checkpoint_command, checkpoint_images
from gpuforge.core.config import StackConfig
from tests.bootstrap.bootstrap_sandbox import Sandbox, cloudwatch_agent_downloads, fixture_downloads, installs

STACKS = ("cv-training", "nlp-inference", "risk-sim")


def _names(calls: list[list[str]]) -> list[str]:
    return [c[0] for c in calls]


@pytest.mark.parametrize("stack", STACKS)
def test_full_run_then_idempotent_rerun(stack: str, stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    cfg = stack_cfg[stack]
    sb = Sandbox(tmp_path, cfg, f"{stack}-node01", render_kwargs={"cloudwatch_agent": agent_config(stack)})
    first = sb.run()
    assert first.returncode == 0, first.stderr + sb.log()[-2000:]
    st = sb.status()
    assert sb.rendered.plan is not None
    assert [p["name"] for p in st["phases"]] == [p.name for p in sb.rendered.plan.phases]
    assert all(p["state"] == "succeeded" for p in st["phases"]) and st["state"] == "succeeded"
    # Phases ran in plan order: each phase's start is logged after the previous one's.
    starts = [sb.log().index(f"[{p.name}]") for p in sb.rendered.plan.phases if f"[{p.name}]" in sb.log()]
    assert starts == sorted(starts)

    v = load_versions()
    specs = installs(sb.calls())
    row = v.cuda.for_os(cfg.os)
    assert f"cuda-drivers-{v.nvidia_driver.branch}={v.nvidia_driver.deb_version}" in specs
    assert f"{row.package}={row.version}" in specs
    assert f"{v.dcgm.package}={v.dcgm.version}" in specs
    assert f"nvidia-container-toolkit={v.nvidia_container_toolkit.version}" in specs
    fm = f"nvidia-fabricmanager-{v.nvidia_driver.branch}={v.nvidia_driver.deb_version}"
    assert (fm in specs) == cfg.instance.nvswitch
    assert ("efa_installer.sh" in _names(sb.calls())) == (stack != "nlp-inference")
    held = (sb.state / "held").read_text().split()
    assert f"cuda-drivers-{v.nvidia_driver.branch}" in held and "nvidia-container-toolkit" in held
    assert st["versions"]["observed"]["driver"] == v.nvidia_driver.version
    drift = {k: (want, st["versions"]["observed"].get(k)) for k, want in st["versions"]["expected"].items()}
    assert all(str(want) == str(got) for want, got in drift.values()), drift
    assert (sb.state / "hostname").read_text().strip() == f"{stack}-node01"
    fstab = (sb.root / "etc/fstab").read_text()
    assert (f" {cfg.profile.storage.scratch_mount} ext4 " in fstab) == (cfg.instance.nvme_count > 0)
    # The CloudWatch agent runs with the config the idle alarm's data comes from.
    assert json.loads((sb.state / "cwagent-config.json").read_text()) == agent_config(stack)
    assert (sb.state / "units/amazon-cloudwatch-agent.active").exists()
    assert st["versions"]["observed"]["cloudwatch_agent"] == v.cloudwatch_agent.version

    second = sb.run()
    assert second.returncode == 0, second.stderr
    again = sb.last_run_calls()
    assert installs(again) == [], "a second run installs nothing"
    assert not {"mkfs.ext4", "efa_installer.sh", "configure", "make", "hostnamectl", "dpkg"} & set(_names(again))
    assert "amazon-cloudwatch-agent-ctl" not in _names(again), "an applied agent config is not reloaded"
    assert not [c for c in again if c[:2] in (["mdadm", "--create"], ["docker", "pull"], ["apt-get", "update"])]
    st2 = sb.status()
    assert st2["run"] == 2 and st2["state"] == "succeeded"
    assert [p["changed"] for p in st2["phases"]] == [False] * len(st2["phases"])
    assert (sb.root / "etc/fstab").read_text() == fstab, "fstab is not appended to twice"


def test_failed_driver_install_stops_the_run(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["cv-training"], "n1", env_overrides={"FAKE_FAIL": "apt:cuda-drivers-550"})
    r = sb.run()
    assert r.returncode != 0
    assert "FAILED in phase driver" in r.stderr
    st = sb.status()
    assert st["state"] == "failed" and st["error"]["phase"] == "driver" and st["error"]["exit_code"] == 1
    assert "apt-get install" in st["error"]["message"]
    by_name = {p["name"]: p["state"] for p in st["phases"]}
    assert by_name["base"] == "succeeded" and by_name["driver"] == "failed"
    assert [p["state"] for p in st["phases"][3:]] == ["not-run"] * (len(st["phases"]) - 3)
    # Nothing after the driver ran: no fabric manager, no CUDA, no docker.
    assert not [s for s in installs(sb.calls()) if s.startswith(("nvidia-fabricmanager", "cuda-toolkit", "docker"))]
    log = sb.log()
    assert "E: Version '550.90.07-1' for 'cuda-drivers-550' was not found" in log, "the log says why"
    assert "[driver] FAILED: exit 100 from: apt-get install" in log


def test_self_check_fails_when_a_gpu_is_missing(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["risk-sim"], "n1", env_overrides={"FAKE_GPU_COUNT": "7", "FAKE_EFA_DEVICES": "0"})
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "self-check"
    assert "7 GPUs visible, expected 8" in st["error"]["message"]
    assert "0 EFA devices with the efa provider, expected 1" in st["error"]["message"]


def test_tampered_download_is_refused_before_it_runs(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    v = load_versions()
    downloads = fixture_downloads(v)
    downloads[Path(v.efa_installer.resolved_url).name] += b"tampered"
    sb = Sandbox(tmp_path, stack_cfg["cv-training"], "n1", downloads=downloads)
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "efa" and "sha256 digest mismatch" in st["error"]["message"]
    assert "efa_installer.sh" not in _names(sb.calls())


def test_repository_key_with_wrong_fingerprint_is_refused(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    v = load_versions()
    downloads = fixture_downloads(v)
    downloads[v.cuda_repo.key_file] = b"0123456789ABCDEF0123456789ABCDEF01234567"
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1", downloads=downloads)
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "driver" and "key fingerprint is not" in st["error"]["message"]
    assert not (sb.root / "etc/apt/keyrings/cuda.gpg").exists()


def test_launch_template_node_takes_its_name_from_the_tag(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], None, env_overrides={"FAKE_NAME_TAG": "nlp-inference-node02"})
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert (sb.state / "hostname").read_text().strip() == "nlp-inference-node02"
    assert sb.status()["node"] == "nlp-inference-node02"
    assert "127.0.1.1 nlp-inference-node02" in (sb.root / "etc/hosts").read_text()


def test_auto_scaling_node_appends_its_instance_id(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """Auto Scaling nodes share one Name tag (components/autoscaling.py): hostnames must differ."""
    sb = Sandbox(tmp_path, stack_cfg["cv-training"], None, env_overrides={
        "FAKE_NAME_TAG": "cv-training-node", "FAKE_NAME_SUFFIX": "instance-id", "FAKE_INSTANCE_ID": "i-0abc1234def567890",
    })
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert (sb.state / "hostname").read_text().strip() == "cv-training-node-i-0abc1234def567890"
    assert sb.status()["node"] == "cv-training-node-i-0abc1234def567890"


def test_data_volume_with_a_filesystem_is_kept(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["risk-sim"], "n1")
    # The st1 volume already carries a filesystem (a replaced node re-attaching its data).
    data_dev = sb.root / "dev/nvme3n1"
    (sb.state / "fs").mkdir(parents=True, exist_ok=True)
    (sb.state / "fs" / str(data_dev).removeprefix(str(sb.root)).replace("/", "_")).write_text("old-data-uuid\n")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    mkfs = [c[-1] for c in sb.calls() if c[0] == "mkfs.ext4"]
    assert str(data_dev) not in mkfs, "a volume with a filesystem is never formatted"
    assert any(d.endswith("/dev/md/gpuforge-scratch") for d in mkfs), "the blank scratch array is"
    fstab = (sb.root / "etc/fstab").read_text()
    assert "UUID=old-data-uuid /data ext4 defaults,nofail" in fstab


def test_pinned_data_volume_id_must_be_attached(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["risk-sim"], "n1", render_kwargs={"data_volume_id": "vol-0ffffffffffffffff"})
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "data-volume"
    assert "no EBS data volume vol-0ffffffffffffffff attached after 60 tries" in st["error"]["message"]


def test_preinstalled_driver_is_verified_not_installed(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    cfg = stack_cfg["cv-training"].model_copy(update={"driver_preinstalled": True})
    sb = Sandbox(tmp_path, cfg, "n1")
    (sb.state / "driver-version").write_text("570.86.15\n")  # what the AMI brought
    (sb.state / "fm-version").write_text("570.86.15\n")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert not [s for s in installs(sb.calls()) if s.startswith(("cuda-drivers", "nvidia-fabricmanager"))]
    st = sb.status()
    assert st["versions"]["observed"]["driver"] == "570.86.15"
    assert st["versions"]["observed"]["fabric_manager"] == "570.86.15"
    assert "driver" not in st["versions"]["expected"]


def test_preinstalled_driver_with_mismatched_fabric_manager_fails(
    stack_cfg: dict[str, StackConfig], tmp_path: Path
) -> None:
    cfg = stack_cfg["cv-training"].model_copy(update={"driver_preinstalled": True})
    sb = Sandbox(tmp_path, cfg, "n1")
    (sb.state / "driver-version").write_text("570.86.15\n")
    (sb.state / "fm-version").write_text("570.10.01\n")
    assert sb.run().returncode != 0
    err = sb.status()["error"]
    assert err["phase"] == "fabric-manager" and "fabric manager 570.10.01 does not match driver 570.86.15" in err["message"]


def test_spot_watcher_runs_the_checkpoint_command_once(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    marker = tmp_path / "checkpointed"
    sb = Sandbox(
        tmp_path, stack_cfg["nlp-inference"], "n1", render_kwargs={"checkpoint_command": f"echo saved >> {marker}"}
    )
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert (sb.state / "units/gpuforge-spot-watcher.enabled").exists()
    watcher = [str(sb.root / "opt/gpuforge/bin/gpuforge-spot-watcher")]
    env = {**sb.env(), "GPUFORGE_SPOT_MAX_POLLS": "3"}
    quiet = subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert quiet.returncode == 0 and not marker.exists(), "no notice, no checkpoint"
    (sb.state / "spot-notice").write_text('{"action": "terminate", "time": "2026-12-01T08:00:00Z"}')
    for _ in range(2):
        subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=True)
    assert marker.read_text() == "saved\n", "the checkpoint command ran exactly once"
    assert "spot interruption notice" in sb.log()


def _agent_sandbox(tmp_path: Path, cfg: StackConfig, **kw: Any) -> Sandbox:
    return Sandbox(tmp_path, cfg, "n1", render_kwargs={"cloudwatch_agent": agent_config(cfg.stack)}, **kw)


def test_failed_cloudwatch_agent_install_fails_the_phase(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = _agent_sandbox(tmp_path, stack_cfg["nlp-inference"], env_overrides={"FAKE_FAIL": "dpkg"})
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "cloudwatch-agent" and "dpkg -i amazon-cloudwatch-agent" in st["error"]["message"]
    assert {p["name"]: p["state"] for p in st["phases"]}["self-check"] == "not-run"
    assert not (sb.state / "cwagent-config.json").exists(), "no config loaded into an agent that is not there"


def test_cloudwatch_agent_with_a_bad_signature_is_not_installed(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    v = load_versions()
    downloads = fixture_downloads(v)
    downloads[Path(v.cloudwatch_agent.resolved_url).name] += b"tampered"
    sb = _agent_sandbox(tmp_path, stack_cfg["nlp-inference"], downloads=downloads)
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "cloudwatch-agent" and "signature does not verify" in st["error"]["message"]
    assert "dpkg" not in _names(sb.calls()), "nothing unverified reaches dpkg"


def test_cloudwatch_agent_signed_by_another_key_is_refused(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    v = load_versions()
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    downloads = {**fixture_downloads(v), **cloudwatch_agent_downloads(v, signed_by=other)}
    sb = _agent_sandbox(tmp_path, stack_cfg["nlp-inference"], downloads=downloads)
    assert sb.run().returncode != 0
    assert "signature does not verify" in sb.status()["error"]["message"]
    downloads[Path(v.cloudwatch_agent.key_url).name] = other.encode()  # and a swapped key is refused first
    sb2 = _agent_sandbox(tmp_path / "2", stack_cfg["nlp-inference"], downloads=downloads)
    assert sb2.run().returncode != 0
    assert "CloudWatch agent key fingerprint is not" in sb2.status()["error"]["message"]


def test_changed_agent_config_is_reloaded_and_a_stopped_agent_restarted(
    stack_cfg: dict[str, StackConfig], tmp_path: Path
) -> None:
    sb = _agent_sandbox(tmp_path, stack_cfg["nlp-inference"])
    assert sb.run().returncode == 0, sb.log()[-2000:]
    conf = sb.root / "etc/gpuforge/cloudwatch-agent.json"
    conf.write_text(conf.read_text().replace('"nlp-inference"', '"renamed"'))
    assert sb.run().returncode == 0
    assert [c for c in sb.last_run_calls() if c[0] == "amazon-cloudwatch-agent-ctl"], "a changed config is loaded"
    assert '"renamed"' in (sb.state / "cwagent-config.json").read_text()
    assert "dpkg" not in _names(sb.last_run_calls()), "but the agent is not reinstalled"
    # An agent that stops later is restarted by the next run (the boot-time unit).
    (sb.state / "units/amazon-cloudwatch-agent.active").unlink()
    assert sb.run().returncode == 0
    assert (sb.state / "units/amazon-cloudwatch-agent.active").exists()


def test_no_idle_alarm_means_no_agent(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    sb = Sandbox(tmp_path, stack_cfg["nlp-inference"], "n1")
    assert sb.run().returncode == 0, sb.log()[-2000:]
    assert "cloudwatch-agent" not in [p["name"] for p in sb.status()["phases"]]
    assert not [c for c in sb.calls() if c[0] in ("dpkg", "amazon-cloudwatch-agent-ctl")]
    assert "cloudwatch_agent" not in sb.status()["versions"]["expected"]


def _spot(cfg: StackConfig) -> StackConfig:
    return cfg.model_copy(update={"fleet": cfg.fleet.model_copy(update={"purchase_option": "spot"})})


def test_spot_node_pulls_the_checkpoint_image_at_bootstrap_not_at_interruption(
    stack_cfg: dict[str, StackConfig], tmp_path: Path
) -> None:
    cfg = _spot(stack_cfg["nlp-inference"])
    command, images = checkpoint_command(cfg, "123456789012"), checkpoint_images(cfg)
    assert command is not None and images == (load_versions().aws_cli_image.image,) and images[0] in command
    sb = Sandbox(tmp_path, cfg, "n1", render_kwargs={"checkpoint_command": command, "checkpoint_images": images})
    assert sb.run().returncode == 0, sb.log()[-2000:]
    pulls = [c[-1] for c in sb.calls() if c[:2] == ["docker", "pull"]]
    assert images[0] in pulls, "the bootstrap pulled the checkpoint image"
    assert sb.run().returncode == 0
    assert not [c for c in sb.last_run_calls() if c[:2] == ["docker", "pull"]], "a second run pulls nothing"
    assert next(p for p in sb.status()["phases"] if p["name"] == "spot-watcher")["changed"] is False

    (sb.state / "spot-notice").write_text('{"action": "terminate", "time": "2026-12-01T08:00:00Z"}')
    watcher = [str(sb.root / "opt/gpuforge/bin/gpuforge-spot-watcher")]
    env = {**sb.env(), "GPUFORGE_SPOT_MAX_POLLS": "1"}
    before = len(sb.calls())
    subprocess.run(watcher, env=env, capture_output=True, text=True, timeout=30, check=True)
    at_notice = sb.calls()[before:]
    runs = [c for c in at_notice if c[:2] == ["docker", "run"]]
    assert len(runs) == 1 and "--pull" in runs[0] and runs[0][runs[0].index("--pull") + 1] == "never"
    assert not [c for c in at_notice if c[:2] == ["docker", "pull"]] and not (sb.state / "pulled-at-run").exists()
    assert "checkpoint command finished" in sb.log()


def test_checkpoint_without_its_image_fails_fast_instead_of_downloading(
    stack_cfg: dict[str, StackConfig], tmp_path: Path
) -> None:
    cfg = _spot(stack_cfg["nlp-inference"])
    image = checkpoint_images(cfg)[0]
    command = checkpoint_command(cfg, "123456789012")
    sb = Sandbox(
        tmp_path, cfg, "n1", render_kwargs={"checkpoint_command": command, "checkpoint_images": (image,)},
        env_overrides={"FAKE_FAIL": f"pull:{image}"},
    )  # fmt: skip
    assert sb.run().returncode != 0
    st = sb.status()
    assert st["error"]["phase"] == "spot-watcher" and f"docker pull {image} failed" in st["error"]["message"]
    # Were the image gone at the notice, the command fails at once; it never downloads it then.
    (sb.state / "spot-notice").write_text('{"action": "terminate", "time": "2026-12-01T08:00:00Z"}')
    env = {**sb.env(), "GPUFORGE_SPOT_MAX_POLLS": "1"}
    subprocess.run([str(sb.root / "opt/gpuforge/bin/gpuforge-spot-watcher")], env=env, timeout=30, check=True)
    assert "checkpoint command FAILED" in sb.log() and not (sb.state / "pulled-at-run").exists()


def test_a_failed_phase_leaves_no_download_behind_on_the_next_run(stack_cfg: dict[str, StackConfig], tmp_path: Path) -> None:
    """A phase's work folder (the EFA installer's tarball, hundreds of MB on a node) outlives a
    failed run; the next run, which holds the bootstrap lock, clears what earlier runs left, so a
    node that fails at every boot does not fill its root volume."""
    v = load_versions()
    downloads = fixture_downloads(v)
    downloads[Path(v.efa_installer.resolved_url).name] += b"tampered"
    sb = Sandbox(tmp_path, stack_cfg["cv-training"], "n1", downloads=downloads)
    state = sb.root / "var/lib/gpuforge"

    def left() -> list[Path]:
        return sorted(p for p in state.rglob("efa.*") if p.is_dir())

    for _ in range(3):
        assert sb.run().returncode != 0 and sb.status()["error"]["phase"] == "efa"
        assert len(left()) == 1, left()  # this run's, kept for a look at what was fetched
