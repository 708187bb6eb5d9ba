"""Issue 21 item 5: EKS versions with their support dates, judged on a fixed day.

The suite runs on the build date (tests/conftest.py sets GPUFORGE_TODAY=2026-12-04); tests that
need another day set it themselves."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from gpuforge.cli import main
from gpuforge.common.errors import ConfigError
from gpuforge.core.config import parse_stack_config
from gpuforge.core.costplan import load_platform_prices, stack_cost
from gpuforge.core.kubernetes.settings import default_eks_version, defaults, eks_versions, today
from tests.aws.conftest import OPERATOR_CIDR, eks_config

BUILT = dt.date(2026, 12, 4)


def config(version: str | None = None) -> dict:
    over: dict[str, object] = {"eksPublicAccessCidrs": [OPERATOR_CIDR]}
    if version is not None:
        over["kubernetesVersion"] = version
    return eks_config(**over)


def test_the_suite_runs_on_the_build_date() -> None:
    assert today() == BUILT == defaults()["eks_versions"]["built"]


def test_default_version_is_in_standard_support_on_the_build_date() -> None:
    assert eks_versions()[default_eks_version()].support_on(BUILT) == "standard"
    cfg = parse_stack_config(config(), "t")
    assert cfg.kubernetes is not None and cfg.kubernetes.version == default_eks_version()
    assert cfg.kubernetes.support == "standard"


def test_every_version_names_its_dates_and_source() -> None:
    for v, row in eks_versions().items():
        assert row.end_of_standard < row.end_of_extended, v
        assert row.source.startswith("https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html"), v


@pytest.mark.parametrize("version", ["1.30", "1.31", "1.29"])
def test_versions_past_the_end_of_extended_support_are_refused(version) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_stack_config(config(version), "t")
    text = exc.value.render()
    assert exc.value.key == "gpuforge:kubernetesVersion" and "end of EKS extended support" in text
    assert f"use {default_eks_version()}" in text


def test_unknown_version_is_refused() -> None:
    with pytest.raises(ConfigError, match="support dates"):
        parse_stack_config(config("1.99"), "t")


def test_a_version_in_extended_support_is_priced_at_the_extended_rate() -> None:
    prices = load_platform_prices()
    standard = stack_cost(parse_stack_config(config(), "t"))
    extended_cfg = parse_stack_config(config("1.33"), "t")  # standard support ended 2026-07-29
    assert extended_cfg.kubernetes is not None and extended_cfg.kubernetes.support == "extended"
    extended = stack_cost(extended_cfg)
    plane = {f.item: f.usd_per_hour for f in extended.fixed}
    assert plane["EKS control plane (extended support)"] == prices.eks_extended_usd_per_cluster_hour == 0.60
    assert {f.item: f.usd_per_hour for f in standard.fixed}["EKS control plane"] == 0.10
    before, after = standard.hourly("on_demand"), extended.hourly("on_demand")
    assert before is not None and after == pytest.approx(before + 0.50)


def test_the_day_decides(monkeypatch) -> None:
    monkeypatch.setenv("GPUFORGE_TODAY", "2026-12-01")  # 1.34's last day of standard support
    assert parse_stack_config(config("1.34"), "t").kubernetes.support == "standard"  # type: ignore[union-attr]
    monkeypatch.setenv("GPUFORGE_TODAY", "2026-12-02")  # billed as extended from the start of this day (UTC)
    assert parse_stack_config(config("1.34"), "t").kubernetes.support == "extended"  # type: ignore[union-attr]


def test_preview_and_cost_warn_about_extended_support(tmp_path, capsys) -> None:
    import shutil

    import yaml

    from tests.aws.conftest import ROOT

    (tmp_path / "stacks").mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", tmp_path / "__main__.py")
    (tmp_path / "stacks" / "Pulumi.old.yaml").write_text(yaml.safe_dump({"config": config("1.33")}))
    (tmp_path / "stacks" / "Pulumi.new.yaml").write_text(yaml.safe_dump({"config": config()}))
    for stack, expect in (("old", True), ("new", False)):
        with pytest.raises(SystemExit) as exit_:
            main(["preview", "--stack", stack, "--format", "json", "--no-policies", "--project-dir", str(tmp_path)])
        assert exit_.value.code == 0
        out = json.loads(capsys.readouterr().out)
        warned = [w for w in out["warnings"] if "left EKS standard support on 2026-07-29" in w]
        assert bool(warned) is expect, out["warnings"]
        plane = [line for line in out["cost"]["lines"] if line["item"].startswith("EKS control plane")]
        assert plane[0]["on_demand_usd_per_hour"] == (0.60 if expect else 0.10)
        with pytest.raises(SystemExit) as exit_:
            main(["cost", "--stack", stack, "--format", "json", "--project-dir", str(tmp_path)])
        assert exit_.value.code == 0
        err = capsys.readouterr().err
        assert ("warning: gpuforge:kubernetesVersion 1.33 left EKS standard support" in err) is expect


def test_a_version_about_to_leave_standard_support_is_warned_about(monkeypatch) -> None:
    from gpuforge.core.kubernetes.settings import extended_support_warning

    monkeypatch.setenv("GPUFORGE_TODAY", "2027-03-10")  # 1.35 leaves standard support on 2027-03-27
    settings = parse_stack_config(config(), "t").kubernetes
    assert settings is not None and settings.support == "standard"
    assert "leaves EKS standard support on 2027-03-27 (in 17 days)" in (extended_support_warning(settings) or "")
    monkeypatch.setenv("GPUFORGE_TODAY", "2026-12-04")
    settings = parse_stack_config(config(), "t").kubernetes
    assert settings is not None and extended_support_warning(settings) is None
