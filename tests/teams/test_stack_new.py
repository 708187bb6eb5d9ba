"""`gpuforge stack new`: rendering, refusal to overwrite, bad input, drift of committed team
stacks, and the three-command flow (new, preview with policies, cost)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.commands.stack import StackRequest, render_stack

ROOT = Path(__file__).resolve().parents[2]
HEADER = "# Rendered by `gpuforge stack new "


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def rendered_stack_files() -> list[Path]:
    return sorted(p for p in (ROOT / "stacks").glob("Pulumi.*.yaml") if p.read_text().startswith(HEADER))


def request_from_header(path: Path) -> StackRequest:
    line = path.read_text().splitlines()[0]
    args = shlex.split(line[len(HEADER) : line.rindex("`")])
    opts = dict(zip(args[::2], args[1::2], strict=True))
    budget = opts.get("--budget")
    return StackRequest(
        opts["--team"], opts["--profile"], opts.get("--region"), int(budget) if budget else None, opts.get("--owner")
    )


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    """A scratch project: program, project file, templates and team files, no stacks."""
    p = tmp_path / "proj"
    (p / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, p / name)
    for sub in ("templates", "teams"):
        shutil.copytree(ROOT / "stacks" / sub, p / "stacks" / sub)
    return p


def test_committed_team_stacks_match_their_template_and_team_file() -> None:
    files = rendered_stack_files()
    assert len(files) >= 2, "expected the committed example team stacks"
    for path in files:
        req = request_from_header(path)
        assert path.name == f"Pulumi.{req.stack}.yaml"
        assert render_stack(req, ROOT) == path.read_text(), f"{path.name} drifted: re-render with --force"


def test_drift_is_detected(proj: Path) -> None:
    path = rendered_stack_files()[0]
    req = request_from_header(path)
    team_file = proj / "stacks" / "teams" / f"{req.team}.yaml"
    team_file.write_text(team_file.read_text().replace("gpu_quota:", "gpu_quota: 1  #"))
    assert render_stack(req, proj, proj / "stacks" / "teams") != path.read_text()


@pytest.mark.parametrize("path", rendered_stack_files(), ids=lambda p: p.stem)
def test_committed_team_stacks_preview_cleanly_with_policies(path: Path, capsys) -> None:
    stack = path.name[len("Pulumi.") : -len(".yaml")]
    code, _, err = run_cli(["preview", "--stack", stack, "--project-dir", str(ROOT)], capsys)
    assert code == 0, err


def test_new_preview_cost_in_three_commands(proj: Path, capsys) -> None:
    code, out, err = run_cli(
        ["stack", "new", "--team", "search", "--profile", "nlp-inference", "--project-dir", str(proj)], capsys
    )
    assert code == 0, err
    assert "wrote stacks/Pulumi.search-nlp-inference.yaml" in out
    text = (proj / "stacks" / "Pulumi.search-nlp-inference.yaml").read_text()
    assert 'gpuforge:purchaseOption: "on-demand"' in text and "gpuforge:budgetUsd: 4000" in text
    code, out, err = run_cli(["preview", "--stack", "search-nlp-inference", "--project-dir", str(proj)], capsys)
    assert code == 0, err
    code, out, err = run_cli(["cost", "--stack", "search-nlp-inference", "--project-dir", str(proj), "--format", "json"], capsys)
    assert code == 0, err
    assert '"instance_type": "g4dn.8xlarge"' in out


def test_flags_override_the_team_file(proj: Path, capsys) -> None:
    args = ["stack", "new", "--team", "vision", "--profile", "cv-training", "--budget", "30000", "--owner", "carol"]
    code, _, err = run_cli([*args, "--project-dir", str(proj)], capsys)
    assert code == 0, err
    text = (proj / "stacks" / "Pulumi.vision-cv-training.yaml").read_text()
    assert "gpuforge:budgetUsd: 30000" in text and 'gpuforge:owner: "carol"' in text
    assert text.startswith(f"{HEADER}--team vision --profile cv-training --budget 30000 --owner carol`")


def test_refuses_to_overwrite_unless_forced(proj: Path, capsys) -> None:
    args = ["stack", "new", "--team", "vision", "--profile", "cv-training", "--project-dir", str(proj)]
    assert run_cli(args, capsys)[0] == 0
    path = proj / "stacks" / "Pulumi.vision-cv-training.yaml"
    path.write_text(path.read_text() + "# local edit\n")
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "exists" in err and "--force" in err
    assert path.read_text().endswith("# local edit\n")
    assert run_cli([*args, "--force"], capsys)[0] == 0
    assert not path.read_text().endswith("# local edit\n")


@pytest.mark.parametrize(
    ("args", "flag", "hint"),
    [
        (["--team", "visoin", "--profile", "cv-training"], "--team", "did you mean 'vision'"),
        (["--team", "vision", "--profile", "cv-trainng"], "--profile", "did you mean 'cv-training'"),
        (["--team", "vision", "--profile", "cv-training", "--region", "us-east-9"], "--region", "did you mean"),
        (["--team", "vision", "--profile", "cv-training", "--region", "eu-west-1"], "--region", "S3 Express"),
        (["--team", "vision", "--profile", "cv-training", "--budget", "0"], "--budget", "USD per month"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(proj: Path, capsys, args, flag, hint) -> None:
    code, out, err = run_cli(["stack", "new", *args, "--project-dir", str(proj)], capsys)
    assert code == 2, (out, err)
    assert err.startswith(f"error: {flag}") and hint in err and "Traceback" not in err
    assert list((proj / "stacks").glob("Pulumi.*.yaml")) == []


def test_a_team_file_that_opens_ssh_is_refused(proj: Path, capsys) -> None:
    team = proj / "stacks" / "teams" / "vision.yaml"
    team.write_text(team.read_text().replace("10.20.0.0/16", "0.0.0.0/0"))
    code, _, err = run_cli(["stack", "new", "--team", "vision", "--profile", "cv-training", "--project-dir", str(proj)], capsys)
    assert code == 2 and "ssh_cidrs" in err and "internet" in err
    assert list((proj / "stacks").glob("Pulumi.*.yaml")) == []
