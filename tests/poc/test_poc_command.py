"""`gpuforge poc --stack cv-training` on a test host: the product's own path (stack config, the
transport, the node command with its heredoc, the container runtime's command line, the shipped
script, the result file, the cost arithmetic), with docker as the stand-in of tests/poc/standins.py
(listed in tests/SUBSTITUTIONS.md) running the script on this machine's CPU torch."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from gpuforge.bootstrap.versions import load_versions
from gpuforge.validate.inventory import Node
from gpuforge.validate.poc import Image, NodeFacts, judge, load_results, node_command, parse_result
from gpuforge.validate.transport import CommandResult, LocalTransport, Outcome
from tests.poc.standins import child_env, install_docker, torch_available

ROOT = Path(__file__).resolve().parents[2]
needs_torch = pytest.mark.skipif(torch_available() is not None, reason=str(torch_available()))


def _pin() -> Image:
    p = load_versions().poc_image
    return Image(p.image, p.digest)


def _gpuforge(*args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuforge.cli", "--project-dir", str(ROOT), *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Any]:
    bin_dir, log = tmp_path / "bin", tmp_path / "docker.jsonl"
    install_docker(bin_dir, log)
    inv = tmp_path / "inv.yaml"
    inv.write_text("profile: cv-training\nnodes:\n  - {name: node1, host: 127.0.0.1}\n")
    return {"env": child_env(bin_dir), "log": log, "inv": inv, "out": tmp_path / "results", "tmp": tmp_path}


@needs_torch
def test_poc_cv_training_on_a_cpu_test_host_gives_a_result_and_a_cost_line(host: dict[str, Any]) -> None:
    proc = _gpuforge("poc", "--stack", "cv-training", "--inventory", str(host["inv"]), "--transport", "local",
                     "--quick", "--out", str(host["out"]), "--format", "plain", env=host["env"], cwd=host["tmp"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\tresnet50-train\tok\tCPU (" in out
    assert "# cost of epoch: $" in out and "at on-demand" in out and "spot $" in out
    assert "# note: CPU run:" in out and "nvidia-smi lists no GPU" in out
    # the container runtime was asked for the pinned image by tag AND digest, with the script mounted read-only
    asked = [json.loads(ln) for ln in host["log"].read_text().splitlines()]
    assert len(asked) == 1
    pin = load_versions().poc_image
    assert asked[0]["image"] == f"{pin.image}@{pin.digest}"
    assert asked[0]["command"][:2] == ["python", "/gpuforge/poc_workloads.py"]
    assert asked[0]["options"]["--network"] == "none" and "--gpus" not in asked[0]["options"]
    assert asked[0]["env"]["GPUFORGE_POC_IMAGE_DIGEST"] == pin.digest
    # the result file: the script's document, the run, the cost, and a label that keeps it out of rankings
    [doc] = load_results(host["out"])
    assert doc["label"] == "measured-cpu" and doc["run"]["quick"] is True and doc["run"]["stack"] == "cv-training"
    assert doc["provenance"]["image_digest"] == pin.digest and doc["provenance"]["instance_type"] == "p4de.24xlarge"
    cost = doc["cost"]
    assert cost["unit"] == "epoch" and cost["purchase_option"] == "on-demand"
    # the cost's epoch is the script's own (images/s is rounded to 3 decimals in between)
    assert cost["seconds_per_unit"] == pytest.approx(doc["result"]["epoch_seconds"], rel=1e-2)


@needs_torch
def test_a_run_past_its_bound_is_unknown_and_exits_1(host: dict[str, Any]) -> None:
    # A container that hangs, whatever this machine's speed (the step used to be a real BERT run
    # that was merely slower than 10 s on a busy machine, and passed the bound on a quiet one).
    docker = host["tmp"] / "bin" / "docker"
    docker.write_text("#!/bin/sh\nexec sleep 120\n")
    proc = _gpuforge("poc", "--stack", "cv-training", "--inventory", str(host["inv"]), "--transport", "local",
                     "--quick", "--timeout", "10", "--out", str(host["out"]), "--format", "plain",
                     "--workload", "bert-infer", env=host["env"], cwd=host["tmp"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "\tunknown\t" in proc.stdout and "# reason: the run ended at its bound" in proc.stdout
    [doc] = [json.loads(p.read_text()) for p in host["out"].glob("*.json")]
    assert doc["status"] == "unknown" and doc["cost"] is None and "result" not in doc


def test_bad_input_is_one_error_line(host: dict[str, Any]) -> None:
    proc = _gpuforge("poc", "--stack", "cv-training", "--transport", "local", env=host["env"], cwd=host["tmp"])
    assert proc.returncode == 2 and proc.stderr.startswith("error: pass --inventory FILE") and "Traceback" not in proc.stderr
    proc = _gpuforge("poc", "--stack", "cv-training", "--inventory", str(host["inv"]), "--node", "nodeX",
                     "--transport", "local", env=host["env"], cwd=host["tmp"])
    assert proc.returncode == 2 and "error: --node: 'nodeX' is not in the inventory" in proc.stderr


def test_node_command_pins_tag_and_digest_and_goes_through_the_mirror() -> None:
    img = _pin()
    facts = NodeFacts("p4de.24xlarge", 8, 1)
    direct = node_command("resnet50-train", img, facts)
    assert f"{img.ref}@{img.digest}" in direct
    mirrored = node_command("resnet50-train", img, facts, mirror_location="registry.internal/nvcr")
    assert f"registry.internal/nvcr/nvidia/pytorch:24.08-py3@{img.digest}" in mirrored
    assert f"{img.ref}@{img.digest}" not in mirrored  # the upstream name stays only as provenance (-e)
    # all the node's GPUs: torchrun, one rank per GPU, and --gpus all
    assert "torchrun --standalone --nproc_per_node=8 /gpuforge/poc_workloads.py resnet50-train" in direct
    assert "--gpus all" in direct
    one = node_command("bert-infer", img, NodeFacts("g4dn.8xlarge", 1, 2, "time-slicing, 4 replicas per GPU"))
    assert "python /gpuforge/poc_workloads.py bert-infer" in one and "GPUFORGE_POC_GPU_SHARE=time-slicing, 4 replicas" in one


def test_node_command_runs_as_written_in_a_posix_shell(host: dict[str, Any]) -> None:
    """The heredoc, the quoting and the mount survive sh: the stand-in records what docker got."""
    cmd = node_command("mc-fp64", _pin(), NodeFacts(None, 0, 1), extra=("--help",))
    res = LocalTransport().run(Node(name="n", host="127.0.0.1"), f"PATH={host['env']['PATH']}; export PATH\n{cmd}", 120)
    assert res.ok, res.stderr
    assert "usage:" in res.stdout and "resnet50-train" in res.stdout
    [asked] = [json.loads(ln) for ln in host["log"].read_text().splitlines()]
    assert asked["command"][-1] == "--help" and asked["mounts"][0][1] == "/gpuforge"


def _res(stdout: str = "", outcome: Outcome = Outcome.OK, rc: int | None = 0, detail: str = "") -> CommandResult:
    return CommandResult("node1", "cmd", outcome, rc, stdout, "", 1.0, detail)


def test_judge_never_turns_missing_evidence_into_a_figure() -> None:
    assert judge(_res(outcome=Outcome.TIMEOUT, rc=None, detail="command ran past its bound (9.0 s)"),
                 "mc-fp64").status == "unknown"
    assert judge(_res(outcome=Outcome.UNREACHABLE, rc=None, detail="no route"), "mc-fp64").reason == "no route"
    r = judge(_res("docker: Error response from daemon: pull access denied\n", rc=125), "mc-fp64")
    assert r.status == "unknown" and "not JSON" in (r.reason or "") and "exit 125" in (r.reason or "")
    ok_doc = {"tool": "gpuforge-poc", "schema": 1, "workload": "mc-fp64", "status": "ok",
              "provenance": {"device": {"kind": "cuda"}}, "result": {"paths_per_s": 0}}
    r = judge(_res(json.dumps(ok_doc)), "mc-fp64")
    assert r.status == "unknown" and "positive paths_per_s" in (r.reason or "")
    assert judge(_res(json.dumps(ok_doc | {"result": {"paths_per_s": 5.0}})), "bert-infer").status == "unknown"
    with pytest.raises(Exception, match="not gpuforge-poc"):
        parse_result('{"tool": "gpuforge-compute", "schema": 1}')


@needs_torch
@pytest.mark.netns
def test_poc_over_ssh_on_a_network_namespace_test_host(tmp_path: Path) -> None:
    """The same run over SSH: a namespace host with its own sshd, the stand-in docker first on its PATH."""
    from tests.validate.testbed import Testbed, missing_requirements

    why = missing_requirements()
    if why:
        pytest.skip(why)
    system = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                            capture_output=True, text=True, check=False).stdout.strip()
    if system != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {system or 'absent'}, the venv {sys.version_info[:2]}: torch's wheel would not load")
    bin_dir, log = tmp_path / "bin", tmp_path / "docker.jsonl"
    install_docker(bin_dir, log, "/usr/bin/python3", sysconfig.get_paths()["purelib"])
    bed = Testbed(1, bin_dirs={1: bin_dir}).up()
    try:
        inv = tmp_path / "inv.json"
        inv.write_text(json.dumps(bed.inventory(profile="cv-training")))
        out = tmp_path / "results"
        proc = _gpuforge("poc", "--stack", "cv-training", "--inventory", str(inv), "--quick", "--workload", "mc-fp64",
                         "--out", str(out), "--format", "plain", env=dict(child_env(bin_dir)), cwd=tmp_path)
    finally:
        bed.down()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\tmc-fp64\tok\t" in proc.stdout and "# cost of 1e9 paths: $" in proc.stdout
    assert "counted GFLOP/s per GPU; no ratio: CPU run: no GPU peak to compare" in proc.stdout
    [doc] = load_results(out)
    assert doc["provenance"]["host"] == "node1" and doc["run"]["transport"] == "ssh"
    [asked] = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert asked["image"].endswith(load_versions().poc_image.digest)


@needs_torch
def test_poc_as_a_kubernetes_job_on_an_eks_stack(tmp_path: Path) -> None:
    """--kubeconfig: the real kubernetes client against the API stand-in of tests/poc/kubeapi.py, whose
    stand-in kubelet runs the Job's container command with this machine's torch."""
    from tests.k8s.fake_api import write_kubeconfig
    from tests.poc.kubeapi import NODE, Cluster, serve

    cluster = Cluster()
    with serve(cluster) as url:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        proc = _gpuforge("poc", "--stack", "nlp-inference", "--kubeconfig", str(kubeconfig), "--workload", "mc-fp64",
                         "--quick", "--out", str(tmp_path / "out"), "--format", "plain", env=dict(child_env(tmp_path)),
                         cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{NODE}\tmc-fp64\tok\t" in proc.stdout and "# cost of 1e9 paths: $" in proc.stdout
    [job] = cluster.jobs.values()
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    pin = load_versions().poc_image
    assert c["image"] == f"{pin.image}@{pin.digest}" and c["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert c["command"][:2] == ["python", "/gpuforge/poc_workloads.py"]
    assert pod["nodeSelector"] == {"gpuforge.io/gpu": "true"} and job["spec"]["activeDeadlineSeconds"] == 900
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["GPUFORGE_POC_GPU_SHARE"].startswith("time-slicing")
    assert sorted(cluster.deleted) == sorted([f"job/{job['metadata']['name']}", f"configmap/{job['metadata']['name']}"])
    [doc] = load_results(tmp_path / "out")
    assert doc["run"]["transport"] == "kubernetes-job" and doc["node"] == NODE
    assert doc["provenance"]["gpu_share"].startswith("time-slicing")


def test_the_job_and_configmap_are_valid_kubernetes_objects() -> None:
    """Against the API's own OpenAPI schemas (kubernetes-validate, strict: unknown fields fail), at
    the Kubernetes version the EKS stacks default to, as `gpuforge preview` checks its manifests."""
    from gpuforge.components.kubernetes.schema import validate_manifests
    from gpuforge.core.config_schema import RawStackConfig
    from gpuforge.validate.pocjob import manifests

    version = RawStackConfig.model_fields["kubernetesVersion"].default
    cm, job = manifests("bert-infer", _pin(), NodeFacts("g4dn.8xlarge", 1, 2, "time-slicing, 4 replicas per GPU"),
                        "gpuforge-poc-0a1b2c3d", node_selector={"gpuforge.io/gpu": "true"})
    assert validate_manifests([cm, job], version) == []
    broken = json.loads(json.dumps(job))
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limit"] = {}
    assert validate_manifests([broken], version)  # the strict check does catch a misspelt field
