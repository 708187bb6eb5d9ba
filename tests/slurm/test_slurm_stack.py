"""A Slurm training stack as the offline engine records it: the head node (outside the placement
group, encrypted, IMDSv2, on demand), the munge key as a secret SSM parameter the user data never
carries, least-privilege parameter access for the node role, cost, and the guardrails."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from gpuforge.policycheck import check_graph
from gpuforge.preview import tree_rows
from tests.policy.conftest import mutate

INSTANCE = "aws:ec2/instance:Instance"
VOLUME = "aws:ebs/volume:Volume"
ATTACHMENT = "aws:ec2/volumeAttachment:VolumeAttachment"
PARAM = "aws:ssm/parameter:Parameter"
# How the engine marks a secret value (pulumi.runtime.rpc: _special_sig_key / _special_secret_sig).
SECRET_SIG, SECRET_VALUE = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"


def _by(resources: list[Any], token: str) -> list[Any]:
    return [r for r in resources if r.type == token]


def _user_data(text_b64: str) -> str:
    raw = base64.b64decode(text_b64)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def test_head_node_is_on_demand_outside_the_placement_group(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    gpu = [r for r in _by(res, INSTANCE) if r.name != "vision-slurm-head"]
    assert len(gpu) == 2 and all(r.inputs.get("placementGroup") for r in gpu)
    i = head.inputs
    assert i["instanceType"] == "m6i.xlarge" and "placementGroup" not in i and "instanceMarketOptions" not in i
    assert i["metadataOptions"]["httpTokens"] == "required"
    assert i["rootBlockDevice"]["encrypted"] is True
    ud = _user_data(i["userDataBase64"])
    assert "SlurmctldHost=vision-slurm-head" in ud and "NodeName=vision-slurm-node[01-02]" in ud


def test_munge_key_is_a_secret_parameter_and_never_in_user_data(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [munge] = [r for r in _by(res, PARAM) if r.inputs["name"].endswith("/munge-key")]
    assert munge.inputs["type"] == "SecureString"
    assert munge.inputs["value"].get(SECRET_SIG) == SECRET_VALUE  # the engine holds it as a secret
    assert munge.inputs["keyId"]  # its own KMS key, not the account default
    stand_in = "T0ZGTElORS1NVU5HRS1LRVk="  # the offline engine's RandomBytes (cli/offline/mocks.py)
    booted = [r.inputs.get("userDataBase64") or r.inputs.get("userData")
              for r in _by(res, INSTANCE) + _by(res, "aws:ec2/launchTemplate:LaunchTemplate")]  # fmt: skip
    texts = [_user_data(b) for b in booted if b]
    assert len(texts) == 2  # the head's own, the GPU nodes' launch template
    for text in texts:
        assert stand_in not in text and "/slurm/munge-key" in text


def test_hosts_parameter_lists_head_and_nodes_in_the_clear(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [hosts] = [r for r in _by(res, PARAM) if "/hosts/" in r.inputs["name"]]
    assert hosts.inputs["name"] == "/gpuforge/vision-slurm/slurm/hosts/0"
    lines = hosts.inputs["insecureValue"].splitlines()  # a plain string: addresses are no secret
    assert [ln.split()[1] for ln in lines] == ["vision-slurm-head", "vision-slurm-node01", "vision-slurm-node02"]
    assert hosts.inputs["type"] == "String"


def test_hosts_parameters_hold_the_largest_cluster_config_allows(record) -> None:
    """MAX_NODES GPU nodes and the head: one "ip name" line each no longer fits one standard-tier
    parameter (4,096 characters, finding 7 of issue 19); every parameter must, whatever the
    addresses, and together they list every node once, in order."""
    from gpuforge.core.config import MAX_NODES
    from gpuforge.core.scheduler import SSM_STANDARD_VALUE_MAX

    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=MAX_NODES).run.resources
    params = sorted((r for r in _by(res, PARAM) if "/hosts/" in r.inputs["name"]),
                    key=lambda r: int(r.inputs["name"].rsplit("/", 1)[1]))  # fmt: skip
    assert len(params) >= 2
    names = [ln.split()[1] for r in params for ln in r.inputs["insecureValue"].splitlines()]
    assert names == ["vision-slurm-head", *(f"vision-slurm-node{i:03d}" for i in range(1, MAX_NODES + 1))]
    for r in params:
        value = r.inputs["insecureValue"]
        # the longest form of the same lines: every address 255.255.255.255
        worst = "\n".join(f"255.255.255.255 {ln.split()[1]}" for ln in value.splitlines())
        assert len(value) <= len(worst) <= SSM_STANDARD_VALUE_MAX, r.inputs["name"]
    # the node role may read each of them, and nothing else of SSM
    [node] = [r for r in _by(res, "aws:iam/rolePolicy:RolePolicy") if r.name == "vision-slurm-node-slurm"]
    read = json.loads(node.inputs["policy"])["Statement"][0]["Resource"]
    assert sorted(a.split(":parameter")[1] for a in read) == sorted(
        [r.inputs["name"] for r in params] + ["/gpuforge/vision-slurm/slurm/munge-key"])


def test_the_node_role_reads_exactly_the_clusters_parameters(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [node] = [r for r in _by(res, "aws:iam/rolePolicy:RolePolicy") if r.name == "vision-slurm-node-slurm"]
    doc = json.loads(node.inputs["policy"])
    read, decrypt = doc["Statement"]
    assert read["Action"] == ["ssm:GetParameter"] and sorted(a.split(":parameter")[1] for a in read["Resource"]) == [
        "/gpuforge/vision-slurm/slurm/hosts/0", "/gpuforge/vision-slurm/slurm/munge-key"]  # fmt: skip
    assert decrypt["Action"] == ["kms:Decrypt"] and "*" not in decrypt["Resource"]
    assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": "ssm.us-east-1.amazonaws.com"}}


def test_cost_counts_the_head_node(record) -> None:
    plain = record().cost.to_dict()
    slurm = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04").cost.to_dict()
    lines = {line["item"]: line for line in slurm["lines"]}
    # accounting in MariaDB on the head (the default): m6i.xlarge on demand (catalog/platform_prices.yaml),
    # its 50 GiB gp3 root, and the database's own 50 GiB gp3 volume (catalog/storage_prices.yaml: $0.08/GB-month)
    assert lines["Slurm head m6i.xlarge (slurmctld, slurmdbd, MariaDB)"]["quantity"] == 1
    assert lines["storage Slurm head root gp3"]["quantity"] == 50
    db = lines["storage Slurm accounting database gp3 (kept on delete)"]
    assert db["quantity"] == 50 and abs(db["on_demand_usd_per_hour"] - 50 * 0.08 / 730) < 1e-9
    assert abs(slurm["hourly"]["on_demand"] - plain["hourly"]["on_demand"] - (0.192 + 50 * 0.08 / 730 + 50 * 0.08 / 730)) < 2e-4
    # an existing database: the slurmctld-only head of the profile, 50 GiB, and no database volume
    ext = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", accountingDbEndpoint="db.example.internal",
                 accountingDbPasswordParameter="/site/db").cost.to_dict()  # fmt: skip
    items = {line["item"] for line in ext["lines"]}
    assert {"Slurm head m6i.large (slurmctld, slurmdbd; database at db.example.internal, billed there)",
            "storage Slurm head root gp3"} <= items  # fmt: skip
    assert not [i for i in items if "accounting database" in i]
    assert abs(ext["hourly"]["on_demand"] - plain["hourly"]["on_demand"] - (0.096 + 50 * 0.08 / 730)) < 2e-4


def test_guardrails_apply_to_the_head_node(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04").run.resources
    assert check_graph(res) == []

    def head_only(change: Any) -> list[Any]:
        return mutate(res, INSTANCE, lambda i: change(i) if i.get("instanceType") == "m6i.xlarge" else None)

    imds = [v.message for v in check_graph(head_only(lambda i: i["metadataOptions"].update(httpTokens="optional")))]
    assert any("vision-slurm-head" in m and "IMDSv1" in m for m in imds), imds
    enc = [v.message for v in check_graph(head_only(lambda i: i["rootBlockDevice"].update(encrypted=False)))]
    assert any("vision-slurm-head" in m for m in enc), enc
    untagged = [v.message for v in check_graph(head_only(lambda i: i.update(tags={"Name": "x"})))]
    assert any("vision-slurm-head" in m for m in untagged), untagged


def test_accounting_password_is_a_secret_only_the_head_reads(record) -> None:
    """Embedded accounting (the default): a generated password in a SecureString under the cluster's
    key; the head's role may read it, the GPU nodes' may not; no user data carries it."""
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [pw] = _by(res, "random:index/randomPassword:RandomPassword")
    assert pw.inputs["length"] >= 32 and pw.inputs["special"] is False  # goes into SQL quotes as it is
    [param] = [r for r in _by(res, PARAM) if r.inputs["name"] == "/gpuforge/vision-slurm/slurm/db-password"]
    assert param.inputs["type"] == "SecureString" and param.inputs["keyId"]
    assert param.inputs["value"].get(SECRET_SIG) == SECRET_VALUE
    policies = {r.name: json.loads(r.inputs["policy"]) for r in _by(res, "aws:iam/rolePolicy:RolePolicy")}

    def reads(name: str) -> set[str]:
        return {a.split(":parameter")[1] for a in policies[name]["Statement"][0]["Resource"]}

    assert "/gpuforge/vision-slurm/slurm/db-password" in reads("vision-slurm-head-slurm")
    assert "/gpuforge/vision-slurm/slurm/db-password" not in reads("vision-slurm-node-slurm")
    booted = [r.inputs.get("userDataBase64") or r.inputs.get("userData")
              for r in _by(res, INSTANCE) + _by(res, "aws:ec2/launchTemplate:LaunchTemplate")]  # fmt: skip
    texts = [_user_data(b) for b in booted if b]
    assert texts and all("OFFLINEDBPASSWORDSTANDIN" not in t for t in texts)
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    ud = _user_data(head.inputs["userDataBase64"])
    assert "ssm_get /gpuforge/vision-slurm/slurm/db-password | \"$GF/bin/gpuforge-slurm-accounting\" dbd-conf" in ud
    assert not [ln for ln in ud.splitlines() if ln.strip().startswith("StoragePass=")]


def test_the_head_grows_with_the_embedded_database_and_not_with_an_existing_one(record) -> None:
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    # the database is on a volume of its own (test below), not on the root volume EC2 deletes with the head
    assert head.inputs["instanceType"] == "m6i.xlarge" and head.inputs["rootBlockDevice"]["volumeSize"] == 50
    assert head.inputs["rootBlockDevice"]["deleteOnTermination"] is True
    ext = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2,
                 accountingDbEndpoint="acct.cluster-x.us-east-1.rds.amazonaws.com:3306",
                 accountingDbPasswordParameter="/site/slurm/db-password").run.resources  # fmt: skip
    [head] = [r for r in _by(ext, INSTANCE) if r.name == "vision-slurm-head"]
    assert head.inputs["instanceType"] == "m6i.large" and head.inputs["rootBlockDevice"]["volumeSize"] == 50
    assert not _by(ext, "random:index/randomPassword:RandomPassword")
    ud = _user_data(head.inputs["userDataBase64"])
    assert "StorageHost=acct.cluster-x.us-east-1.rds.amazonaws.com" in ud and "mariadb-server" not in ud
    [hp] = [r for r in _by(ext, "aws:iam/rolePolicy:RolePolicy") if r.name == "vision-slurm-head-slurm"]
    read = json.loads(hp.inputs["policy"])["Statement"][0]["Resource"]
    assert any(a.endswith(":parameter/site/slurm/db-password") for a in read)
    assert not _by(ext, VOLUME) and not _by(ext, ATTACHMENT) and not head.delete_before_replace
    assert "data-volume" not in ud and "RequiresMountsFor" not in ud


def test_the_accounting_database_has_its_own_retained_volume_on_the_head(record) -> None:
    """The embedded MariaDB's datadir is an encrypted gp3 volume in the head's AZ, attached to the head,
    that Pulumi keeps when it would delete it; the head is deleted before a replacement is made, and
    the volume detaches only from a stopped head. The preview says so."""
    result = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2)
    res = result.run.resources
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    [vol] = _by(res, VOLUME)
    [att] = _by(res, ATTACHMENT)
    assert vol.name == "vision-slurm-head-accounting-db"
    assert vol.inputs["type"] == "gp3" and vol.inputs["size"] == 50 and vol.inputs["encrypted"] is True
    node_azs = {n["availability_zone"] for n in result.run.outputs["inventory"]["nodes"]}
    assert node_azs == {vol.inputs["availabilityZone"]}  # the subnet's AZ, where the head runs too
    assert vol.inputs["tags"]["Name"] == "vision-slurm-head-accounting-db" and vol.inputs["tags"]["stack"] == "vision-slurm"
    assert vol.retain_on_delete and not head.retain_on_delete
    assert head.delete_before_replace
    assert att.inputs["stopInstanceBeforeDetaching"] is True and att.inputs["deviceName"] == "/dev/sdf"
    assert att.inputs["volumeId"].startswith("vol-") and att.inputs["instanceId"].startswith("i-")
    assert vol.urn in att.dependencies and head.urn in att.dependencies
    shown = {r["name"]: r for r in result.to_dict()["resources"]}
    assert shown["vision-slurm-head-accounting-db"]["options"] == {"retainOnDelete": True}
    assert shown["vision-slurm-head"]["options"] == {"deleteBeforeReplace": True}
    assert "options" not in shown["vision-slurm-node01"]
    shown_rows = {name: kind for _, kind, name in tree_rows(result)}  # what `gpuforge preview` prints
    assert shown_rows["vision-slurm-head-accounting-db (kept on delete)"] == "aws:ebs/volume:Volume"
    # the head mounts it at MariaDB's datadir before installing MariaDB, and MariaDB needs the mount
    ud = _user_data(head.inputs["userDataBase64"])
    assert "mnt=/var/lib/mysql" in ud and "RequiresMountsFor=/var/lib/mysql" in ud


def test_a_new_stack_adopts_the_volume_a_destroyed_one_left(record) -> None:
    """gpuforge:accountingDbVolumeId: the retained volume joins the stack through Pulumi's import
    option, at the size the stack states, and the head's phase takes that volume only."""
    result = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2,
                    accountingDbVolumeId="vol-0123456789abcdef0", accountingDbVolumeGib=200)  # fmt: skip
    res = result.run.resources
    [vol] = _by(res, VOLUME)
    assert vol.import_id == "vol-0123456789abcdef0" and vol.retain_on_delete and vol.inputs["size"] == 200
    shown = {r["name"]: r for r in result.to_dict()["resources"]}
    assert shown[vol.name]["options"] == {"retainOnDelete": True, "import": "vol-0123456789abcdef0"}
    assert {name for _, _, name in tree_rows(result)} >= {
        "vision-slurm-head-accounting-db (kept on delete) (adopts vol-0123456789abcdef0)"}
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    assert "want=vol0123456789abcdef0\n" in _user_data(head.inputs["userDataBase64"])
    lines = {line["item"]: line for line in result.cost.to_dict()["lines"]}
    db = lines["storage Slurm accounting database gp3 (kept on delete)"]
    assert db["quantity"] == 200 and abs(db["on_demand_usd_per_hour"] - 200 * 0.08 / 730) < 1e-9
    # a stack that makes its own volume pins none: the only non-root EBS volume is it
    plain = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [head] = [r for r in _by(plain, INSTANCE) if r.name == "vision-slurm-head"]
    assert "want=''\n" in _user_data(head.inputs["userDataBase64"])
    assert not [v for v in _by(plain, VOLUME) if v.import_id]


def test_the_head_installs_gpuforge_and_may_read_only_the_node_wheels(record) -> None:
    """`validate --transport slurm` runs where srun is, the head: its user data has the gpuforge
    phase (the node install, as on the GPU nodes), and its role may read the node wheel prefix of
    the bucket and nothing else of it (the first-boot rehearsal found srun but no gpuforge there)."""
    res = record("vision-slurm", scheduler="slurm", os="ubuntu-24.04", nodeCount=2).run.resources
    [head] = [r for r in _by(res, INSTANCE) if r.name == "vision-slurm-head"]
    assert "/opt/gpuforge/phases/gpuforge.sh" in _user_data(head.inputs["userDataBase64"])
    [pol] = [r for r in _by(res, "aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-head-node-install")]
    [st] = json.loads(pol.inputs["policy"])["Statement"]
    assert st["Effect"] == "Allow" and st["Action"] == ["s3:GetObject"]
    [arn] = st["Resource"]
    assert "/gpuforge-node/" in arn and arn.endswith("*") and arn.count("*") == 1, arn
