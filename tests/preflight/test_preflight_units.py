"""Pure parts of preflight (ranking, quota and facts evaluation) and the AWS call wrapper."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from gpuforge.common.results import Level
from gpuforge.preflight.aws import THROTTLE_ROUNDS, Aws, Unavailable
from gpuforge.preflight.compute import evaluate_facts
from gpuforge.preflight.context import Evidence
from gpuforge.preflight.quota import evaluate, quota_class
from gpuforge.preflight.ranking import rank

AZS = ("use1-az1", "use1-az4", "use1-az6")


def ev(**kw: Any) -> Evidence:
    base: dict[str, Any] = {"az_ids": AZS, "offered": {"use1-az4", "use1-az6"}, "s3express": {"use1-az4", "use1-az6"},
                            "quota_ok": True}
    return Evidence(**{**base, **kw})


def test_rank_prefers_configured_among_equals() -> None:
    order = rank(ev(), "use1-az6", 1)
    assert [r.az_id for r in order] == ["use1-az6", "use1-az4", "use1-az1"]
    assert order[0].fits is True
    assert order[-1].fits is False
    assert order[-1].blockers == ("instance type not offered", "no S3 Express One Zone")


def test_rank_reservation_covering_the_request_beats_configured() -> None:
    order = rank(ev(reserved={"use1-az4": 2}), "use1-az6", 2)
    assert order[0].az_id == "use1-az4"
    assert order[0].reserved == 2


def test_rank_unknown_evidence_is_never_a_fit() -> None:
    order = rank(ev(quota_ok=None), "use1-az4", 1)
    assert order[0].fits is None
    assert order[0].unknowns == ("quota unknown",)


def test_rank_subnet_and_ice_block() -> None:
    order = rank(ev(subnet_az="use1-az6", no_capacity={"use1-az6"}), "use1-az4", 1)
    assert all(r.fits is False for r in order)
    az6 = next(r for r in order if r.az_id == "use1-az6")
    assert az6.blockers == ("capacity probe: InsufficientInstanceCapacity",)


def test_quota_classes_from_data() -> None:
    p, g, vt = quota_class("p4de.24xlarge"), quota_class("g4dn.8xlarge"), quota_class("vt1.3xlarge")
    assert p is not None and (p.on_demand, p.spot) == ("L-417A185B", "L-7212CCBC")
    assert g is not None and (g.on_demand, g.spot) == ("L-DB2E81BA", "L-3819A6DF")
    assert vt is not None and vt.on_demand == g.on_demand
    assert quota_class("m5.large") is None


@pytest.mark.parametrize(("limit", "in_use", "level"), [(384, 0, Level.PASS), (288, 96, Level.WARNING),
                                                         (191, 0, Level.ERROR)])
def test_quota_evaluate(limit: float, in_use: int, level: Level) -> None:
    r = evaluate("q", code="L-417A185B", label="P instances", region="us-east-1", limit=limit, in_use=in_use,
                 needed=192, spare=96)
    assert r.level is level
    assert r.observed["headroom"] == limit - in_use - 192


def test_stale_catalog_is_caught() -> None:
    expected = {"gpu_count": 8, "gpu_memory_gib": 80.0, "efa_interfaces": 4}
    assert evaluate_facts("p4de.24xlarge", dict(expected), expected).level is Level.PASS
    r = evaluate_facts("p4de.24xlarge", {**expected, "efa_interfaces": 0}, expected)
    assert r.level is Level.WARNING
    assert "efa_interfaces: EC2 0, catalog 4" in r.message


def throttled(times: int) -> Any:
    # Patched on the HTTP handler, not the backend: moto's backend calls its own
    # describe_availability_zones while it loads, and that must keep working.
    real = EC2Response.describe_availability_zones
    calls = {"n": 0}

    def fake(self: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= times:
            raise EC2ClientError("RequestLimitExceeded", "Request limit exceeded.")
        return real(self)

    return fake, calls


def test_throttling_gets_bounded_extra_rounds(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore gives up at once: only the wrapper retries here
    sleeps: list[float] = []
    fake, calls = throttled(2)
    with mock.patch.object(EC2Response, "describe_availability_zones", fake):
        answer = Aws("us-east-1", sleep=sleeps.append).call("ec2", "describe_availability_zones")
    assert not isinstance(answer, Unavailable)
    assert calls["n"] == 3
    assert sleeps == [1.0, 2.0]  # backoff grows


def test_throttling_that_never_ends_is_unknown_not_a_hang(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    sleeps: list[float] = []
    fake, calls = throttled(10_000)
    with mock.patch.object(EC2Response, "describe_availability_zones", fake):
        answer = Aws("us-east-1", sleep=sleeps.append, backoff_s=(0.0,)).call("ec2", "describe_availability_zones")
    assert isinstance(answer, Unavailable)
    assert answer.kind == "throttled"
    assert answer.code == "RequestLimitExceeded"
    assert len(sleeps) == THROTTLE_ROUNDS
    assert calls["n"] == 2 * (THROTTLE_ROUNDS + 1)  # botocore's attempts in each of the wrapper's rounds


def test_unreachable_endpoint_is_an_error_not_a_crash(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    answer = Aws("us-east-1").call("sts", "get_caller_identity")
    assert isinstance(answer, Unavailable)
    assert answer.kind == "error"
    assert "cannot reach" in answer.reason


class _Buckets:
    """Stands in for the Aws wrapper: ListDirectoryBuckets answers with these names."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def call(self, service: str, op: str, **_: Any) -> Any:
        assert (service, op) == ("s3", "list_directory_buckets")
        return {"Buckets": [{"Name": n} for n in self.names]}


def _bucket_ctx(names: list[str], account: str | None) -> Any:
    from gpuforge.core.catalog import load_catalog
    from gpuforge.core.config import parse_stack_config
    from gpuforge.preflight.context import Context
    from tests.components.stackcfg import base_config

    cfg = parse_stack_config(base_config(), "t")
    return Context(stack="t", cfg=cfg, configured_az="use1-az4", catalog=load_catalog(), aws=_Buckets(names),  # type: ignore[arg-type]
                   evidence=ev(account=account))


def test_existing_directory_bucket_is_looked_up_under_the_accounts_name() -> None:
    from gpuforge.preflight.storage import existing_bucket

    mine = "gpuforge-t-111122223333--use1-az6--x-s3"
    (res,) = existing_bucket(_bucket_ctx([mine], "111122223333"), "use1-az4")
    assert res.level == Level.WARNING and res.expected == "gpuforge-t-111122223333--use1-az4--x-s3"
    (res,) = existing_bucket(_bucket_ctx(["gpuforge-t-111122223333--use1-az4--x-s3"], "111122223333"), "use1-az4")
    assert res.level == Level.PASS
    (res,) = existing_bucket(_bucket_ctx([mine], None), "use1-az4")  # STS failed: no name to look for
    assert res.level == Level.UNKNOWN
