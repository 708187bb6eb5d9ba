"""Boot a Slurm stack's cluster in a rehearsal: the head from `render_head_user_data`, the GPU
nodes from the launch template's user data (components/userdata.py), all rendered with the
rehearsal's pins, and the parameters the deploy writes (components/slurmhead.py) in the SSM
stand-in: the munge key (1,024 random bytes, base64), the database password (32 letters and
digits), and once every instance exists, the hosts parameters ("private-ip name" per line). The
head's role reads all three, the GPU nodes' role the munge key and the hosts only. The bootstrap
then brings the cluster up by itself: its own systemctl calls, the packaged units, the drop-ins.

What the bed changes in the rendered files (tests/SUBSTITUTIONS.md, rows "rehearsal (Slurm)"):
- cgroup.conf `CgroupPlugin=cgroup/v1`: this host's kernel mounts the v1 hierarchies only
  (`stat -fc %T /sys/fs/cgroup` says tmpfs); the stacks name cgroup/v2 for Ubuntu 24.04.
- slurm.conf `SlurmdParameters=config_overrides`: the containers have this host's 2 CPUs and its
  memory, not the instance type's (slurmctld would drain every node for Low socket*core*thread
  count and Low RealMemory).
- slurm.conf `HealthCheckInterval=20` instead of the profile's (cv-training: 300 s), so a drain
  and its resume fit in a test's minutes; the program, node state and drain rule are as rendered.
Both are edits of the head's user data (configless nodes fetch the files from slurmctld).
"""

from __future__ import annotations

import base64
import gzip
import secrets
import string
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import StackConfig, parse_stack_config
from tests.rehearsal.mirror import NODE_PYTHON
from tests.rehearsal.nodes import Node, Rehearsal
from tests.rehearsal.stacks import ACCOUNT_ID, DATA_VOLUME_ID, hardware
from tests.slurm.conftest import slurm_raw

HEALTH_CHECK_INTERVAL_S = 20


def substitutions(cfg: StackConfig) -> dict[str, list[tuple[str, str]]]:
    assert cfg.slurm is not None
    interval = cfg.slurm.health_check.interval_s
    return {
        "etc/slurm/cgroup.conf": [("CgroupPlugin=cgroup/v2", "CgroupPlugin=cgroup/v1")],
        "etc/slurm/slurm.conf": [("\nHealthCheckProgram=", "\nSlurmdParameters=config_overrides\nHealthCheckProgram="),
                                 (f"\nHealthCheckInterval={interval}\n", f"\nHealthCheckInterval={HEALTH_CHECK_INTERVAL_S}\n")],
    }  # fmt: skip


@dataclass
class Cluster:
    cfg: StackConfig
    head: Node
    nodes: list[Node]
    status: dict[str, dict[str, Any]] = field(default_factory=dict)  # node name -> bootstrap status


def slurm_config(r: Rehearsal, stack: str, nodes: int, instance_type: str | None, az_id: str | None) -> StackConfig:
    raw = slurm_raw(stack)
    raw["gpuforge:mirror"] = r.mirror_entries()
    raw["gpuforge:nodeCount"] = nodes
    if instance_type:
        raw["gpuforge:instanceType"] = instance_type
    if az_id:
        raw["gpuforge:azId"] = az_id
    return parse_stack_config(raw, stack)


def substitute(user_data: bytes, edits: dict[str, list[tuple[str, str]]]) -> bytes:
    """The user data with the bed's listed edits of the files it writes (each edit must apply once)."""
    text = (gzip.decompress(user_data) if user_data[:2] == b"\x1f\x8b" else user_data).decode()
    header, _, _ = text.partition("\npreserve_hostname")
    doc = yaml.safe_load(text)
    for f in doc["write_files"]:
        for old, new in edits.get(f["path"].lstrip("/"), []):
            if f["content"].count(old) != 1:
                raise AssertionError(f"{f['path']}: {old!r} is not in the rendered file once")
            f["content"] = f["content"].replace(old, new)
    body = yaml.safe_dump(doc, sort_keys=False, width=1000)
    return gzip.compress(f"{header}\n# gpuforge rehearsal: edited as tests/rehearsal/slurm.py lists\n{body}".encode(), mtime=0)


def boot_cluster(r: Rehearsal, stack: str, nodes: int, instance_type: str | None = None, az_id: str | None = None,
                 timeout: float = 1500) -> Cluster:  # fmt: skip
    """Boot the head and `nodes` GPU nodes at once and wait for every first bootstrap run."""
    assert r.ssm is not None, "Rehearsal(slurm=True) serves the SSM stand-in"
    cfg = slurm_config(r, stack, nodes, instance_type, az_id)
    s = cfg.slurm
    assert s is not None and s.accounting is not None
    node_params = {s.munge_parameter, *s.hosts_parameters}
    r.ssm.role(f"{stack}-head", node_params | {s.accounting.password_parameter})
    r.ssm.role(f"{stack}-node", node_params)
    r.ssm.parameters[s.munge_parameter] = ("SecureString", base64.b64encode(secrets.token_bytes(1024)).decode())
    password = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))
    r.ssm.parameters[s.accounting.password_parameter] = ("SecureString", password)
    head_rendered = render_head_user_data(cfg, versions=r.pins, node_python=NODE_PYTHON)
    assert head_rendered.plan is not None
    head_ud = substitute(head_rendered.user_data, substitutions(cfg))
    # The embedded database's own EBS volume (the head's data-volume phase mounts it at the datadir).
    head_hw = {"ebs_volumes": [DATA_VOLUME_ID]} if any(p.name == "data-volume" for p in head_rendered.plan.phases) else {}
    node_ud = stack_user_data(cfg, None, account_id=ACCOUNT_ID, versions=r.pins, node_python=NODE_PYTHON).user_data
    head = r.boot(s.head_name, head_ud, hardware=head_hw, tags={"Name": s.head_name, "stack": stack}, role=f"{stack}-head")
    hw = hardware(cfg) | {"gpu_devices": cfg.instance.gpu_count, "slurm_cgroups": True}
    gpu = [r.boot(name, node_ud, hardware=hw, tags={"Name": name, "stack": stack}, role=f"{stack}-node")
           for name in s.node_names]  # fmt: skip
    # The deploy writes the hosts parameters once every instance has its private IP.
    ips = {n.name: n.ip for n in [head, *gpu]}
    for param, names in zip(s.hosts_parameters, s.hosts_chunks, strict=True):
        r.ssm.parameters[param] = ("String", "\n".join(f"{ips[n]} {n}" for n in names))
    cluster = Cluster(cfg, head, gpu)
    for n in [head, *gpu]:
        cluster.status[n.name] = r.wait_bootstrap(n, timeout=timeout)
    return cluster
