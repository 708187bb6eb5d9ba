"""The deploy uploads the node install's wheel set to the stack's checkpoint bucket
(components/nodeinstall.py): one object per file the gpuforge phase fetches, under the one prefix
the node role may read (and not write). Offline: the objects are declared from the lock, and no
file is touched or built."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from gpuforge.bootstrap.nodelock import GPUFORGE_LINE, parse_lock, target_for_os
from gpuforge.common.version import __version__
from gpuforge.components.userdata import stack_user_data
from gpuforge.preview import PreviewResult, run_preview

ROOT = Path(__file__).resolve().parents[2]


def node_objects(result: PreviewResult) -> dict[str, dict]:
    return {r.inputs["key"]: r.inputs for r in result.run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")}


def test_the_stack_uploads_every_file_the_phase_fetches(preview_of: Callable[[str], PreviewResult]) -> None:
    result = preview_of("risk-sim")
    t = target_for_os(result.config.os)
    prefix = f"gpuforge-node/{__version__}/x86_64/{t.name}/"
    files = [t.lock_name, GPUFORGE_LINE, *(e.wheel for e in parse_lock(t.lock_file.read_text())),
             f"gpuforge-{__version__}-py3-none-any.whl"]  # fmt: skip
    objs = node_objects(result)
    assert sorted(objs) == sorted(prefix + f for f in files)
    (bucket,) = result.run.of_type("aws:s3/bucket:Bucket")
    for key, inputs in objs.items():
        assert inputs["bucket"] == bucket.inputs["bucket"]  # the stack's checkpoint bucket
        # staged relative to the project directory: the recorded graph is the same on every machine
        assert inputs["source"] == {"fileAsset": f".gpuforge/node-wheels/{__version__}/x86_64/{t.name}/{key.rsplit('/', 1)[1]}"}
    # the node role reads exactly this prefix
    (policy,) = [r for r in result.run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-buckets")]
    stmts = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert stmts["ReadNodeInstall"]["Resource"] == [f"arn:aws:s3:::{bucket.inputs['bucket']}/{prefix}*"]
    # and the nodes' gpuforge phase fetches that prefix, from that bucket
    phase = stack_user_data(result.config).files["opt/gpuforge/phases/gpuforge.sh"]
    assert f"SRC={prefix}" in phase
    named = bucket.inputs["bucket"].replace("000000000000", '"$acct"')  # the node reads its account from IMDS
    assert f"BUCKET={named}" in phase


def test_eks_nodes_boot_no_gpuforge_bootstrap_and_nothing_is_uploaded(preview_of: Callable[[str], PreviewResult]) -> None:
    assert node_objects(preview_of("nlp-inference")) == {}


def test_a_stack_with_a_wheel_mirror_uploads_nothing(project: Callable[..., Path]) -> None:
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.risk-sim.yaml").read_text())
    raw["config"]["gpuforge:mirror"] = ["gpuforge-wheels=http://mirror.internal/gpuforge/"]
    proj = project("risk-sim", raw["config"])
    result = run_preview(proj, "risk-sim")
    assert node_objects(result) == {}
    assert not (proj / ".gpuforge").exists()
