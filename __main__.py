"""The Pulumi program: stack config -> profile -> GpuCluster -> exports.

Run by `pulumi up --stack <name>` (real engine) and by `gpuforge preview` (SDK mock engine).
"""

import pulumi

from gpuforge.common.errors import GpuforgeError
from gpuforge.components.cluster import GpuCluster, GpuClusterArgs
from gpuforge.components.deploygate import refuse_before_resources
from gpuforge.core.config import parse_stack_config
from gpuforge.program import engine_config, newest_ami_for, running_offline

# Every refusal before the first resource (components/deploygate.py): a clean `error:` line
# under the real CLI, and nothing created that the refusal would leave behind.
try:
    config = parse_stack_config(engine_config(), pulumi.get_stack())
    refuse_before_resources(config, offline=running_offline(), region_ami=newest_ami_for(config))
except GpuforgeError as exc:
    raise pulumi.RunError(exc.render()) from None

cluster = GpuCluster(config.stack, GpuClusterArgs(config=config, offline=running_offline()))

pulumi.export("inventory", cluster.inventory)
pulumi.export("placementGroup", cluster.placement_group_name)
pulumi.export("availabilityZone", cluster.availability_zone)
pulumi.export("azId", config.az_id)
pulumi.export("directoryBucket", cluster.directory_bucket)
pulumi.export("checkpointBucket", cluster.checkpoint_bucket)
pulumi.export("instanceType", config.instance.name)
pulumi.export("nodeCount", config.node_count)
if cluster.slurm_head_ip is not None:  # gpuforge:scheduler slurm: where slurmctld runs (ssm start-session there)
    pulumi.export("slurmHead", {"name": config.slurm.head_name if config.slurm else None, "privateIp": cluster.slurm_head_ip})
if cluster.node_template_versions is not None:
    pulumi.export("nodeTemplateVersions", cluster.node_template_versions)

if config.kubernetes is not None:  # only stacks that ask for Kubernetes pay for its imports
    from gpuforge.components.kubernetes.component import GpuKubernetes, KubernetesArgs

    gpu_k8s = GpuKubernetes(
        config.stack,
        KubernetesArgs(
            config=config,
            vpc_id=cluster.network.vpc_id,
            subnet_id=cluster.network.subnet_id,
            route_table_id=cluster.network.route_table_id,
            main_route_table_id=cluster.network.main_route_table_id,
            security_group_id=cluster.network.security_group_id,
            placement_group=cluster.placement_group_name,
            alert_topic_arn=cluster.alert_topic_arn,
            bucket_arns=(cluster.directory_bucket_arn, cluster.checkpoint_bucket_arn),
            checkpoint_bucket=cluster.checkpoint_bucket,
        ),
        opts=pulumi.ResourceOptions(parent=cluster),
    )
    pulumi.export("kubernetes", config.kubernetes.mode)
    if gpu_k8s.kubeconfig is not None:
        pulumi.export("kubeconfig", gpu_k8s.kubeconfig)  # a secret output
