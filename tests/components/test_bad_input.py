"""Bad stack config: exit 2, one clear `error:` line naming the key and the fix, no traceback,
and no resource declared (validation runs before the program)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuforge.cli import main
from tests.components.stackcfg import base_config


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


CASES = [
    ("unknown profile", base_config(profile="cv-trainng"), "gpuforge:profile", "did you mean 'cv-training'"),
    ("unknown key", {**base_config(), "gpuforge:nodeCuont": 2}, "gpuforge:nodeCuont", "did you mean 'nodeCount'"),
    # -1 is Pulumi.yaml's default for nodeCount and means "the profile's" (the CLI needs a default);
    # 0 is refused, never read as the profile's count (issue 22: a p4de for a user scaling to zero)
    ("zero nodes", base_config(nodeCount=0), "gpuforge:nodeCount", "0 nodes"),
    ("zero nodes as text", base_config(nodeCount="0"), "gpuforge:nodeCount", "pulumi destroy"),
    ("negative nodes", base_config(nodeCount=-2), "gpuforge:nodeCount", "1 to 256"),
    # AWS limits config can exceed (core/aws_limits.yaml): 60 inbound IPv4 rules per security group,
    # one of them the cluster's own; and the tag rules for values that become tags (issue 22)
    ("a security group's worth of CIDRs", base_config(sshCidrs=[f"10.{i}.0.0/16" for i in range(60)]),
     "gpuforge:sshCidrs", "60 IPv4 CIDRs"),
    ("a thousand CIDRs", base_config(sshCidrs=[f"10.{i // 250}.{i % 250}.0/24" for i in range(1000)]),
     "gpuforge:sshCidrs", "59 more"),
    ("tag value too long", base_config(owner="o" * 257), "gpuforge:owner", "at most 256"),
    ("tag value character", base_config(costCenter="cc#1"), "gpuforge:costCenter", "'#' cannot be in a tag value"),
    ("too many nodes", base_config(nodeCount=1000), "gpuforge:nodeCount", "1 to 256"),
    ("not a number", base_config(nodeCount="four"), "gpuforge:nodeCount", "integer"),
    ("type not in region", base_config(instanceType="p5e.48xlarge"), "gpuforge:instanceType", "not offered in us-east-1"),
    ("type not in AZ", base_config(azId="use1-az5"), "gpuforge:azId", "use1-az4, use1-az6"),
    ("unknown type", base_config(instanceType="p4de.24xlarg"), "gpuforge:instanceType", "did you mean 'p4de.24xlarge'"),
    ("AZ ID of another region", base_config(azId="usw2-az1"), "gpuforge:azId", "not an AZ ID of us-east-1"),
    ("AZ name not ID", base_config(azId="us-east-1a"), "gpuforge:azId", "AZ IDs, not AZ names"),
    ("no S3 Express in AZ", base_config(instanceType="p4d.24xlarge", azId="use1-az1"), "gpuforge:azId", "S3 Express"),
    ("malformed CIDR", base_config(sshCidrs=["10.0.0.300/8"]), "gpuforge:sshCidrs", "not a valid CIDR"),
    ("host bits set", base_config(sshCidrs=["10.0.0.1/8"]), "gpuforge:sshCidrs", "not a valid CIDR"),
    ("public SSH", base_config(sshCidrs=["0.0.0.0/0"]), "gpuforge:sshCidrs", "allowPublicSsh: true"),
    ("region missing", base_config(**{"aws:region": None}), "aws:region", "not set"),
    ("unknown region", base_config(**{"aws:region": "us-east-9"}), "aws:region", "did you mean 'us-east-1'"),
    ("half an existing network", base_config(vpcId="vpc-0abc12345"), "gpuforge:subnetId", "both vpcId and subnetId"),
    ("bad os", base_config(os="centos-7"), "gpuforge:os", "ubuntu-22.04"),
    # 8 GPUs against floor(8 × 0.85) = 6 allowed with the seed's headroom
    ("over the GPU quota", base_config(gpuQuota=8), "gpuforge:gpuQuota", "allows 6"),
    # cv-training is p4de: describe_instance_types says EnaSrdSupported false
    ("ENA Express unsupported", base_config(enaExpress=True), "gpuforge:enaExpress", "does not support ENA Express"),
    ("ENA Express on EKS", base_config(enaExpress=True, instanceType="g6e.24xlarge", gpuQuota=None, kubernetes="eks"),
     "gpuforge:enaExpress", "not applied to EKS"),
    # EC2 placement group rules: spot that stops or hibernates cannot launch in a placement group (issue 10 item 5)
    ("spot stop in a placement group", base_config(purchaseOption="spot", spotInterruptionBehavior="stop"),
     "gpuforge:spotInterruptionBehavior", "use terminate"),
    ("spot hibernate in a placement group", base_config(purchaseOption="spot", spotInterruptionBehavior="hibernate"),
     "gpuforge:spotInterruptionBehavior", "use terminate"),
    ("interruption behaviour without spot", base_config(spotInterruptionBehavior="stop"),
     "gpuforge:spotInterruptionBehavior", "remove it"),
    # Combinations that deployed but did nothing on EKS (issue 10 item 10)
    ("EKS with an Auto Scaling group", base_config(profile="nlp-inference", azId="use1-az5", kubernetes="eks",
                                                   autoscaling=True), "gpuforge:autoscaling", "never join"),
    ("EKS with spot", base_config(profile="nlp-inference", azId="use1-az5", kubernetes="eks", purchaseOption="spot"),
     "gpuforge:purchaseOption", "on-demand"),
    ("EKS with a capacity reservation", base_config(profile="nlp-inference", azId="use1-az5", kubernetes="eks",
                                                    purchaseOption="capacity-reservation",
                                                    capacityReservationId="cr-0abc12345"),
     "gpuforge:purchaseOption", "on-demand"),
]


@pytest.mark.parametrize(("case", "config", "key", "fix"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_exits_2_naming_the_key(case, config, key, fix, project, capsys):
    proj = project("t", config)
    code, out, err = run_cli(["preview", "--stack", "t", "--project-dir", str(proj)], capsys)
    assert code == 2, (case, out, err)
    assert err.startswith(f"error: {key}:"), err
    assert fix in err, err
    assert "Traceback" not in err and out == ""


def test_the_most_ssh_cidrs_a_security_group_takes_preview(project, capsys):
    """59 IPv4 CIDRs plus the cluster's own rule is 60: AWS's default, accepted."""
    proj = project("t", base_config(sshCidrs=[f"10.{i}.0.0/16" for i in range(59)]))
    code, out, err = run_cli(["preview", "--stack", "t", "--project-dir", str(proj), "--format", "json",
                              "--no-policies"], capsys)  # fmt: skip
    assert code == 0, err
    assert out.count('"fromPort": 22') == 59


def test_public_ssh_allowed_explicitly_previews(project, capsys):
    proj = project("t", base_config(sshCidrs=["0.0.0.0/0"], allowPublicSsh=True))
    # The config allows it; the no-public-ssh policy still refuses it (tests/policy), so skip the pack here.
    args = ["preview", "--stack", "t", "--project-dir", str(proj), "--format", "json", "--no-policies"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert '"cidrIpv4": "0.0.0.0/0"' in out


def test_missing_stack_file_names_known_stacks(project, capsys):
    proj = project("cv-training", base_config())
    code, _, err = run_cli(["preview", "--stack", "cv-trainin", "--project-dir", str(proj)], capsys)
    assert code == 2
    assert "stacks/Pulumi.cv-trainin.yaml not found" in err and "cv-training" in err


def test_broken_yaml_is_bad_input(project, capsys):
    proj = project("t", raw="config:\n  gpuforge:profile: [unclosed\n")
    code, _, err = run_cli(["preview", "--stack", "t", "--project-dir", str(proj)], capsys)
    assert code == 2 and err.startswith("error:") and "YAML" in err


def test_pulumi_yaml_declares_every_config_key():
    from gpuforge.core.config_schema import CONFIG_KEYS
    from tests.components.stackcfg import ROOT

    declared = set(yaml.safe_load((ROOT / "Pulumi.yaml").read_text())["config"])
    assert declared == set(CONFIG_KEYS)


def test_mirror_shows_in_the_preview(project, capsys):
    """gpuforge:mirror through the stack file, the CLI and the program: JSON lists it, the table says so."""
    proj = project("t", base_config(mirror=["efa-installer=http://mirror.internal/efa", "nvcr.io=registry.internal/nvcr"]))
    args = ["preview", "--stack", "t", "--project-dir", str(proj), "--format", "json", "--no-policies"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert json.loads(out)["bootstrap"] == {
        "mirror": {"efa-installer": "http://mirror.internal/efa/", "nvcr.io": "registry.internal/nvcr"}
    }
    code, out, err = run_cli(["preview", "--stack", "t", "--project-dir", str(proj), "--no-policies", "--format", "table"],
                             capsys)
    assert code == 0, err
    assert "bootstrap mirror" in out and "http://mirror.internal/efa/" in out


def test_bad_mirror_entry_is_one_error_line(project, capsys):
    proj = project("t", base_config(mirror=["efa=http://mirror.internal/efa"]))
    code, out, err = run_cli(["preview", "--stack", "t", "--project-dir", str(proj)], capsys)
    assert code == 2 and not out
    assert err.startswith("error: gpuforge:mirror: unknown upstream 'efa'") and "Traceback" not in err


def test_ena_express_on_a_supporting_type_goes_on_card_0_and_into_the_inventory(project, capsys):
    """enaExpress (issue 15): pulumi-aws LaunchTemplateNetworkInterfaceArgs.ena_srd_specification on
    the primary interface only; the stack's inventory tells validate's TCP model it is on."""
    proj = project("t", base_config(instanceType="g6e.24xlarge", enaExpress=True, gpuQuota=None))
    args = ["preview", "--stack", "t", "--project-dir", str(proj), "--format", "json", "--no-policies"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    doc = json.loads(out)
    [lt] = [r for r in doc["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate"]
    nics = lt["inputs"]["networkInterfaces"]
    assert len(nics) == 3  # g6e.24xlarge: 2 cards - ENA primary, EFA-only on card 0 and card 1
    assert nics[0]["enaSrdSpecification"] == {"enaSrdEnabled": True}
    assert "enaSrdSpecification" not in nics[1]
    # the default: no ENA Express anywhere
    proj = project("u", base_config(instanceType="g6e.24xlarge", gpuQuota=None))
    code, out, err = run_cli(["preview", "--stack", "u", "--project-dir", str(proj), "--format", "json", "--no-policies"], capsys)
    assert code == 0, err
    assert "enaSrdSpecification" not in out
