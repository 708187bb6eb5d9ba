"""Sharing plans (time-slicing, MIG) and quota arithmetic, on catalog facts."""

from __future__ import annotations

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import load_catalog
from gpuforge.core.kubernetes.quotas import team_quota
from gpuforge.core.kubernetes.sharing import plan_sharing
from gpuforge.core.profiles import Sharing

CAT = load_catalog()


def gpu(instance: str):
    return CAT.gpu(CAT.instance(instance))


def test_mig_single_strategy_advertises_instances_as_gpus():
    plan = plan_sharing(Sharing(mode="mig", mig_layout=("1g.10gb",) * 7), gpu("p4de.24xlarge"))
    assert plan.mig_strategy == "single" and plan.plugin_config["flags"]["migStrategy"] == "single"
    assert plan.advertised_per_gpu == {"nvidia.com/gpu": 7}


def test_mig_mixed_strategy_advertises_per_profile_resources():
    plan = plan_sharing(Sharing(mode="mig", mig_layout=("3g.40gb", "2g.20gb", "2g.20gb")), gpu("p4de.24xlarge"))
    assert plan.mig_strategy == "mixed"
    assert plan.advertised_per_gpu == {"nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 1}


@pytest.mark.parametrize(
    ("instance", "layout", "needle"),
    [
        ("g4dn.8xlarge", ("1g.10gb",), "has no MIG"),
        ("p4d.24xlarge", ("1g.10gb",), "not a MIG profile of A100"),  # 80 GB profile on a 40 GB A100
        ("p4de.24xlarge", ("4g.40gb", "4g.40gb"), "8 compute slices"),
        ("p4de.24xlarge", (), "is empty"),
    ],
)
def test_bad_mig_layouts_are_refused(instance, layout, needle):
    with pytest.raises(ConfigError, match=needle):
        plan_sharing(Sharing(mode="mig", mig_layout=layout), gpu(instance))


def test_quota_never_eats_into_headroom():
    inst = CAT.instance("g4dn.8xlarge")
    for headroom in (15, 20, 33, 50):
        for teams in (1, 2, 3, 5):
            q = team_quota(inst, 2, {"nvidia.com/gpu": 4}, headroom, teams)
            assert q.gpus["nvidia.com/gpu"] * teams <= 8 * (100 - headroom) / 100
            assert q.cpu_millis * teams <= 64_000 * (100 - headroom) / 100
    one_team = team_quota(inst, 2, {"nvidia.com/gpu": 4}, 15, 1)
    assert one_team.gpus == {"nvidia.com/gpu": 6}  # 8 x 0.85 = 6.8 -> 6
    assert one_team.hard()["requests.nvidia.com/gpu"] == "6"
