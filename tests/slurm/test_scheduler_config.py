"""`gpuforge:scheduler`: declared in Pulumi.yaml, validated before any resource, refused where
Slurm cannot own the nodes (EKS, an Auto Scaling group, an inference profile)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from tests.slurm.conftest import PROJECT, slurm_raw, slurm_stack


def test_key_is_declared_with_type_default_and_description() -> None:
    decl = yaml.safe_load((PROJECT / "Pulumi.yaml").read_text())["config"]["scheduler"]
    assert decl["type"] == "string" and decl["default"] == "none" and "slurm" in decl["description"]


def test_default_is_no_scheduler() -> None:
    raw = slurm_raw("cv-training")
    del raw["gpuforge:scheduler"]
    assert parse_stack_config(raw, "cv-training").slurm is None


def test_slurm_on_cv_training_resolves_from_the_catalog_and_profile() -> None:
    s = slurm_stack("cv-training", nodeCount="4").slurm
    assert s is not None
    # p4de.24xlarge: 96 vCPUs, 1152 GiB (catalog), 8 x A100-80GB
    assert (s.cpus, s.gpus_per_node, s.gpu_type) == (96, 8, "a100")
    assert s.real_memory_mb == int(1152 * 1024 * 0.95)
    assert s.node_names == tuple(f"cv-training-node{i:02d}" for i in range(1, 5))
    assert s.head_name == "cv-training-head" and s.switch_name == "cv-training-pg"
    assert [p.name for p in s.partitions] == ["train"]
    assert s.munge_parameter == "/gpuforge/cv-training/slurm/munge-key"


@pytest.mark.parametrize(
    ("stack", "extra", "match"),
    [
        ("cv-training", {"scheduler": "pbs"}, r"gpuforge:scheduler: Input should be 'none' or 'slurm'"),
        ("cv-training", {"autoscaling": "true", "publicIps": "false", "natGateway": "true"},
         r"gpuforge:scheduler: 'slurm' with autoscaling"),
        ("nlp-inference", {}, r"gpuforge:scheduler: 'slurm' with kubernetes 'eks'"),
        ("nlp-inference", {"kubernetes": "none"}, r"profile nlp-inference \(inference\) has no Slurm layout"),
        # the profile is the first thing wrong there, not the OS
        ("nlp-inference", {"kubernetes": "none", "os": "ubuntu-22.04"},
         r"gpuforge:scheduler: profile nlp-inference \(inference\) has no Slurm layout"),
        # 21.08.5 has no cgroup/v2 plugin; 22.04 boots cgroup v2 (tests/slurm/test_slurm_plugins.py)
        ("risk-sim", {"os": "ubuntu-22.04"}, r"gpuforge:os: 'ubuntu-22.04' with scheduler slurm: Ubuntu 22.04's "
                                             r"Slurm 21.08.5 has no cgroup/v2 plugin"),
    ],
)
def test_refused_with_the_key_and_the_fix(stack: str, extra: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        parse_stack_config(slurm_raw(stack, **extra), stack)
    assert err.value.hint


def test_every_training_profile_has_one_default_partition() -> None:
    for name in ("cv-training", "risk-sim"):
        doc = yaml.safe_load(Path(PROJECT / "core" / "profiles" / f"{name}.yaml").read_text())
        parts = doc["scheduler"]["slurm"]["partitions"]
        assert sum(bool(p.get("default")) for p in parts) == 1
