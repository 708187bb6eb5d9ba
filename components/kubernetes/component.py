"""GpuKubernetes: the Kubernetes layer of a GPU stack, on EKS or on an existing cluster.

Declares, through a pulumi-kubernetes provider for that cluster: the NVIDIA device plugin
configured from the profile's sharing mode, PriorityClasses, one namespace per team with a
quota that leaves the headroom free, and (inference profiles) the inference service.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

from gpuforge.common.errors import ConfigError
from gpuforge.components.kubernetes import manifests as m
from gpuforge.components.monitoring import IdleAlarm
from gpuforge.components.operations import idle_alarm_args
from gpuforge.core.addressing import control_plane_cidr
from gpuforge.core.catalog import load_catalog
from gpuforge.core.config import PROJECT, StackConfig
from gpuforge.core.kubernetes.quotas import team_quota
from gpuforge.core.kubernetes.settings import KubernetesSettings, defaults
from gpuforge.core.kubernetes.sharing import GPU_RESOURCE, plan_sharing

# kind -> the typed pulumi-kubernetes class, so the preview shows real Kubernetes types.
_KINDS: dict[str, Any] = {
    "Namespace": k8s.core.v1.Namespace,
    "ServiceAccount": k8s.core.v1.ServiceAccount,
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Service": k8s.core.v1.Service,
    "ResourceQuota": k8s.core.v1.ResourceQuota,
    "LimitRange": k8s.core.v1.LimitRange,
    "DaemonSet": k8s.apps.v1.DaemonSet,
    "Deployment": k8s.apps.v1.Deployment,
    "HorizontalPodAutoscaler": k8s.autoscaling.v2.HorizontalPodAutoscaler,
    "PodDisruptionBudget": k8s.policy.v1.PodDisruptionBudget,
    "PriorityClass": k8s.scheduling.v1.PriorityClass,
}


@dataclass(frozen=True)
class KubernetesArgs:
    config: StackConfig
    vpc_id: pulumi.Input[str] | None = None
    subnet_id: pulumi.Input[str] | None = None
    route_table_id: pulumi.Input[str] | None = None  # node subnet's; a private endpoint's path is routed here
    main_route_table_id: pulumi.Input[str] | None = None  # the control-plane subnet follows the main table
    security_group_id: pulumi.Input[str] | None = None
    placement_group: pulumi.Input[str] | None = None
    alert_topic_arn: pulumi.Input[str] | None = None  # where the EKS stack's idle-GPU alarm alerts
    # The stack's buckets (directory, checkpoint): pods reach them through EKS Pod Identity.
    bucket_arns: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    checkpoint_bucket: pulumi.Input[str] | None = None  # teams' models live under models/<team>/ here


def manifests_for(cfg: StackConfig, model_bucket: Any = "") -> list[m.Manifest]:
    """Every Kubernetes object of the stack, in apply order (namespaces before their contents)."""
    settings = _settings(cfg)
    plan = plan_sharing(cfg.profile.sharing, load_catalog().gpu(cfg.instance))
    quota = team_quota(cfg.instance, cfg.node_count, plan.advertised_per_gpu, settings.headroom_percent,
                       len(settings.teams))
    docs = [*m.device_plugin(plan), *m.priority_classes()]
    if cfg.instance.efa:  # pods ask for vpc.amazonaws.com/efa; the plugin advertises the node's EFA devices
        docs += m.efa_device_plugin(cfg.instance.name)
    for team in settings.teams:
        docs += [*m.team(team, quota), m.storage_service_account(team)]
    if cfg.profile.bootstrap.recipe == "inference":
        docs += m.inference(m.inference_spec(settings, quota), model_bucket)
    return docs


def _settings(cfg: StackConfig) -> KubernetesSettings:
    if cfg.kubernetes is None:
        raise ValueError("GpuKubernetes needs a stack with gpuforge:kubernetes set")
    return cfg.kubernetes


class GpuKubernetes(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str] | None

    def __init__(self, name: str, args: KubernetesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:kubernetes:GpuKubernetes", name, None, opts)
        cfg = args.config
        settings = _settings(cfg)
        # Before any resource: a bad MIG layout fails here. Models come from the bucket only where
        # pod identity lets the pods read it (gpuforge's own EKS cluster).
        docs = manifests_for(cfg, (args.checkpoint_bucket or "") if settings.mode == "eks" else "")

        eks: Any = None  # the EksCluster on gpuforge's own cluster: what the objects wait for
        if settings.mode == "eks":
            from gpuforge.components.kubernetes.eks import EksArgs, EksCluster, PrivateAccess, StorageAccess

            eks = EksCluster(
                name,
                EksArgs(
                    version=settings.version,
                    region=cfg.region,
                    vpc_id=_need(args.vpc_id, "vpc_id"),
                    node_subnet_id=_need(args.subnet_id, "subnet_id"),
                    control_plane_az_id=settings.control_plane_az_id or "",
                    control_plane_cidr=control_plane_cidr(cfg.vpc_cidr, cfg.subnet_cidr),
                    node_security_group_id=_need(args.security_group_id, "security_group_id"),
                    placement_group=_need(args.placement_group, "placement_group"),
                    instance=cfg.instance,
                    node_count=cfg.node_count,
                    template_version=cfg.node_template_version,
                    root_volume_gib=cfg.root_volume_gib,
                    public_access_cidrs=settings.public_access_cidrs,
                    private_access=PrivateAccess(
                        cidrs=settings.private_access_cidrs,
                        transit_gateway_id=settings.transit_gateway_id or "",
                        route_table_id=settings.transit_gateway_route_table_id or "",
                        route_table_ids=(_need(args.route_table_id, "route_table_id"),
                                         _need(args.main_route_table_id, "main_route_table_id")),
                    ) if settings.endpoint_access == "private" else None,
                    labels={"gpuforge.io/profile": cfg.profile.name},
                    tags=cfg.tags,
                    container_insights=idle_alarm_args(cfg) is not None,
                    storage=StorageAccess(
                        directory_bucket_arn=_need_arns(args.bucket_arns)[0],
                        checkpoint_bucket_arn=_need_arns(args.bucket_arns)[1],
                        namespaces=settings.teams,
                    ),
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            # The nodes boot the EKS AMI, not gpuforge's bootstrap and its CloudWatch agent: the
            # idle alarm reads the GPU metric the add-on publishes for this cluster instead.
            if (idle := idle_alarm_args(cfg, eks_cluster_name=eks.name)) is not None:
                # Declared under GpuCluster before the add-on existed: the alias updates that alarm
                # in place rather than replacing it.
                moved = [pulumi.Alias(parent=opts.parent)] if opts is not None and opts.parent is not None else None
                IdleAlarm(name, idle, _need(args.alert_topic_arn, "alert_topic_arn"),
                          opts=pulumi.ResourceOptions(parent=self, aliases=moved))
            kubeconfig: pulumi.Output[str] = eks.kubeconfig
            self.kubeconfig = eks.kubeconfig
        else:
            kubeconfig = _existing_kubeconfig()
            self.kubeconfig = None  # the user's own secret: not re-exported

        provider = k8s.Provider(f"{name}-k8s", kubeconfig=kubeconfig, opts=pulumi.ResourceOptions(parent=self))
        declared: dict[tuple[str, str | None, str], pulumi.Resource] = {}  # (kind, namespace, name) -> resource
        for doc in docs:
            meta = doc["metadata"]
            depends = _waits_for(doc, declared, eks)
            timeouts = readiness_timeout(doc)
            res = _declare(f"{name}-{_slug(doc)}", doc, pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=depends,
                custom_timeouts=pulumi.CustomTimeouts(create=timeouts, update=timeouts) if timeouts else None,
            ))
            declared[(doc["kind"], meta.get("namespace"), meta["name"])] = res
        self.register_outputs({"objects": len(docs)})


# Kinds whose objects create pods: they wait for what their pods need on admission and start.
POD_CREATING = frozenset({"Deployment", "DaemonSet", "Job", "CronJob", "StatefulSet", "ReplicaSet", "Pod"})


def _pod_spec(doc: m.Manifest) -> dict[str, Any]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "Pod":
        return dict(spec)
    if doc["kind"] == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return dict((spec.get("template") or {}).get("spec") or {})


def _requests(pod: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
        for section in ("requests", "limits"):
            names |= set((c.get("resources") or {}).get(section) or {})
    return names


def _waits_for(doc: m.Manifest, declared: dict[tuple[str, str | None, str], pulumi.Resource],
               eks: Any) -> list[pulumi.Resource]:
    """What an object must not be created before (issue 21 item 2):

    - its namespace;
    - a ServiceAccount, and every pod-creating object in a namespace with one: that namespace's EKS
      Pod Identity association. EKS injects the credential variables when it admits a pod, and only
      if the association exists then (EKS user guide, "Assign an IAM role to a Kubernetes service
      account": existing pods must be restarted) - a pod admitted earlier runs with the node role;
    - a pod-creating object: the node group its pods run on (GPU or system, by its node selector),
      the add-ons (pod identity agent), the ServiceAccount it runs as, and the device plugins that
      advertise the resources it requests (nvidia.com/gpu, vpc.amazonaws.com/efa).
    """
    meta = doc["metadata"]
    ns = meta.get("namespace")
    deps: list[pulumi.Resource] = []
    if ns is not None and ("Namespace", None, ns) in declared:
        deps.append(declared[("Namespace", None, ns)])
    pod_creating = doc["kind"] in POD_CREATING
    if eks is not None and (doc["kind"] == "ServiceAccount" or pod_creating) and ns in eks.associations:
        deps.append(eks.associations[ns])
    if not pod_creating:
        return deps
    pod = _pod_spec(doc)
    if eks is not None:
        on_gpu = (pod.get("nodeSelector") or {}).get(m.GPU_NODE_LABEL) == "true"
        deps.append(eks.gpu_node_group if on_gpu else eks.system_node_group)
        deps += eks.addons
    account = pod.get("serviceAccountName")
    if account and ("ServiceAccount", ns, account) in declared:
        deps.append(declared[("ServiceAccount", ns, account)])
    wanted = _requests(pod)
    for (kind, _, obj_name), res in declared.items():
        advertises = {m.PLUGIN_APP: GPU_RESOURCE, m.EFA_APP: defaults()["efa_device_plugin"]["resource"]}.get(obj_name)
        if kind == "DaemonSet" and advertises in wanted:
            deps.append(res)
    return deps


def readiness_timeout(doc: m.Manifest) -> str | None:
    """pulumi-kubernetes' readiness wait for a pod-creating object, sized in defaults.yaml
    `readiness`: the inference service's image pull and start, or a DaemonSet's small image."""
    if doc["kind"] not in POD_CREATING:
        return None
    r = defaults()["readiness"]
    if doc["kind"] == "DaemonSet":
        minutes = int(r["daemonset_minutes"])
    else:
        pull_s = float(r["inference_image_gib"]) * 1024 / float(r["pull_mib_per_s"])
        minutes = math.ceil((pull_s + float(r["inference_start_s"])) * float(r["margin"]) / 60)
    return f"{minutes}m"


def _declare(resource_name: str, doc: m.Manifest, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    cls = _KINDS[doc["kind"]]
    # Top-level fields are constructor arguments (snake_case); nested dicts pass through as
    # camelCase, which the SDK sends unchanged.
    fields = {_snake(k): v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    resource: pulumi.Resource = cls(resource_name, opts=opts, **fields)
    return resource


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", lambda mt: "_" + mt.group(1).lower(), key)


def _slug(doc: m.Manifest) -> str:
    meta = doc["metadata"]
    ns, obj = meta.get("namespace"), meta["name"]
    scoped = obj if not ns or obj.startswith(ns) else f"{ns}-{obj}"  # unique: kinds differ, names within kind do
    return f"{doc['kind'].lower()}-{scoped}"


def _need_arns(arns: tuple[pulumi.Input[str], pulumi.Input[str]] | None) -> tuple[pulumi.Input[str], pulumi.Input[str]]:
    if arns is None:
        raise ValueError("GpuKubernetes on EKS needs the stack's bucket ARNs for pod identity")
    return arns


def _need(value: pulumi.Input[str] | None, what: str) -> pulumi.Input[str]:
    if value is None:
        raise ValueError(f"GpuKubernetes on EKS needs {what} from the cluster's network")
    return value


def _existing_kubeconfig() -> pulumi.Output[str]:
    key = f"{PROJECT}:kubeconfig"
    if not runtime_config.is_config_secret(key):
        raise ConfigError(key, "is stored in plain text in the stack file",
                          "set it with `pulumi config set --secret gpuforge:kubeconfig \"$(cat KUBECONFIG)\"`")
    return pulumi.Config(PROJECT).require_secret("kubeconfig")
