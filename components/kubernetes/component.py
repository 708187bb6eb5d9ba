"""GpuKubernetes: the Kubernetes layer of a GPU stack, on EKS or on an existing cluster.

Declares, through a pulumi-kubernetes provider for that cluster: the NVIDIA device plugin
configured from the profile's sharing mode, PriorityClasses, one namespace per team with a
quota that leaves the headroom free, and (inference profiles) the inference service.
"""

from __future__ import annotations

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
from gpuforge.core.kubernetes.settings import KubernetesSettings
from gpuforge.core.kubernetes.sharing import plan_sharing

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
        namespaces: dict[str, pulumi.Resource] = {}
        for doc in docs:
            meta = doc["metadata"]
            ns = meta.get("namespace")
            depends = [namespaces[ns]] if ns in namespaces else []
            res = _declare(f"{name}-{_slug(doc)}", doc, pulumi.ResourceOptions(
                parent=self, provider=provider, depends_on=depends
            ))
            if doc["kind"] == "Namespace":
                namespaces[meta["name"]] = res
        self.register_outputs({"objects": len(docs)})


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
