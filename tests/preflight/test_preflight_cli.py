"""`gpuforge preflight` end to end against a real moto server on 127.0.0.1."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from gpuforge.cli import cli, main
from gpuforge.core.config import parse_stack_config
from gpuforge.stackfile import load_stack_config

P_ON_DEMAND, P_SPOT, G_ON_DEMAND = "L-417A185B", "L-7212CCBC", "L-DB2E81BA"
Quotas = Callable[[dict[str, float]], None]
Edit = Callable[..., None]


def preflight(project: Path, stack: str, *extra: str) -> tuple[int, dict[str, Any]]:
    r = CliRunner().invoke(cli, ["preflight", "--stack", stack, "--format", "json", "--project-dir", str(project),
                                 *extra])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return r.exit_code, json.loads(r.stdout)


def by_check(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in doc["results"]:
        out.setdefault(r["check"], r)
    return out


def test_deployable_stack(aws_env: str, project: Path, quotas: Quotas, image_id: str, tmp_path: Path, set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 384, P_SPOT: 0})
    set_stack("cv-training", amiId=image_id)
    junit = tmp_path / "preflight.xml"
    code, doc = preflight(project, "cv-training", "--junit", str(junit))
    results = by_check(doc)
    assert code == 0, [r for r in doc["results"] if r["level"] == "error"]
    # One result per check, in the shared model.
    for name in ("aws.credentials", "ec2.availability-zones", "ec2.offering", "ec2.instance-type",
                 "quota.on-demand-vcpus", "quota.spot-vcpus", "capacity.reservations", "s3express.availability",
                 "ec2.ami", "ec2.network", "ec2.key-pair", "ssm.ngc-parameter", "ec2.launch-permission",
                 "s3express.existing-bucket", "az.choice"):
        assert set(results[name]) == {"check", "level", "targets", "observed", "expected", "message"}, name
    assert results["quota.on-demand-vcpus"]["level"] == "pass"
    assert results["quota.on-demand-vcpus"]["observed"] == {"quota": 384.0, "in_use": 0, "free": 384.0,
                                                           "headroom": 288.0}
    assert results["quota.spot-vcpus"]["level"] == "info"  # 0 spot quota does not block an on-demand stack
    assert results["ec2.launch-permission"]["level"] == "pass"
    assert results["az.choice"]["level"] == "pass"
    assert doc["context"]["az"]["chosen"] == "use1-az4"
    assert "use1-az4" in doc["context"]["az"]["why"]
    suite = ET.parse(junit).getroot()
    assert int(suite.get("tests", "0")) == len(doc["results"])


def test_api_not_served_is_unknown_and_run_completes(aws_env: str, project: Path, quotas: Quotas,
                                                     image_id: str, set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id)
    code, doc = preflight(project, "cv-training")
    cr = by_check(doc)["capacity.reservations"]
    # moto has no DescribeCapacityReservations: the answer is an HTML 500 page, which is not a ClientError.
    assert cr["level"] == "unknown"
    assert "ec2:DescribeCapacityReservations" in cr["message"]
    assert "does not serve" in cr["message"] or "unparseable" in cr["message"]
    assert [r["check"] for r in doc["results"]][-2:] == ["az.choice", "preflight.evidence"]  # ran to the end
    assert code == 0
    strict_code, _ = preflight(project, "cv-training", "--strict")
    assert strict_code == 1


def test_not_offered_in_configured_az_moves_and_pins(aws_env: str, project: Path, quotas: Quotas,
                                                    image_id: str, set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id, azId="use1-az5")  # S3 Express yes, p4de no
    path = project / "stacks" / "Pulumi.cv-training.yaml"
    code, doc = preflight(project, "cv-training")
    choice = by_check(doc)["az.choice"]
    assert code == 1
    assert choice["level"] == "error"
    assert choice["observed"] == "use1-az4"
    assert "use1-az5 does not fit" in choice["message"]
    assert "--pin-az" in choice["message"]
    assert "gpuforge:azId: use1-az5" in path.read_text()  # nothing written without --pin-az

    before = path.read_text()
    code, doc = preflight(project, "cv-training", "--pin-az")
    assert code == 0, [r for r in doc["results"] if r["level"] == "error"]
    assert by_check(doc)["az.pin"]["level"] == "pass"
    assert doc["context"]["az"]["pinned"] is True
    after = path.read_text()
    assert after == before.replace("gpuforge:azId: use1-az5", "gpuforge:azId: use1-az4")  # comments kept
    raw, _ = load_stack_config(project, "cv-training")
    assert parse_stack_config(raw, "cv-training").az_id == "use1-az4"  # what preview and `pulumi up` read

    code, doc = preflight(project, "cv-training")  # a second run agrees with the pinned file
    assert code == 0
    assert by_check(doc)["az.choice"]["message"].startswith("keep use1-az4")


def test_live_offerings_beat_the_catalog(aws_env: str, project: Path, quotas: Quotas, image_id: str, set_stack: Edit) -> None:
    """The catalog lists use1-az4 for p4de; when EC2 stops offering it there, the choice moves."""
    from unittest import mock

    from moto.ec2.models import EC2Backend

    real = EC2Backend.describe_instance_type_offerings

    def without_az4(self: Any, *args: Any, **kwargs: Any) -> Any:
        return [o for o in real(self, *args, **kwargs) if o.get("Location") not in {"use1-az4", "us-east-1d"}]

    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id)
    with mock.patch.object(EC2Backend, "describe_instance_type_offerings", without_az4):
        code, doc = preflight(project, "cv-training")
    results = by_check(doc)
    assert results["ec2.offering"]["observed"] == ["use1-az6"]
    assert "the catalog says use1-az4, use1-az6" in results["ec2.offering"]["message"]
    assert results["az.choice"]["level"] == "error"
    assert doc["context"]["az"]["chosen"] == "use1-az6"
    assert code == 1


def test_quota_too_low(aws_env: str, project: Path, quotas: Quotas, image_id: str, set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 192})  # risk-sim needs 2 × 96
    set_stack("risk-sim", amiId=image_id)
    # A p3dn already running in the account eats half of the quota.
    boto3.client("ec2").run_instances(ImageId=image_id, InstanceType="p3dn.24xlarge", MinCount=1, MaxCount=1)
    code, doc = preflight(project, "risk-sim")
    q = by_check(doc)["quota.on-demand-vcpus"]
    assert code == 1
    assert q["level"] == "error"
    assert q["observed"] == {"quota": 192.0, "in_use": 96, "free": 96.0, "headroom": -96.0}
    assert "L-417A185B" in q["message"]
    assert "--desired-value 384" in q["message"]  # 96 running + 192 needed + one spare node
    assert by_check(doc)["az.choice"]["level"] == "error"
    assert doc["context"]["az"]["chosen"] is None


def test_g_family_quota_without_spare_node_warns(aws_env: str, project: Path, quotas: Quotas, image_id: str,
                                                 set_stack: Edit) -> None:
    quotas({G_ON_DEMAND: 64})  # nlp-inference: 2 × g4dn.8xlarge = 64 vCPUs, nothing left to replace a node
    set_stack("nlp-inference", amiId=image_id)
    code, doc = preflight(project, "nlp-inference")
    q = by_check(doc)["quota.on-demand-vcpus"]
    assert q["level"] == "warning"
    assert "L-DB2E81BA" in q["message"]
    assert code == 0


def test_access_denied_from_auth_mode(aws_env: str, project: Path, quotas: Quotas, image_id: str,
                                      moto_auth: Callable[[float], None], monkeypatch: pytest.MonkeyPatch,
                                      set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id)
    iam = boto3.client("iam")
    iam.create_user(UserName="preflight")
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*", "sts:GetCallerIdentity", "s3:ListAllMyBuckets",
                                       "ssm:DescribeParameters"], "Resource": "*"},
        {"Effect": "Deny", "Action": ["ec2:RunInstances", "servicequotas:*"], "Resource": "*"}]}
    iam.put_user_policy(UserName="preflight", PolicyName="p", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="preflight")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    moto_auth(0)
    code, doc = preflight(project, "cv-training")
    results = by_check(doc)
    assert results["aws.credentials"]["level"] == "pass"
    assert results["ec2.offering"]["level"] == "pass"  # Describe* is allowed
    assert results["quota.on-demand-vcpus"]["level"] == "unknown"
    assert "not allowed" in results["quota.on-demand-vcpus"]["message"]
    launch = results["ec2.launch-permission"]
    assert launch["level"] == "error"
    assert "ec2:RunInstances" in launch["message"]
    assert code == 1


def test_capacity_probe_ice_moves_the_choice(aws_env: str, project: Path, quotas: Quotas, image_id: str, set_stack: Edit) -> None:
    """moto has no CreateCapacityReservation: a server-side stand-in answers ICE in us-east-1d (use1-az4)."""
    from unittest import mock

    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    calls: list[str] = []

    def create(self: Any) -> str:
        zone = self._get_param("AvailabilityZone")
        calls.append(zone)
        if zone == "us-east-1d":
            raise EC2ClientError("InsufficientInstanceCapacity", "We currently do not have sufficient capacity")
        return ('<CreateCapacityReservationResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                "<requestId>1</requestId><capacityReservation><capacityReservationId>cr-0123456789abcdef0"
                "</capacityReservationId></capacityReservation></CreateCapacityReservationResponse>")

    def cancel(self: Any) -> str:
        calls.append("cancel:" + self._get_param("CapacityReservationId"))
        return ('<CancelCapacityReservationResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                "<requestId>2</requestId><return>true</return></CancelCapacityReservationResponse>")

    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id)
    with mock.patch.object(EC2Response, "create_capacity_reservation", create, create=True), \
            mock.patch.object(EC2Response, "cancel_capacity_reservation", cancel, create=True):
        code, doc = preflight(project, "cv-training", "--probe-capacity")
    probes = [r for r in doc["results"] if r["check"] == "capacity.probe"]
    assert [(p["targets"], p["level"]) for p in probes] == [(["use1-az4"], "error"), (["use1-az6"], "pass")]
    assert calls == ["us-east-1d", "us-east-1a", "cancel:cr-0123456789abcdef0"]  # the held capacity is released
    assert doc["context"]["az"]["chosen"] == "use1-az6"
    assert by_check(doc)["az.choice"]["level"] == "error"  # configured use1-az4 has no capacity now
    assert code == 1


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Through `main`, the console-script entry point that turns GpuforgeError into `error:` + exit 2."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    return int(exc.value.code or 0), capsys.readouterr().err


def test_unknown_stack_is_bad_input(aws_env: str, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_main(capsys, "preflight", "--stack", "cv-trainig", "--project-dir", str(project))
    assert code == 2
    assert err.startswith("error: stacks/Pulumi.cv-trainig.yaml not found; known stacks: cv-training")
    assert "Traceback" not in err


def test_bad_config_is_bad_input(aws_env: str, project: Path, set_stack: Edit,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    set_stack("risk-sim", nodeCount="300")  # 0 is Pulumi.yaml's "the profile's" default
    code, err = run_main(capsys, "preflight", "--stack", "risk-sim", "--project-dir", str(project))
    assert code == 2
    assert err.startswith("error: gpuforge:nodeCount: 300 is out of range")


def test_table_output(aws_env: str, project: Path, quotas: Quotas, image_id: str, set_stack: Edit) -> None:
    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id)
    r = CliRunner().invoke(cli, ["preflight", "--stack", "cv-training", "--project-dir", str(project), "--format", "table"])
    assert r.exit_code == 0
    assert "preflight cv-training (us-east-1)" in r.stdout
    assert "AZ: use1-az4: offering, S3 Express One Zone and vCPU quota line up" in r.stdout


def test_spot_stack_uses_spot_quota_and_prices(aws_env: str, project: Path, quotas: Quotas, image_id: str,
                                               set_stack: Edit) -> None:
    quotas({G_ON_DEMAND: 0, "L-3819A6DF": 128})  # no on-demand G quota at all: a spot stack does not need it
    # kubernetes none: spot on the stack's EKS node group is refused (the managed node group is on-demand)
    set_stack("nlp-inference", amiId=image_id, purchaseOption="spot", kubernetes="none")
    code, doc = preflight(project, "nlp-inference")
    results = by_check(doc)
    assert results["quota.spot-vcpus"]["level"] == "pass"
    assert results["quota.on-demand-vcpus"]["level"] == "info"
    price = results["spot.price"]
    assert price["level"] == "info"
    # moto's spot history is placeholder data (0.00001 everywhere); the AZ IDs are what is checked.
    assert set(price["observed"]) == {"use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"}
    assert results["spot.placement-score"]["level"] == "unknown"  # moto does not serve GetSpotPlacementScores
    assert doc["context"]["az"]["chosen"] == "use1-az5"
    assert code == 0


def test_preview_follows_the_pinned_az(aws_env: str, project: Path, quotas: Quotas, image_id: str,
                                       set_stack: Edit) -> None:
    import shutil

    from gpuforge.preview import run_preview

    shutil.copy(Path(__file__).resolve().parents[2] / "__main__.py", project / "__main__.py")
    quotas({P_ON_DEMAND: 384})
    set_stack("cv-training", amiId=image_id, azId="use1-az5")
    code, _ = preflight(project, "cv-training", "--pin-az")
    assert code == 0
    text = run_preview(project, "cv-training").to_json()
    assert "use1-az4" in text  # subnet, volumes and the directory bucket name follow the pinned AZ ID
    assert "use1-az5" not in text
