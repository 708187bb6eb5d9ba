"""Issue 13 item 9: `stack list`, `doctor` (bounded: nothing it probes can hang it) and shell
completion of stack, profile, team and instance type names, through the console script."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tests.cli.conftest import GPUFORGE, Gf, base_env


def test_stack_list(gf: Gf, project: Path) -> None:
    (project / "stacks" / "Pulumi.broken.yaml").write_text(
        "config:\n  aws:region: us-east-1\n  gpuforge:profile: no-such-profile\n  gpuforge:azId: use1-az4\n")
    r = gf("stack", "list", cwd=project)
    assert r.returncode == 0, r.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in r.stdout.splitlines() if not line.startswith("#")}
    assert rows["cv-training"][1:6] == ["platform", "cv-training", "us-east-1", "use1-az4", "1× p4de.24xlarge"]
    assert rows["vision-cv-training"][1] == "vision" and rows["vision-cv-training"][6] == "spot"
    assert "no-such-profile" in rows["broken"][-1]  # listed with its problem; the others still are
    doc = json.loads(gf("stack", "list", "--format", "json", cwd=project).stdout)
    cv = next(s for s in doc if s["stack"] == "cv-training")
    cost = json.loads(gf("cost", "-s", "cv-training", "--format", "json", cwd=project).stdout)
    assert cv["usd_per_hour"] == round(cost["stacks"][0]["options"]["on_demand"]["usd_per_hour"], 2)


def test_doctor_is_bounded_and_says_how_to_fix(gf: Gf, tmp_path: Path, silent_port: int) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hung = bin_dir / "pulumi"
    hung.write_text("#!/bin/sh\nsleep 120\n")  # a Pulumi CLI that never answers
    hung.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    env = base_env(PATH=f"{bin_dir}:{os.path.dirname(GPUFORGE)}:/usr/bin:/bin", HOME=str(home),
                   AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x", AWS_REGION="us-east-1",
                   AWS_ENDPOINT_URL=f"http://127.0.0.1:{silent_port}", AWS_CONFIG_FILE="/dev/null",
                   AWS_SHARED_CREDENTIALS_FILE="/dev/null", SSH_AUTH_SOCK="")
    start = time.monotonic()
    r = gf("doctor", "--format", "json", env=env, cwd=tmp_path, timeout=90)
    took = time.monotonic() - start
    assert took < 45, f"doctor took {took:.0f} s"
    found = {f["what"]: f for f in json.loads(r.stdout)}
    assert found["pulumi CLI"]["verdict"] == "unknown" and "did not answer" in found["pulumi CLI"]["detail"]
    assert found["AWS credentials"]["verdict"] == "unknown" and found["AWS credentials"]["fix"]
    assert found["SSH key"]["verdict"] == "warning" and "ssh-keygen" in found["SSH key"]["fix"]
    assert found["known_hosts"]["verdict"] == "warning" and found["known_hosts"]["fix"]
    assert found["python"]["verdict"] == "ok"
    hung.write_text("#!/bin/sh\necho v3.231.0\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("key")
    (home / ".ssh" / "known_hosts").write_text("node1 ssh-ed25519 AAAA\n")
    found = {f["what"]: f for f in json.loads(gf("doctor", "--format", "json", env=env, cwd=tmp_path, timeout=90).stdout)}
    assert found["pulumi CLI"]["verdict"] == "ok" and "v3.231.0" in found["pulumi CLI"]["detail"]
    assert found["SSH key"]["verdict"] == "ok" and found["known_hosts"]["verdict"] == "ok"


def _complete(gf: Gf, line: str, cwd: Path) -> list[str]:
    words = line.split(" ")
    env = base_env(_GPUFORGE_COMPLETE="bash_complete", COMP_WORDS=line, COMP_CWORD=str(len(words) - 1))
    r = gf(env=env, cwd=cwd)
    return [ln.split(",", 1)[1] for ln in r.stdout.splitlines() if "," in ln]


def test_shell_completion_of_names(gf: Gf, project: Path) -> None:
    assert _complete(gf, "gpuforge preview --stack cv", project) == ["cv-training"]
    assert set(_complete(gf, "gpuforge cost --stack ", project)) >= {"cv-training", "nlp-inference", "risk-sim"}
    assert _complete(gf, "gpuforge catalog suggest --profile ri", project) == ["risk-sim"]
    assert _complete(gf, "gpuforge stack new --team vis", project) == ["vision"]
    assert "p4de.24xlarge" in _complete(gf, "gpuforge catalog show p4d", project)
