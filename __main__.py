"""The Pulumi program: stack config -> profile -> GpuCluster -> exports.

Run by `pulumi up --stack <name>` (real engine) and by `gpuforge preview` (SDK mock engine).
"""

import pulumi

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import parse_stack_config
from gpuforge.errors import ConfigError
from gpuforge.program import engine_config

try:
    config = parse_stack_config(engine_config(), pulumi.get_stack())
except ConfigError as exc:  # a clean one-line failure under the real CLI, before any resource
    raise pulumi.RunError(exc.render()) from None

cluster = GpuCluster(config.stack, GpuClusterArgs(config=config))

pulumi.export("inventory", cluster.inventory)
pulumi.export("placementGroup", cluster.placement_group_name)
pulumi.export("availabilityZone", cluster.availability_zone)
pulumi.export("azId", config.az_id)
pulumi.export("directoryBucket", cluster.directory_bucket)
pulumi.export("checkpointBucket", cluster.checkpoint_bucket)
pulumi.export("instanceType", config.instance.name)
pulumi.export("nodeCount", config.node_count)
