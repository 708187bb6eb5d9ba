"""validate on ENA Express nodes expects MTU 8900 (what the bootstrap sets), not EC2's 9001.

ENA Express (SRD) carries packets of up to MTU 8900 (EC2 User Guide, ENA Express prerequisites;
amzn/amzn-ec2-ena-utilities ena-express/check-ena-express-settings.sh @ 6ecb14cf1dc3: "MTU <= 8900
(required)"): on a node left at 9001 the TCP model's 25 Gbit/s per flow does not hold.
"""

from __future__ import annotations

from gpuforge.common.results import Level
from gpuforge.validate import thresholds
from gpuforge.validate.system import MtuCheck

# /sys/class/net as MtuCheck's command prints it on a p5 node (interface names as Ubuntu's).
AT_EC2_DEFAULT = "lo 65536\nens5 9001\ndocker0 1500\n"
SET_BY_BOOTSTRAP = "lo 65536\nens5 8900\ndocker0 1500\n"


def _judge(stdout: str, exp: thresholds.Expectations) -> Level:
    check = MtuCheck()
    (result,) = check.evaluate("n1", check.parse(stdout), exp)
    return result.level


def test_ena_express_nodes_expect_8900_from_the_rule_not_the_inventory() -> None:
    exp = thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": True})
    assert exp.extra["mtu"] == 8900 and "ENA Express" in exp.sources["mtu"]
    # An inventory that states EC2's 9001 on ENA Express nodes contradicts the rule: 8900 wins.
    assert thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": True, "mtu": 9001}).extra["mtu"] == 8900
    # A smaller stated MTU (a path that needs it) stays.
    assert thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": True, "mtu": 1500}).extra["mtu"] == 1500
    assert "mtu" not in thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": False}).extra
    # Asked for on a type without it (EnaSrdSupported false): nothing changes on the node.
    assert "mtu" not in thresholds.build_expectations("cv-training", "p4de.24xlarge", {"ena_express": True}).extra


def test_mtu_check_passes_8900_and_flags_9001_on_ena_express_nodes() -> None:
    exp = thresholds.build_expectations("cv-training", "p5.48xlarge", {"ena_express": True})
    assert _judge(SET_BY_BOOTSTRAP, exp) is Level.PASS
    assert _judge(AT_EC2_DEFAULT, exp) is Level.ERROR
    check = MtuCheck()
    (r,) = check.evaluate("n1", check.parse(AT_EC2_DEFAULT), exp)
    assert "8800-8900" in r.message and "falls back to plain ENA" in r.message
    # Without ENA Express the jumbo-frame expectation is unchanged: 9001 passes a stated 9001.
    plain = thresholds.build_expectations("cv-training", "p5.48xlarge", {"mtu": 9001})
    assert _judge(AT_EC2_DEFAULT, plain) is Level.PASS
