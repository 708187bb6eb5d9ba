"""components/userdata.py: the agent and the metric permission follow the idle alarm; spot adds the pre-pulled image."""

from __future__ import annotations

import json

import pytest

from gpuforge.components import userdata
from gpuforge.components.compute import node_policy
from gpuforge.components.monitoring import agent_config
from gpuforge.core.config import StackConfig, parse_stack_config
from gpuforge.stackfile import load_stack_config
from tests.components.stackcfg import ROOT


@pytest.fixture
def cfg() -> StackConfig:
    raw, _ = load_stack_config(ROOT, "nlp-inference")
    return parse_stack_config(raw, "nlp-inference")


def test_stack_with_idle_alarm_gets_the_agent_and_the_namespace(cfg: StackConfig) -> None:
    r = userdata.stack_user_data(cfg)
    assert r.plan is not None and "cloudwatch-agent" in [p.name for p in r.plan.phases]
    assert json.loads(r.files["etc/gpuforge/cloudwatch-agent.json"]) == agent_config(cfg.stack)
    assert userdata.metric_namespace(cfg) == agent_config(cfg.stack)["metrics"]["namespace"]


def test_no_idle_alarm_no_agent_and_no_put_metric_data(cfg: StackConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(userdata, "idle_alarm_args", lambda _cfg: None)
    r = userdata.stack_user_data(cfg)
    assert r.plan is not None and "cloudwatch-agent" not in [p.name for p in r.plan.phases]
    assert "etc/gpuforge/cloudwatch-agent.json" not in r.files
    assert userdata.metric_namespace(cfg) is None
    doc = json.loads(node_policy("arn:dir", ["arn:aws:s3:::b"], None, userdata.metric_namespace(cfg)))
    assert not [s for s in doc["Statement"] if "cloudwatch:PutMetricData" in s["Action"]]


def test_spot_stack_pre_pulls_what_the_checkpoint_runs(cfg: StackConfig) -> None:
    spot = cfg.model_copy(update={"fleet": cfg.fleet.model_copy(update={"purchase_option": "spot"})})
    r = userdata.stack_user_data(spot, account_id="123456789012")
    assert r.plan is not None and r.plan.checkpoint_command and r.plan.checkpoint_images
    # the bucket in the account's regional namespace (core/bucketnames.py)
    assert f"s3://gpuforge-{cfg.stack}-ckpt-123456789012-us-east-1-an/" in r.plan.checkpoint_command
    image = r.plan.checkpoint_images[0]
    assert f"--pull never -v /scratch/checkpoints:/ckpt:ro {image} " in r.plan.checkpoint_command
    assert image in r.files["opt/gpuforge/phases/spot-watcher.sh"]
    assert userdata.stack_user_data(cfg).plan.checkpoint_images == ()  # type: ignore[union-attr]
