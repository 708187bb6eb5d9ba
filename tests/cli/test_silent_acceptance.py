"""Issue 13 item 6: input that used to be accepted silently, and a narrow blast radius."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Gf


def _stack(project: Path, name: str, text: str) -> None:
    (project / "stacks" / f"Pulumi.{name}.yaml").write_text(text)


def _cv(project: Path) -> str:
    return (project / "stacks" / "Pulumi.cv-training.yaml").read_text()


def test_namespace_typo_is_refused(gf: Gf, project: Path) -> None:
    _stack(project, "typo", _cv(project).replace("config:\n", "config:\n  gpuforg:nodeCount: 9\n", 1))
    r = gf("preview", "--stack", "typo", cwd=project)
    assert r.returncode == 2, r.stderr
    assert "gpuforg:nodeCount" in r.stderr and "did you mean gpuforge:nodeCount?" in r.stderr, r.stderr


def test_the_internet_split_in_two_is_refused_for_ssh(gf: Gf, project: Path) -> None:
    text = _cv(project).replace("    - 10.0.0.0/8\n", "    - 0.0.0.0/1\n    - 128.0.0.0/1\n")
    _stack(project, "open", text)
    r = gf("preview", "--stack", "open", cwd=project)
    assert r.returncode == 2, r.stderr
    assert "0.0.0.0/1 + 128.0.0.0/1 opens SSH to the whole internet" in r.stderr, r.stderr
    _stack(project, "open", text.replace("config:\n", "config:\n  gpuforge:allowPublicSsh: true\n", 1))
    assert gf("preview", "--stack", "open", "--format", "json", "--no-policies", cwd=project).returncode == 0


def test_team_file_cidrs_are_judged_together(gf: Gf, project: Path) -> None:
    team = project / "stacks" / "teams" / "search.yaml"
    lines = [ln for ln in team.read_text().splitlines() if not ln.startswith("ssh_cidrs:")]
    team.write_text("\n".join([*lines, "ssh_cidrs: [0.0.0.0/1, 128.0.0.0/1]"]) + "\n")
    r = gf("stack", "new", "--team", "search", "--profile", "nlp-inference", "--force", cwd=project)
    assert r.returncode == 2 and "opens SSH to the internet" in r.stderr, r.stderr


def test_render_of_a_node_the_stack_does_not_have_is_refused(gf: Gf, project: Path, tmp_path: Path) -> None:
    r = gf("bootstrap", "render", "--stack", "cv-training", "--node", "node99", "--out", str(tmp_path / "r"), cwd=project)
    assert r.returncode == 2, r.stdout
    assert "--node" in r.stderr and "cv-training-node01" in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_render_into_a_used_directory_leaves_no_stale_files(gf: Gf, project: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert gf("bootstrap", "render", "--stack", "cv-training", "--out", str(out), cwd=project).returncode == 0
    stale = out / "opt" / "gpuforge" / "stale-from-an-older-render.sh"
    stale.write_text("echo old\n")
    r = gf("bootstrap", "render", "--stack", "cv-training", "--out", str(out), cwd=project)
    assert r.returncode == 0, r.stderr
    assert not stale.exists()
    count = int(r.stdout.split(" files in ")[0].rsplit(" ", 1)[1])
    assert count + 1 == sum(1 for p in out.rglob("*") if p.is_file())  # the files it reports, plus user-data.b64
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]  # no temp directories left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = gf("bootstrap", "render", "--stack", "cv-training", "--out", str(mine), cwd=project)
    assert r.returncode == 2 and (mine / "notes.txt").read_text() == "keep me", r.stderr


def test_one_broken_team_file_does_not_break_other_teams(gf: Gf, project: Path) -> None:
    search = project / "stacks" / "teams" / "search.yaml"
    search.write_text(search.read_text() + "gpu_quota: -1\n")
    ok = gf("preview", "--stack", "cv-training", "--format", "json", cwd=project)  # the platform team's stack
    assert ok.returncode == 0, ok.stderr
    assert "warning:" in ok.stderr and "search" in ok.stderr
    own = gf("preview", "--stack", "search-nlp-inference", "--format", "json", cwd=project)
    assert own.returncode == 2 and "search.yaml" in own.stderr, own.stderr


def test_stack_given_as_its_file_path(gf: Gf, project: Path) -> None:
    r = gf("cost", "--stack", "stacks/Pulumi.cv-training.yaml", "--format", "json", cwd=project)
    assert r.returncode == 0, r.stderr
    r = gf("preview", "--stack", "stacks/Pulumi.cv-training.yaml", "--format", "json", "--no-policies", cwd=project)
    assert r.returncode == 0, r.stderr


def test_empty_stack_file_and_keys_outside_config(gf: Gf, project: Path) -> None:
    _stack(project, "empty", "")
    r = gf("preview", "--stack", "empty", cwd=project)
    assert r.returncode == 2 and "Pulumi.empty.yaml: the file is empty" in r.stderr, r.stderr
    _stack(project, "flat", "aws:region: us-east-1\ngpuforge:profile: cv-training\n")
    r = gf("preview", "--stack", "flat", cwd=project)
    assert r.returncode == 2, r.stderr
    assert "aws:region, gpuforge:profile are at the top level, not under `config:`" in r.stderr, r.stderr
