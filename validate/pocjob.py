"""The POC as a Kubernetes Job (issue 23): EKS stacks measure what a pod sees, time-sliced GPUs included.

The shipped script travels in a ConfigMap mounted read-only at /gpuforge (as the SSH path mounts
its private folder), the Job runs the pinned NGC image by tag and digest with one GPU share
(`nvidia.com/gpu: 1`, the device plugin's resource; under time-slicing that is one replica),
and the pod's log is the script's output, judged by validate/poc.py like any transport's.
Bounded twice: the Job's activeDeadlineSeconds, and a local deadline on the polling. The Job and
the ConfigMap are deleted afterwards (best effort; both carry the gpuforge-poc label).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from gpuforge.validate.poc import IN_CONTAINER, SCRIPT, Image, NodeFacts, container_command, provenance_env
from gpuforge.validate.transport import CommandResult, Outcome

LABEL = {"app.kubernetes.io/managed-by": "gpuforge-poc"}


def manifests(workload: str, image: Image, facts: NodeFacts, name: str, *, mirror_location: str | None = None,
              extra: tuple[str, ...] = (), timeout_s: float = 900.0, gpu_resource: str = "nvidia.com/gpu",
              node_selector: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ConfigMap, Job) for one POC run."""
    inner = container_command(workload, NodeFacts(facts.instance_type, 1, facts.node_count, facts.gpu_share), extra)
    env = provenance_env(image, facts, inner)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": LABEL},
          "data": {SCRIPT.name: SCRIPT.read_text()}}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [{"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "poc",
            "image": image.pull_ref(mirror_location),
            "command": inner,
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "resources": {"limits": {gpu_resource: "1"}},
            "volumeMounts": [{"name": "script", "mountPath": IN_CONTAINER, "readOnly": True}],
            "securityContext": {"allowPrivilegeEscalation": False},
        }],
        "volumes": [{"name": "script", "configMap": {"name": name}}],
    }  # fmt: skip
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": LABEL},
           "spec": {"backoffLimit": 0, "activeDeadlineSeconds": int(timeout_s), "ttlSecondsAfterFinished": 600,
                    "template": {"metadata": {"labels": LABEL}, "spec": pod_spec}}}  # fmt: skip
    return cm, job


def run_job(kubeconfig: str, namespace: str, workload: str, image: Image, facts: NodeFacts, *,
            mirror_location: str | None = None, extra: tuple[str, ...] = (), timeout_s: float = 900.0,
            poll_s: float = 2.0, node_selector: dict[str, str] | None = None) -> CommandResult:
    """Run the Job and return the pod's log as a CommandResult (node: the pod's node)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    name = f"gpuforge-poc-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    cm, job = manifests(workload, image, facts, name, mirror_location=mirror_location, extra=extra,
                        timeout_s=timeout_s, node_selector=node_selector)
    what = f"Job {namespace}/{name}"

    def failed(outcome: Outcome, detail: str, node: str = "kubernetes", stdout: str = "") -> CommandResult:
        return CommandResult(node, what, outcome, None, stdout, "", time.monotonic() - start, detail)

    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except (config.ConfigException, OSError, ValueError) as exc:
        return failed(Outcome.UNREACHABLE, f"cannot load kubeconfig {kubeconfig}: {exc}")
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    try:
        try:
            core.create_namespaced_config_map(namespace, cm)
            batch.create_namespaced_job(namespace, job)
        except (ApiException, HTTPError) as exc:
            return failed(Outcome.UNREACHABLE, f"could not create the {what}: {_why(exc)}")
        deadline = start + timeout_s + 30  # the Job's own deadline ends the pod first
        status: Any = None
        while time.monotonic() < deadline:
            status = batch.read_namespaced_job_status(name, namespace).status
            if (status.succeeded or 0) > 0 or (status.failed or 0) > 0:
                break
            time.sleep(poll_s)
        pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
        node = (pods[0].spec.node_name or "kubernetes") if pods else "kubernetes"
        log = core.read_namespaced_pod_log(pods[0].metadata.name, namespace) if pods else ""
        if status is None or not ((status.succeeded or 0) > 0 or (status.failed or 0) > 0):
            return failed(Outcome.TIMEOUT, f"{what} did not finish within {timeout_s:g} s", node, log)
        rc = 0 if (status.succeeded or 0) > 0 else 1
        return CommandResult(node, what, Outcome.OK, rc, log, "", time.monotonic() - start)
    except (ApiException, HTTPError) as exc:
        return failed(Outcome.UNREACHABLE, f"{what}: {_why(exc)}")
    finally:
        for delete in (lambda: batch.delete_namespaced_job(name, namespace, propagation_policy="Background"),
                       lambda: core.delete_namespaced_config_map(name, namespace)):
            try:
                delete()
            except (ApiException, HTTPError):
                pass  # best effort: leftovers carry the gpuforge-poc label and a TTL
        api.close()


def _why(exc: Exception) -> str:
    status, reason = getattr(exc, "status", None), getattr(exc, "reason", None)
    return f"HTTP {status} {reason}" if status else str(exc)
