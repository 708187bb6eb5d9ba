"""The Kubernetes check against recorded (constructed) API responses, through the real client."""

from __future__ import annotations

import copy
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate.kubernetes import (
    NODES,
    PLUGIN,
    SMI_POD,
    evaluate_smi_pod,
    expect_from_profile,
    parse_smi_gpus,
    run_kubernetes_checks,
)
from tests.k8s.fake_api import Scenario, fixture, serve, write_kubeconfig

EXPECT = replace(expect_from_profile("nlp-inference"), pod_timeout_s=10, poll_s=0.01)


def good() -> Scenario:
    return Scenario(fixture("nodes_t4_timesliced.json"), fixture("plugin_pods_ready.json"),
                    pod_log=fixture("nvidia_smi_t4.txt"))


def run(sc: Scenario, tmp_path: Path, expect=EXPECT):
    with serve(sc) as url:
        return run_kubernetes_checks(str(write_kubeconfig(tmp_path / "kubeconfig", url)), expect)


def by_check(results):
    out: dict[str, list] = {}
    for r in results:
        out.setdefault(r.check, []).append(r)
    return out


def test_expectations_come_from_profile_and_catalog():
    # g4dn.8xlarge has 1 T4; nlp-inference time-slices it 4 ways; 2 nodes.
    assert EXPECT.advertised_per_node == {"nvidia.com/gpu": 4}
    assert EXPECT.gpu_nodes == 2
    assert EXPECT.gpu_model == "T4"
    cv = expect_from_profile("cv-training")
    assert cv.advertised_per_node == {"nvidia.com/gpu": 8}  # exclusive: 8 A100s, one each


def test_healthy_cluster_passes_every_check(tmp_path):
    sc = good()
    results = run(sc, tmp_path)
    assert [r.level for r in results] == [Level.PASS] * 4, results
    checks = by_check(results)
    assert sorted(t for r in checks[NODES] for t in r.targets) == ["ip-10-42-3-17.ec2.internal",
                                                                   "ip-10-42-9-201.ec2.internal"]
    assert checks[SMI_POD][0].observed == "Tesla T4"
    # The client asked with the GPU node selector, and the test pod asked for exactly one GPU.
    assert any("labelSelector=gpuforge.io%2Fgpu%3Dtrue" in p for _, p in sc.requests)
    pod = sc.created[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert any(m == "DELETE" for m, _ in sc.requests)  # the test pod is cleaned up


def test_node_without_time_slicing_is_an_error(tmp_path):
    sc = good()
    sc.nodes = copy.deepcopy(sc.nodes)
    sc.nodes["items"][1]["status"]["allocatable"]["nvidia.com/gpu"] = "1"  # plugin ran without its config
    nodes = by_check(run(sc, tmp_path))[NODES]
    bad = [r for r in nodes if r.level is Level.ERROR]
    assert [r.targets for r in bad] == [("ip-10-42-9-201.ec2.internal",)]
    assert bad[0].observed == {"nvidia.com/gpu": 1} and "differs" in bad[0].message


def test_missing_gpu_node_and_resource(tmp_path):
    sc = good()
    sc.nodes = copy.deepcopy(sc.nodes)
    del sc.nodes["items"][1]
    del sc.nodes["items"][0]["status"]["allocatable"]["nvidia.com/gpu"]
    nodes = by_check(run(sc, tmp_path))[NODES]
    assert [r.level for r in nodes] == [Level.ERROR, Level.ERROR]
    assert "1 node(s) match" in nodes[0].message
    assert "no GPU resource advertised" in nodes[1].message


def test_plugin_pod_not_ready(tmp_path):
    sc = good()
    sc.plugin_pods = copy.deepcopy(sc.plugin_pods)
    sc.plugin_pods["items"][0]["status"]["conditions"][1]["status"] = "False"
    plugin = by_check(run(sc, tmp_path))[PLUGIN][0]
    assert plugin.level is Level.ERROR and "nvidia-device-plugin-7xk2p" in plugin.message


def test_no_plugin_pods(tmp_path):
    sc = good()
    sc.plugin_pods = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}
    plugin = by_check(run(sc, tmp_path))[PLUGIN][0]
    assert plugin.level is Level.ERROR and "no pods match" in plugin.message


def test_smi_pod_failed(tmp_path):
    sc = good()
    sc.pod_phases = ["Pending", "Failed"]
    smi = by_check(run(sc, tmp_path))[SMI_POD][0]
    assert smi.level is Level.ERROR and smi.observed == "Failed"


def test_smi_pod_never_scheduled_times_out(tmp_path):
    sc = good()
    sc.pod_phases = ["Pending"]
    smi = by_check(run(sc, tmp_path, replace(EXPECT, pod_timeout_s=0.2)))[SMI_POD][0]
    assert smi.level is Level.ERROR and "still Pending" in smi.message


def test_unreachable_api_is_unknown_not_pass(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    results = run_kubernetes_checks(str(kc), replace(EXPECT, run_smi_pod=False))
    assert [r.level for r in results] == [Level.UNKNOWN]
    assert "API call failed" in results[0].message


def test_bad_kubeconfig_is_unknown(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    results = run_kubernetes_checks(str(path), EXPECT)
    assert [r.level for r in results] == [Level.UNKNOWN] and "cannot load kubeconfig" in results[0].message


def test_smi_parse_and_verdicts():
    log = fixture("nvidia_smi_t4.txt")
    assert parse_smi_gpus(log) == ["Tesla T4"]
    assert evaluate_smi_pod("Succeeded", log, "n1", EXPECT).level is Level.PASS
    assert evaluate_smi_pod("Succeeded", log, "n1", replace(EXPECT, gpu_model="A100")).level is Level.ERROR
    assert evaluate_smi_pod("Succeeded", "exec format error", "n1", EXPECT).level is Level.UNKNOWN
    two = log.replace("|   0  Tesla T4", "|   0  Tesla T4") + log.split("|=====")[1]
    assert len(parse_smi_gpus(two)) == 2
    assert evaluate_smi_pod("Succeeded", two, "n1", EXPECT).level is Level.ERROR


@pytest.mark.parametrize("phase", ["Failed", "Unknown"])
def test_pod_phase_not_succeeded(phase):
    assert evaluate_smi_pod(phase, "", "", EXPECT).level is Level.ERROR
