"""Evidence or nothing (issue 22): for every transport, a channel that does not reach the node
gives `error`/`unknown`, never `pass`. Each runs the installed CLI (or, for Kubernetes, the
check function the CLI calls) with the channel really broken:

- SSH: the node's port is closed (connection refused).
- local: no `sh` on PATH, so no command can start on "this node".
- Slurm: the real `srun` in a network namespace of its own with no slurm.conf (SLURM_CONF
  unset): it cannot fetch a configuration and exits 1 with
  `srun: fatal: Could not establish a configuration source`. Before issue 22 this node was
  reported `node.reachable: pass ("reached through srun")`.
- Kubernetes: the kubeconfig's API server is a closed port.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import GPUFORGE, base_env, closed_port

__all__ = ["closed_port"]


def _inventory(tmp: Path, port: int = 22, **ssh: str) -> Path:
    inv = tmp / "inv.json"
    inv.write_text(json.dumps({"ssh": {"port": port, **ssh}, "nodes": [{"name": "node1", "host": "127.0.0.1"}]}))
    return inv


def _report(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert res.returncode == 1, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _no_pass_without_evidence(doc: dict[str, Any]) -> None:
    levels = {(r["check"], r["level"]) for r in doc["results"]}
    assert ("node.reachable", "error") in levels, levels
    passed = [r for r in doc["results"] if r["level"] == "pass"]
    assert not passed, passed


def _validate(tmp: Path, *args: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()) -> Any:
    argv = [*prefix, GPUFORGE, "validate", "--format", "json", "--checks", "system", "--out", str(tmp / "ev"), *args]
    return subprocess.run(argv, cwd=tmp, env=env or base_env(), capture_output=True, text=True, timeout=240, check=False)


def test_ssh_to_a_closed_port_is_an_error(tmp_path: Path, closed_port: int) -> None:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (tmp_path / "known_hosts").write_text("")
    inv = _inventory(tmp_path, closed_port, key_file=str(key), known_hosts=str(tmp_path / "known_hosts"))
    doc = _report(_validate(tmp_path, "--inventory", str(inv), "--connect-timeout", "2"))
    _no_pass_without_evidence(doc)


def test_local_without_a_shell_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    res = _validate(tmp_path, "--transport", "local", "--inventory", str(_inventory(tmp_path)),
                    env=base_env(PATH=str(empty)))  # fmt: skip
    doc = _report(res)
    _no_pass_without_evidence(doc)
    reach = next(r for r in doc["results"] if r["check"] == "node.reachable")
    assert "cannot start sh" in reach["message"], reach


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("srun") is None or shutil.which("unshare") is None,
                    reason="needs root (unshare -n) and Slurm's srun")  # fmt: skip
def test_slurm_whose_srun_reaches_no_controller_is_not_a_pass(tmp_path: Path) -> None:
    env = {k: v for k, v in base_env().items() if k != "SLURM_CONF"}
    res = _validate(tmp_path, "--transport", "slurm", "--inventory", str(_inventory(tmp_path)), env=env,
                    prefix=("unshare", "-n"))  # fmt: skip
    doc = _report(res)
    _no_pass_without_evidence(doc)
    reach = next(r for r in doc["results"] if r["check"] == "node.reachable")
    assert "srun" in reach["message"] or "slurm" in reach["message"], reach


def test_kubernetes_api_out_of_reach_is_unknown(tmp_path: Path, closed_port: int) -> None:
    pytest.importorskip("kubernetes")
    from gpuforge.validate.kubernetes import expect_from_profile, run_kubernetes_checks

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": f"http://127.0.0.1:{closed_port}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))  # fmt: skip
    results = run_kubernetes_checks(str(kubeconfig), expect_from_profile("nlp-inference"))
    assert results and all(r.level.value in ("unknown", "error") for r in results), results
