"""Item 13 of issue 10: EFA on multi-card types takes one subnet address per node, and the subnet
gpuforge creates is sized for the stack (core/addressing.py has the sources)."""

from __future__ import annotations

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.addressing import addresses_per_node, interface_layout, usable_addresses
from gpuforge.core.catalog import load_catalog
from gpuforge.core.config import parse_stack_config
from tests.aws.conftest import eks_config, one
from tests.components.stackcfg import base_config

P5 = {"instanceType": "p5.48xlarge", "azId": "use1-az4", "gpuQuota": None, "budgetUsd": 900000}


def test_p5_template_has_an_ena_primary_and_32_efa_only_interfaces(record) -> None:
    run = record(base_config(**P5, nodeCount=2), stack="p5").run
    nics = one(run, "aws:ec2/launchTemplate:LaunchTemplate").inputs["networkInterfaces"]
    layout = [(n["networkCardIndex"], n["deviceIndex"], n.get("interfaceType")) for n in nics]
    assert layout[:3] == [(0, 0, None), (0, 1, "efa-only"), (1, 0, "efa-only")]
    assert layout[-1] == (31, 0, "efa-only") and len(layout) == 33
    assert sum(1 for n in nics if n.get("interfaceType") in ("efa", "efa-only")) == 32  # every card's EFA
    # only the primary may carry a public address, and it is an ENA interface
    assert all("associatePublicIpAddress" not in n for n in nics[1:])


def test_addresses_per_node() -> None:
    catalog = load_catalog()
    assert addresses_per_node(catalog.instance("p5.48xlarge")) == 1  # was 32 with an `efa` per card
    assert addresses_per_node(catalog.instance("p4de.24xlarge")) == 1
    assert [i.type for i in interface_layout(catalog.instance("p3dn.24xlarge"))] == ["efa"]  # one card
    assert [i.type for i in interface_layout(catalog.instance("g4dn.xlarge"))] == [None]
    assert usable_addresses("10.42.0.0/28") == 11


@pytest.mark.parametrize(
    ("over", "hint"),
    [
        ({"subnetCidr": "10.42.0.0/28", "nodeCount": 12}, "/27"),
        ({"subnetCidr": "10.42.0.0/28", "nodeCount": 4, "autoscaling": True, "autoscalingMax": 32, "budgetUsd": 9_000_000},
         "32 nodes"),
    ],
)
def test_subnet_too_small_for_the_nodes_is_refused(over, hint) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(base_config(**{**P5, **over}), "t")
    assert exc.value.key == "gpuforge:subnetCidr" and hint in exc.value.render()


def test_eks_counts_system_nodes_and_control_plane() -> None:
    # 2 GPU nodes + 2 system nodes + 16 control-plane addresses = 20 > 11 in a /28
    with pytest.raises(ConfigError, match="EKS control plane"):
        parse_stack_config(eks_config(subnetCidr="10.42.0.0/28"), "t")
    parse_stack_config(eks_config(subnetCidr="10.42.0.0/27"), "t")  # 27 usable: enough
