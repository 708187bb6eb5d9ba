"""`aws:` keys in a stack file are the aws provider's own: a typo (`aws:regoin`) is refused with a
did-you-mean instead of doing nothing (issue 22). The list is checked against the installed
pulumi-aws's own config module, the file that reads them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from gpuforge.core.config_rules import AWS_PROVIDER_KEYS
from tests.components.stackcfg import base_config


def test_the_list_is_pulumi_aws_s_own() -> None:
    pulumi_aws = pytest.importorskip("pulumi_aws")
    vars_py = Path(pulumi_aws.__file__).parent / "config" / "vars.py"
    read = set(re.findall(r"__config__\.get\w*\('(\w+)'", vars_py.read_text()))
    assert read == set(AWS_PROVIDER_KEYS), (read ^ set(AWS_PROVIDER_KEYS))


@pytest.mark.parametrize(("key", "fix"), [("aws:regoin", "did you mean aws:region?"), ("aws:profle", "aws:profile"),
                                          ("aws:defaultTag", "aws:defaultTags")])  # fmt: skip
def test_a_typo_of_an_aws_key_is_refused(key: str, fix: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_stack_config({**base_config(), key: "x"}, "t")
    assert err.value.key == key and fix in err.value.render()


def test_the_aws_keys_in_use_pass() -> None:
    cfg = parse_stack_config({**base_config(), "aws:profile": "ops", "aws:skipMetadataApiCheck": "false"}, "t")
    assert cfg.region == "us-east-1"
