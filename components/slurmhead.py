"""SlurmHead: the head node of a `gpuforge:scheduler: slurm` stack, and the secrets and names the
cluster shares.

- the munge key, made at deploy time (pulumi_random RandomBytes, a Pulumi secret), kept in an SSM
  SecureString parameter under a KMS key of its own; nodes read it at boot with their role. It is
  never in user data: the user data names the parameter only;
- a small on-demand instance running slurmctld, in the stack's subnet and security group but
  OUTSIDE the cluster placement group (it does no GPU traffic and must not take a slot there),
  encrypted root volume, IMDSv2 only, no SSH beyond the stack's sshCidrs (SSM Session Manager);
- the hosts parameter: "private-ip name" per line for the head and every GPU node, written once
  the instances exist; nodes are not in DNS and slurm.conf names them (bootstrap/slurm.py);
- with the embedded accounting database, its own encrypted gp3 volume in the head's AZ, attached
  to the head and mounted at MariaDB's datadir by the head's data-volume phase. Pulumi never deletes
  it (retain_on_delete): replacing the head re-attaches it to the new head; destroying the stack
  leaves it in the account, and gpuforge:accountingDbVolumeId gives it to a new stack.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from gpuforge.bootstrap.slurm_head import render_head_user_data
from gpuforge.components.compute import DATA_DEVICE, SSM_CORE_POLICY, Node
from gpuforge.components.nodeinstall import node_install_prefix
from gpuforge.core.config import StackConfig


@dataclass(frozen=True)
class SlurmHeadArgs:
    config: StackConfig
    ami_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    availability_zone: pulumi.Input[str]  # the subnet's: the database volume must be in the head's AZ
    security_group_id: pulumi.Input[str]
    nodes: Sequence[Node]  # the GPU nodes (slurmd), by inventory name
    node_role_name: pulumi.Input[str]
    public_ip: bool
    # The bucket the deploy put the node wheels in (components/nodeinstall.py), when it did: the
    # head's gpuforge phase installs them too (validate --transport slurm runs on the head).
    node_install_bucket_arn: pulumi.Input[str] | None = None


def node_install_policy(bucket_arn: str, prefix: str) -> str:
    """Read the node wheel set under `prefix` of the bucket, nothing else of it."""
    read = {"Sid": "ReadNodeInstall", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"{bucket_arn}/{prefix}*"]}
    return json.dumps({"Version": "2012-10-17", "Statement": [read]})


def parameter_policy(parameter_arns: Sequence[str], key_arn: str, region: str) -> str:
    """Read exactly the cluster's two parameters, and decrypt with their key only through SSM."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Sid": "ReadSlurmParameters", "Effect": "Allow", "Action": ["ssm:GetParameter"],
                 "Resource": list(parameter_arns)},
                {"Sid": "DecryptMungeKey", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": [key_arn],
                 "Condition": {"StringEquals": {"kms:ViaService": f"ssm.{region}.amazonaws.com"}}},
            ],
        }
    )  # fmt: skip


class SlurmHead(pulumi.ComponentResource):
    instance: aws.ec2.Instance
    private_ip: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHeadArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuforge:aws:SlurmHead", name, None, opts)
        cfg = args.config
        slurm = cfg.slurm
        assert slurm is not None, "SlurmHead needs gpuforge:scheduler slurm"
        child = pulumi.ResourceOptions(parent=self)
        tags = {**cfg.tags, "gpuforge-role": "slurm-head"}

        key = aws.kms.Key(
            f"{name}-slurm-key",
            description=f"gpuforge {cfg.stack}: Slurm munge key parameter",
            enable_key_rotation=True,
            deletion_window_in_days=7,
            tags=tags,
            opts=child,
        )
        munge = random.RandomBytes(f"{name}-munge-key", length=1024, opts=child)  # munged's own key size
        munge_param = aws.ssm.Parameter(
            f"{name}-munge-key",
            name=slurm.munge_parameter,
            type="SecureString",
            key_id=key.arn,
            value=munge.base64,  # a secret output: Pulumi stores it encrypted, previews show [secret]
            description="Slurm munge key (base64), read by the cluster's nodes at boot",
            tags=tags,
            opts=child,
        )

        acct = slurm.accounting
        depends: list[pulumi.Resource] = [munge_param]
        if acct is not None and acct.embedded:
            # The embedded MariaDB's password for slurmdbd: made here, kept only as a SecureString under
            # the cluster's key; the head's accounting phase reads it at boot (never in user data).
            # Letters and digits: it goes inside SQL quotes and slurmdbd.conf as it is.
            password = random.RandomPassword(f"{name}-db-password", length=32, special=False, opts=child)
            depends.append(aws.ssm.Parameter(
                f"{name}-db-password",
                name=acct.password_parameter,
                type="SecureString",
                key_id=key.arn,
                value=password.result,
                description="Slurm accounting database password (slurmdbd), read by the head node at boot",
                tags=tags,
                opts=child,
            ))  # fmt: skip

        role = aws.iam.Role(
            f"{name}-head-role",
            assume_role_policy=json.dumps(
                {"Version": "2012-10-17", "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
            ),
            description="gpuforge Slurm head node: SSM, and the cluster's Slurm parameters only",
            tags=tags,
            opts=child,
        )
        aws.iam.RolePolicyAttachment(f"{name}-head-ssm-core", role=role.name, policy_arn=SSM_CORE_POLICY, opts=child)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOptions(parent=self)).account_id
        arn = f"arn:aws:ssm:{cfg.region}:{{}}:parameter{{}}"
        node_params = (slurm.munge_parameter, *slurm.hosts_parameters)
        # Only the head reads the accounting database's password; the GPU nodes never see it.
        head_params = node_params + ((acct.password_parameter,) if acct is not None else ())

        def policy_for(params: tuple[str, ...]) -> pulumi.Output[str]:
            arns = account.apply(lambda a: [arn.format(a, p if p.startswith("/") else f"/{p}") for p in params])
            return pulumi.Output.all(arns, key.arn).apply(lambda v: parameter_policy(v[0], v[1], cfg.region))

        aws.iam.RolePolicy(f"{name}-head-slurm", role=role.id, policy=policy_for(head_params), opts=child)
        aws.iam.RolePolicy(f"{name}-node-slurm", role=args.node_role_name, policy=policy_for(node_params), opts=child)
        if args.node_install_bucket_arn is not None:
            prefix = node_install_prefix(cfg)
            aws.iam.RolePolicy(f"{name}-head-node-install", role=role.id, opts=child,
                               policy=pulumi.Output.from_input(args.node_install_bucket_arn).apply(
                                   lambda b: node_install_policy(b, prefix)))  # fmt: skip
        profile = aws.iam.InstanceProfile(f"{name}-head-profile", role=role.name, tags=tags, opts=child)
        db_volume = acct.volume if acct is not None else None

        self.instance = aws.ec2.Instance(
            slurm.head_name,
            ami=args.ami_id,
            instance_type=slurm.head_instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[args.security_group_id],
            associate_public_ip_address=args.public_ip,  # egress for packages; SSH only from sshCidrs
            iam_instance_profile=profile.name,
            key_name=cfg.key_name,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=slurm.head_root_gib, volume_type="gp3", encrypted=True, delete_on_termination=True
            ),
            # No placement_group: the cluster placement group's slots are for the GPU nodes.
            user_data_base64=render_head_user_data(cfg).user_data_base64,
            tags={**tags, "Name": slurm.head_name},
            volume_tags={**tags, "Name": f"{slurm.head_name}-root"},
            # With the database volume attached, a replaced head is deleted before its successor is
            # made: the volume detaches from a stopped head (stop_instance_before_detaching, so
            # MariaDB shuts down cleanly) and the new head's data-volume phase waits for it, as on
            # a first boot; two heads never run slurmctld or MariaDB at once.
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends, delete_before_replace=db_volume is not None),
        )
        if db_volume is not None:
            volume_name = f"{slurm.head_name}-accounting-db"
            vol = aws.ebs.Volume(
                volume_name,
                availability_zone=args.availability_zone,
                type=db_volume.type,
                size=db_volume.size_gib,
                encrypted=True,  # the account's EBS key (aws/ebs), as the head's root and the nodes' volumes
                tags={**tags, "Name": volume_name, "gpuforge-cluster": slurm.cluster_name},
                # Kept when Pulumi would delete it (stack destroy, a replacement): the accounting history
                # outlives the head. It stays in the account and costs its GB-month until removed, and
                # a new stack takes it back with gpuforge:accountingDbVolumeId (Pulumi's import option:
                # the volume joins the stack as it is, then follows the program's tags and size).
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, import_=db_volume.existing_id),
            )
            aws.ec2.VolumeAttachment(
                f"{volume_name}-attach",
                device_name=DATA_DEVICE,
                instance_id=self.instance.id,
                volume_id=vol.id,
                stop_instance_before_detaching=True,
                opts=child,
            )

        ips = {slurm.head_name: self.instance.private_ip, **{n.name: n.instance.private_ip for n in args.nodes}}
        for i, (param, names) in enumerate(zip(slurm.hosts_parameters, slurm.hosts_chunks, strict=True)):
            lines = [ips[nm].apply(lambda ip, nm=nm: f"{ip} {nm}") for nm in names]  # type: ignore[misc]
            aws.ssm.Parameter(
                f"{name}-slurm-hosts" + (f"-{i}" if i else ""),
                name=param,
                type="String",
                # insecure_value: private IPs are no secret, and pulumi-aws makes every `value` one (the
                # preview and state would show only [secret]).
                insecure_value=pulumi.Output.all(*lines).apply("\n".join),
                description=f"Slurm cluster names, part {i + 1} of {len(slurm.hosts_parameters)}: private IP and node "
                "name per line (nodes write /etc/hosts from them)",
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[munge_param]),
            )
        self.private_ip = self.instance.private_ip
        self.register_outputs({"headPrivateIp": self.private_ip, "mungeKeyParameter": munge_param.name})
