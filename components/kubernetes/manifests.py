"""The Kubernetes objects of a GPU stack as plain manifests (camelCase dicts, as `kubectl`
would read them). Pure functions, no Pulumi: `component.py` declares each one as a typed
pulumi-kubernetes resource, and tests validate them against the Kubernetes schema.

Explicit objects, not the NVIDIA Helm chart: a chart is opaque under the mock engine and in
previews (shared/research/pulumi-feasibility.md §8.10), and these few objects are all it adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from gpuforge.components.kubernetes import serving
from gpuforge.core.kubernetes.quotas import TeamQuota
from gpuforge.core.kubernetes.settings import GPU_NODE_LABEL, PLUGIN_APP, KubernetesSettings, defaults
from gpuforge.core.kubernetes.sharing import GPU_RESOURCE, SharingPlan

Manifest = dict[str, Any]

GPU_TAINT_KEY = GPU_RESOURCE
GPU_TAINT = {"key": GPU_TAINT_KEY, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
INFERENCE_APP = "inference"
_RESTRICTED = {  # container hardening that every image here tolerates
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _meta(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpuforge", **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def device_plugin(plan: SharingPlan) -> list[Manifest]:
    """Namespace, ConfigMap (the plugin's config.yaml) and DaemonSet of the NVIDIA device plugin."""
    d = defaults()["device_plugin"]
    ns = d["namespace"]
    config_name = f"{PLUGIN_APP}-config"
    labels = {"app.kubernetes.io/name": PLUGIN_APP}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns)},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(config_name, ns),
            "data": {"config.yaml": yaml.safe_dump(plan.plugin_config, sort_keys=True)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta(PLUGIN_APP, ns, **labels),
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {
                        "labels": labels,
                        # A changed config rolls the pods: the plugin reads its file at start.
                        "annotations": {"gpuforge.io/sharing": f"{plan.mode}:{plan.advertised_per_gpu}"},
                    },
                    "spec": {
                        "priorityClassName": "system-node-critical",
                        "nodeSelector": {GPU_NODE_LABEL: "true"},
                        "tolerations": [GPU_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "containers": [
                            {
                                "name": "nvidia-device-plugin-ctr",
                                "image": d["image"],
                                "args": ["--config-file=/config/config.yaml"],
                                "securityContext": _RESTRICTED,
                                "volumeMounts": [
                                    {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                    {"name": "config", "mountPath": "/config", "readOnly": True},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                            {"name": "config", "configMap": {"name": config_name}},
                        ],
                    },
                },
            },
        },
    ]


EFA_APP = "aws-efa-k8s-device-plugin"


def efa_device_plugin(instance_type: str) -> list[Manifest]:
    """The AWS EFA device plugin DaemonSet on the stack's GPU nodes (defaults.yaml efa_device_plugin)."""
    d = defaults()["efa_device_plugin"]
    labels = {"name": EFA_APP}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _meta(EFA_APP, d["namespace"], **{"app.kubernetes.io/name": EFA_APP}),
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,  # as the chart: it calls no API
                        "priorityClassName": "system-node-critical",
                        "hostNetwork": True,
                        # our GPU nodes carry the GPU taint; the chart tolerates CriticalAddonsOnly
                        "tolerations": [GPU_TOLERATION, {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                        "nodeSelector": {GPU_NODE_LABEL: "true", "node.kubernetes.io/instance-type": instance_type},
                        "containers": [
                            {
                                "name": EFA_APP,
                                "image": d["image"],
                                "securityContext": dict(d["security_context"]),  # the chart's (defaults.yaml)
                                "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}},
                                "volumeMounts": [
                                    {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
                                    {"name": "infiniband-volume", "mountPath": "/dev/infiniband/"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
                            {"name": "infiniband-volume", "hostPath": {"path": "/dev/infiniband/"}},
                        ],
                    },
                },
            },
        }
    ]


def storage_service_account(namespace: str) -> Manifest:
    """The team's service account for the stack's buckets (EKS Pod Identity associates a role with it)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(defaults()["pod_identity"]["service_account"], namespace),
    }


def priority_classes() -> list[Manifest]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": _meta(name),
            "value": spec["value"],
            "preemptionPolicy": spec["preemption"],
            "globalDefault": False,
            "description": f"gpuforge: {name}",
        }
        for name, spec in defaults()["priority_classes"].items()
    ]


def team(name: str, quota: TeamQuota) -> list[Manifest]:
    """A team's Namespace (Pod Security `baseline` enforced), ResourceQuota and LimitRange."""
    lr = defaults()["limit_range"]
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": _meta(name, **{"gpuforge.io/team": name, "pod-security.kubernetes.io/enforce": "baseline"}),
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(f"{name}-quota", name),
            "spec": {"hard": quota.hard()},
        },
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta(f"{name}-defaults", name),
            "spec": {
                "limits": [
                    {"type": "Container", "defaultRequest": dict(lr["default_request"]), "default": dict(lr["default_limit"])}
                ]
            },
        },
    ]


@dataclass(frozen=True)
class InferenceSpec:
    namespace: str
    image: str
    replicas: int
    max_replicas: int
    port: int
    max_batch_size: int
    max_batch_delay_ms: int


def inference_spec(settings: KubernetesSettings, quota: TeamQuota) -> InferenceSpec:
    return InferenceSpec(
        namespace=settings.inference_namespace,
        image=settings.inference_image,
        replicas=settings.inference_replicas,
        # One GPU share per replica: the autoscaler may grow to the team's share and no further.
        max_replicas=max(settings.inference_replicas, quota.gpus.get(GPU_RESOURCE, 0)),
        port=settings.inference_port,
        max_batch_size=settings.max_batch_size,
        max_batch_delay_ms=settings.max_batch_delay_ms,
    )


def inference(spec: InferenceSpec, model_bucket: Any = "") -> list[Manifest]:
    """Deployment, Service, HorizontalPodAutoscaler and PodDisruptionBudget of the inference service."""
    d = defaults()["inference"]
    labels = {"app.kubernetes.io/name": INFERENCE_APP}
    resources = {"cpu": d["cpu"], "memory": d["memory"], GPU_RESOURCE: "1"}  # one time-sliced share
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(INFERENCE_APP, spec.namespace, **labels),
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": defaults()["pod_identity"]["service_account"],
                    "priorityClassName": "gpuforge-inference",
                    "nodeSelector": {GPU_NODE_LABEL: "true"},
                    "tolerations": [GPU_TOLERATION],
                    # Spread replicas over nodes: one node's GPU failing must not take all of them.
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": labels},
                        }
                    ],
                    # The model repository: the team's models from the stack's bucket, or the
                    # default model (components/kubernetes/serving.py).
                    "initContainers": [serving.fetch_models_container(_RESTRICTED)],
                    "volumes": serving.model_volumes(),
                    "containers": [
                        {
                            "name": "server",
                            "image": spec.image,
                            "ports": [{"name": "http", "containerPort": spec.port}],
                            # Dynamic batching is the server's job; these are its knobs.
                            "env": [
                                {"name": "MAX_BATCH_SIZE", "value": str(spec.max_batch_size)},
                                {"name": "MAX_BATCH_DELAY_MS", "value": str(spec.max_batch_delay_ms)},
                                {"name": "MODEL_REPOSITORY", "value": serving.MODELS_DIR},
                            ],
                            "resources": {"requests": resources, "limits": resources},
                            "volumeMounts": [{"name": "models", "mountPath": serving.MODELS_DIR}],
                            **serving.server_settings(spec.image, spec.port),
                            "securityContext": _RESTRICTED,
                        }
                    ],
                },
            },
        },
    }
    return [
        serving.default_model_configmap(spec.namespace, _meta, spec.max_batch_size, spec.max_batch_delay_ms),
        serving.storage_configmap(spec.namespace, _meta, model_bucket),
        deployment,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(INFERENCE_APP, spec.namespace, **labels),
            "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta(INFERENCE_APP, spec.namespace, **labels),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": INFERENCE_APP},
                "minReplicas": spec.replicas,
                "maxReplicas": spec.max_replicas,
                # CPU stands in for load; GPU-utilisation scaling needs DCGM exporter + an adapter.
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": d["hpa_cpu_utilization_percent"]},
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta(INFERENCE_APP, spec.namespace, **labels),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
        },
    ]
