"""Item 9 of issue 10: Auto Scaling members share one Name tag, and bootstrap names the host from
it; the group also tags them gpuforge-name-suffix=instance-id, which bootstrap
(tests/bootstrap/test_bootstrap_sandbox.py::test_auto_scaling_node_appends_its_instance_id) and
discover (tests/validate/test_discover.py::test_single_auto_scaling_node_is_named_as_its_host) read."""

from __future__ import annotations

from gpuforge.components.autoscaling import NAME_SUFFIX_TAG
from gpuforge.validate import discover
from tests.aws.conftest import one
from tests.components.stackcfg import base_config


def test_group_members_carry_the_name_suffix_tag(record) -> None:
    run = record(base_config(autoscaling=True, budgetUsd=900000, publicIps=False), stack="asg").run
    tags = {t["key"]: t for t in one(run, "aws:autoscaling/group:Group").inputs["tags"]}
    assert tags["Name"]["value"] == "asg-node"
    assert tags[NAME_SUFFIX_TAG] == {"key": NAME_SUFFIX_TAG, "value": "instance-id", "propagateAtLaunch": True}


def test_discover_reads_the_tag_the_group_writes() -> None:
    assert discover.NAME_SUFFIX_TAG == NAME_SUFFIX_TAG
