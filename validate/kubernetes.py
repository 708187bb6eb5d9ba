"""The Kubernetes check of a GPU stack, through the kubernetes Python client and a kubeconfig.

Three results per run: the GPU nodes advertise the expected `nvidia.com/gpu` count (GPUs x
time-slicing replicas, or MIG instances), the device plugin pods are ready, and a pod asking for
one GPU runs nvidia-smi and sees the expected model. Unreachable API or missing evidence is
`unknown` or `error`, never `pass`. Imports no Pulumi (DESIGN.md: validate stands alone).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from gpuforge.common.results import CheckResult, Level

NODES = "k8s.gpu-nodes"
PLUGIN = "k8s.device-plugin"
SMI_POD = "k8s.gpu-pod"
SMI_IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"  # smallest CUDA image with nvidia-smi mounted in
# The GPU row of nvidia-smi's default table: index, name, then Persistence-M (On/Off) on Linux or
# the driver model (WDDM/TCC) on Windows and WSL-less Windows captures (nvidia_gpu_exporter's
# windows-x86_64 610.62 capture, tests/validate/corpus/smi_table/).
_SMI_GPU_LINE = re.compile(r"^\|\s+\d+\s+(?P<name>[^|]+?)\s{2,}(?:On|Off|WDDM|TCC|MCDM)\s+\|", re.MULTILINE)


@dataclass(frozen=True)
class KubernetesExpect:
    gpu_nodes: int
    advertised_per_node: dict[str, int]  # extended resource -> count on each GPU node
    gpu_model: str | None = None  # substring nvidia-smi must show, e.g. "T4"
    node_selector: str = "gpuforge.io/gpu=true"
    plugin_namespace: str = "nvidia-device-plugin"
    plugin_selector: str = "app.kubernetes.io/name=nvidia-device-plugin"
    smi_namespace: str = "nvidia-device-plugin"
    smi_image: str = SMI_IMAGE
    run_smi_pod: bool = True
    pod_timeout_s: float = 300.0
    poll_s: float = 2.0
    sources: dict[str, str] = field(default_factory=dict)


def expect_from_profile(profile_name: str, instance_type: str | None = None, node_count: int | None = None
                        ) -> KubernetesExpect:
    """What a gpuforge stack of this profile should show, from the profile, catalog and defaults."""
    from gpuforge.core.catalog import load_catalog
    from gpuforge.core.kubernetes.settings import GPU_NODE_LABEL, PLUGIN_APP, defaults
    from gpuforge.core.kubernetes.sharing import plan_sharing
    from gpuforge.core.profiles import load_profile

    catalog = load_catalog()
    profile = load_profile(profile_name)
    instance = catalog.instance(instance_type or profile.shape.instance_type)
    plan = plan_sharing(profile.sharing, catalog.gpu(instance))
    ns = defaults()["device_plugin"]["namespace"]
    return KubernetesExpect(
        gpu_nodes=node_count or profile.shape.node_count,
        advertised_per_node={r: n * instance.gpu_count for r, n in plan.advertised_per_gpu.items()},
        gpu_model=catalog.gpu(instance).family,
        node_selector=f"{GPU_NODE_LABEL}=true",
        plugin_namespace=ns,
        plugin_selector=f"app.kubernetes.io/name={PLUGIN_APP}",
        smi_namespace=ns,
        sources={
            "advertised_per_node": f"catalog {instance.name} ({instance.gpu_count} GPU) x profile {profile.name} "
            f"sharing {plan.mode} {plan.advertised_per_gpu}",
            "gpu_nodes": f"profile {profile.name} shape.node_count" if node_count is None else "stated",
        },
    )


# --- pure halves: API objects (as the API returns them, JSON) -> results ---------------------


def _quantity(text: Any) -> int | None:
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


def evaluate_nodes(node_list: dict[str, Any], expect: KubernetesExpect) -> list[CheckResult]:
    items = node_list.get("items") or []
    names = tuple(sorted(i["metadata"]["name"] for i in items))
    results = []
    if len(items) < expect.gpu_nodes:
        results.append(CheckResult(NODES, Level.ERROR, names, len(items), expect.gpu_nodes,
                                   f"{len(items)} node(s) match {expect.node_selector}, expected {expect.gpu_nodes}"))
    for item in sorted(items, key=lambda i: i["metadata"]["name"]):
        name = item["metadata"]["name"]
        alloc = (item.get("status") or {}).get("allocatable") or {}
        observed = {r: _quantity(alloc.get(r)) for r in expect.advertised_per_node}
        if observed == expect.advertised_per_node:
            results.append(CheckResult(NODES, Level.PASS, (name,), observed, expect.advertised_per_node,
                                       "node advertises the expected GPU resources"))
        elif all(v in (None, 0) for v in observed.values()):
            results.append(CheckResult(NODES, Level.ERROR, (name,), observed, expect.advertised_per_node,
                                       "no GPU resource advertised: is the device plugin running on this node?"))
        else:
            results.append(CheckResult(NODES, Level.ERROR, (name,), observed, expect.advertised_per_node,
                                       "GPU resource count differs (sharing replicas or MIG layout not applied?)"))
    return results


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def evaluate_plugin_pods(pod_list: dict[str, Any], expect: KubernetesExpect) -> CheckResult:
    pods = pod_list.get("items") or []
    ready = sorted(p["metadata"]["name"] for p in pods if _ready(p))
    not_ready = sorted(p["metadata"]["name"] for p in pods if not _ready(p))
    targets = tuple(ready + not_ready)
    if not pods:
        return CheckResult(PLUGIN, Level.ERROR, (), 0, expect.gpu_nodes,
                           f"no pods match {expect.plugin_selector} in namespace {expect.plugin_namespace}")
    if not_ready or len(ready) < expect.gpu_nodes:
        return CheckResult(PLUGIN, Level.ERROR, targets, len(ready), expect.gpu_nodes,
                           f"{len(ready)} device plugin pod(s) ready; not ready: {', '.join(not_ready) or '-'}")
    return CheckResult(PLUGIN, Level.PASS, targets, len(ready), expect.gpu_nodes, "device plugin pods ready")


def parse_smi_gpus(log: str) -> list[str]:
    """GPU names from nvidia-smi's default table (`|   0  Tesla T4   On  | ...`)."""
    return [m.group("name").strip() for m in _SMI_GPU_LINE.finditer(log)]


def evaluate_smi_pod(phase: str, log: str, node: str, expect: KubernetesExpect) -> CheckResult:
    targets = (node,) if node else ()
    if phase != "Succeeded":
        return CheckResult(SMI_POD, Level.ERROR, targets, phase, "Succeeded", f"nvidia-smi pod ended {phase}")
    gpus = parse_smi_gpus(log)
    if not gpus:
        return CheckResult(SMI_POD, Level.UNKNOWN, targets, log[:200], "an nvidia-smi GPU table",
                           "pod succeeded but its log shows no GPU table")
    if len(gpus) != 1:
        return CheckResult(SMI_POD, Level.ERROR, targets, gpus, 1, "a pod asking for one GPU saw several")
    if expect.gpu_model and expect.gpu_model.lower() not in gpus[0].lower():
        return CheckResult(SMI_POD, Level.ERROR, targets, gpus[0], expect.gpu_model, "unexpected GPU model")
    return CheckResult(SMI_POD, Level.PASS, targets, gpus[0], expect.gpu_model, "a one-GPU pod ran nvidia-smi")


# --- the live half: the kubernetes client ----------------------------------------------------


def smi_pod_manifest(expect: KubernetesExpect, name: str) -> dict[str, Any]:
    key, _, value = expect.node_selector.partition("=")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuforge-validate"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {key: value},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "nvidia-smi",
                "image": expect.smi_image,
                "command": ["nvidia-smi"],
                "resources": {"limits": {"nvidia.com/gpu": "1"}},
                "securityContext": {"allowPrivilegeEscalation": False},
            }],
        },
    }


def run_kubernetes_checks(kubeconfig_path: str, expect: KubernetesExpect) -> list[CheckResult]:
    """All three checks against the cluster of `kubeconfig_path`."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        api_client = config.new_client_from_config(config_file=kubeconfig_path)
    except (config.ConfigException, OSError, ValueError) as exc:
        return [CheckResult(NODES, Level.UNKNOWN, (), None, None, f"cannot load kubeconfig {kubeconfig_path}: {exc}")]
    core = client.CoreV1Api(api_client)
    as_json = api_client.sanitize_for_serialization
    results: list[CheckResult] = []
    try:
        try:
            nodes = as_json(core.list_node(label_selector=expect.node_selector))
            results += evaluate_nodes(nodes, expect)
            pods = as_json(core.list_namespaced_pod(expect.plugin_namespace, label_selector=expect.plugin_selector))
            results.append(evaluate_plugin_pods(pods, expect))
        except (ApiException, HTTPError) as exc:
            return [*results, CheckResult(NODES if not results else PLUGIN, Level.UNKNOWN, (), None, None,
                                          f"Kubernetes API call failed: {_why(exc)}")]
        if expect.run_smi_pod:
            results.append(_run_smi_pod(core, expect))
    finally:
        api_client.close()
    return results


def _run_smi_pod(core: Any, expect: KubernetesExpect) -> CheckResult:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    name = f"gpuforge-smi-{uuid.uuid4().hex[:8]}"
    ns = expect.smi_namespace
    try:
        core.create_namespaced_pod(ns, smi_pod_manifest(expect, name))
    except (ApiException, HTTPError) as exc:
        return CheckResult(SMI_POD, Level.UNKNOWN, (), None, None, f"could not create the test pod: {_why(exc)}")
    try:
        deadline = time.monotonic() + expect.pod_timeout_s
        phase, node = "Pending", ""
        while time.monotonic() < deadline:
            pod = core.read_namespaced_pod(name, ns)
            phase, node = pod.status.phase or "Pending", pod.spec.node_name or ""
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(expect.poll_s)
        else:
            return CheckResult(SMI_POD, Level.ERROR, (node,) if node else (), phase, "Succeeded",
                               f"test pod still {phase} after {expect.pod_timeout_s:g}s (no free GPU share?)")
        log = core.read_namespaced_pod_log(name, ns)
        return evaluate_smi_pod(phase, log, node, expect)
    except (ApiException, HTTPError) as exc:
        return CheckResult(SMI_POD, Level.UNKNOWN, (), None, None, f"test pod: {_why(exc)}")
    finally:
        try:
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
        except (ApiException, HTTPError):
            pass  # best effort: a leftover pod is named gpuforge-smi-* and has finished


def _why(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or exc
    return f"HTTP {status} {reason}" if status else str(reason)
