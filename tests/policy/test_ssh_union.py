"""no-public-ssh-union: the union of the CIDRs that open tcp/22, per security group.

Two rules 0.0.0.0/1 + 128.0.0.0/1 on one group open SSH to every IPv4 address although neither
rule alone is 0.0.0.0/0. Graphs come from the offline engine (the real program), from
hand-written records (a third-party rule set), and in the shape the real analyzer hands a stack
policy during preview (pulumi_policy's unknown-checking proxy, property dependencies).
"""

from __future__ import annotations

from typing import Any

from pulumi_policy import PolicyResource, StackValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from gpuforge.offline.engine import Registered
from gpuforge.policy.stack_policies import _no_public_ssh_union
from gpuforge.policycheck import Violation, _opts, check_graph

SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
POLICIES = ("no-public-ssh", "no-public-ssh-union")


def ssh_findings(resources: list[Any]) -> list[Violation]:
    return [v for v in check_graph(resources) if v.policy in POLICIES]


def urn(type_token: str, name: str) -> str:
    return f"urn:pulumi:t::p::{type_token}::{name}"


def group(name: str, ingress: list[dict[str, Any]] | None = None) -> Registered:
    inputs: dict[str, Any] = {"name": name, "tags": {}}
    if ingress is not None:
        inputs["ingress"] = ingress
    return Registered(urn(SG, name), SG, name, "", True, inputs, ())


def sg_deps(prop: str, *groups: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return ((prop, tuple(urn(SG, g) for g in groups)),)


def rule(name: str, sg: str, cidr: str, **over: Any) -> Registered:
    """A vpc.SecurityGroupIngressRule on group `sg`, joined the way the engine records it."""
    family = "cidrIpv6" if ":" in cidr else "cidrIpv4"
    inputs = {"securityGroupId": f"{sg}-offline", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, family: cidr, **over}
    return Registered(urn(INGRESS, name), INGRESS, name, "", True, inputs, (urn(SG, sg),), sg_deps("securityGroupId", sg))


# --- graphs of the real program ------------------------------------------------------------


def test_split_ipv4_halves_on_the_stacks_group_are_one_violation_naming_it(record) -> None:
    # allowPublicSsh lets the config through; the pack still refuses, as it does for 0.0.0.0/0
    res = record(sshCidrs=["0.0.0.0/1", "128.0.0.0/1"], allowPublicSsh=True).run.resources
    found = ssh_findings(res)
    sg = next(r for r in res if r.type == SG)
    # the offline engine records the join the real engine sends: the rule's securityGroupId
    # property dependency on the group (from the SDK's RegisterResource request)
    assert all(dict(r.property_dependencies)["securityGroupId"] == (sg.urn,) for r in res if r.type == INGRESS)
    assert [(v.policy, v.resource) for v in found] == [("no-public-ssh-union", sg.name)]
    assert sg.name in found[0].message and "0.0.0.0/1 + 128.0.0.0/1" in found[0].message
    assert "sshCidrs" in found[0].message and "seed" not in found[0].message.lower()


def test_split_ipv6_halves_are_a_violation(record) -> None:
    res = record(sshCidrs=["::/1", "8000::/1"], allowPublicSsh=True).run.resources
    found = ssh_findings(res)
    assert [v.policy for v in found] == ["no-public-ssh-union"] and "::/1 + 8000::/1" in found[0].message


def test_one_half_alone_is_not_the_internet(record) -> None:
    assert ssh_findings(record(sshCidrs=["0.0.0.0/1"]).run.resources) == []
    assert ssh_findings(record(sshCidrs=["10.20.0.0/16", "8000::/1"]).run.resources) == []


def test_a_single_open_rule_is_reported_once_by_the_per_rule_policy(record) -> None:
    res = record(sshCidrs=["0.0.0.0/0", "0.0.0.0/1"], allowPublicSsh=True).run.resources
    assert [v.policy for v in ssh_findings(res)] == ["no-public-ssh"]


# --- hand-written rule sets ----------------------------------------------------------------


def test_halves_on_two_groups_are_judged_on_the_nodes_that_carry_both() -> None:
    # Each group alone admits half the internet (a /1, which the per-rule policy allows too).
    res = [group("a"), group("b"), rule("a-ssh", "a", "0.0.0.0/1"), rule("b-ssh", "b", "128.0.0.0/1")]
    assert ssh_findings(res) == []
    one = Registered(
        urn(LT, "one"), LT, "one", "", True, {"vpcSecurityGroupIds": ["a-offline"]}, (), sg_deps("vpcSecurityGroupIds", "a")
    )
    assert ssh_findings([*res, one]) == []
    # a node with both groups is open to the internet: reported on the node, naming both groups
    nics = {"networkInterfaces": [{"deviceIndex": 0, "securityGroups": ["a-offline", "b-offline"]}]}
    both = Registered(urn(LT, "both"), LT, "both", "", True, nics, (), sg_deps("networkInterfaces", "a", "b"))
    found = ssh_findings([*res, one, both])
    assert [(v.policy, v.resource) for v in found] == [("no-public-ssh-union", "both")]
    assert "(a, b)" in found[0].message and "0.0.0.0/1 + 128.0.0.0/1" in found[0].message
    # existing groups, joined on their literal ids
    lit = [Registered(r.urn, r.type, r.name, "", True, {**r.inputs, "securityGroupId": f"sg-{r.name[0]}"}, ()) for r in res[2:]]
    vm = Registered(urn(INSTANCE, "vm"), INSTANCE, "vm", "", True, {"vpcSecurityGroupIds": ["sg-a", "sg-b"]}, ())
    assert [v.resource for v in ssh_findings([*lit, vm])] == ["vm"]
    # a group already open by itself is reported once, on the group, not again on the node
    res.append(rule("a-ssh-2", "a", "128.0.0.0/1"))
    assert [(v.policy, v.resource) for v in ssh_findings([*res, both])] == [("no-public-ssh-union", "a")]


def test_inline_blocks_rules_of_all_types_and_port_ranges_add_up() -> None:
    inline = [{"protocol": "tcp", "fromPort": 0, "toPort": 1024, "cidrBlocks": ["0.0.0.0/2"]}]
    legacy = Registered(
        urn(SG_RULE, "legacy"), SG_RULE, "legacy", "", True,
        {"type": "ingress", "securityGroupId": "g-offline", "protocol": "-1", "fromPort": 0, "toPort": 0,
         "cidrBlocks": ["64.0.0.0/2", "128.0.0.0/1"]},
        (), sg_deps("securityGroupId", "g"),
    )  # fmt: skip
    res = [group("g", inline), legacy]
    assert [(v.policy, v.resource) for v in ssh_findings(res)] == [("no-public-ssh-union", "g")]
    egress = Registered(
        legacy.urn, SG_RULE, "legacy", "", True, {**legacy.inputs, "type": "egress"}, (), legacy.property_dependencies
    )
    assert ssh_findings([group("g", inline), egress]) == []
    # a rule that does not reach port 22 adds nothing to the union
    http = rule("http", "g", "128.0.0.0/1", fromPort=80, toPort=443)
    low = rule("low", "g", "64.0.0.0/2")
    assert ssh_findings([group("g", inline), low, http]) == []
    assert len(ssh_findings([group("g", inline), low, rule("all", "g", "128.0.0.0/1", ipProtocol="-1")])) == 1


def test_rules_on_an_existing_group_join_on_its_id() -> None:
    # no group resource in the graph: the literal id is the join
    a = Registered(
        urn(INGRESS, "a"), INGRESS, "a", "", True, {**rule("x", "s", "0.0.0.0/1").inputs, "securityGroupId": "sg-0abc"}, ()
    )
    b = Registered(
        urn(INGRESS, "b"), INGRESS, "b", "", True, {**rule("y", "s", "128.0.0.0/1").inputs, "securityGroupId": "sg-0abc"}, ()
    )
    found = ssh_findings([a, b])
    assert len(found) == 1 and "security group sg-0abc" in found[0].message


# --- the real analyzer's view during preview -----------------------------------------------


def test_a_new_groups_unknown_id_is_joined_through_property_dependencies() -> None:
    """During `pulumi preview` a new group's id is unknown: the analyzer's proxy raises on it,
    which would skip the whole stack policy; the join goes through property_dependencies."""
    sg = PolicyResource(SG, unknown_checking_proxy({"name": "g"}), urn(SG, "g"), "g", _opts(), None, None, [], {})

    def preview_rule(name: str, cidr: str) -> PolicyResource:
        props = {"securityGroupId": UNKNOWN_STRING_VALUE, "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": cidr}
        r = PolicyResource(INGRESS, unknown_checking_proxy(props), urn(INGRESS, name), name, _opts(), None, None, [sg], {})
        r.property_dependencies["securityGroupId"] = [sg]
        return r

    rules = [preview_rule("h1", "0.0.0.0/1"), preview_rule("h2", "128.0.0.0/1")]
    try:
        rules[0].props["securityGroupId"]
        raise AssertionError("the proxy let an unknown value through")
    except UnknownValueError:
        pass
    reports: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        reports.append((message, urn))

    _no_public_ssh_union(StackValidationArgs([sg, *rules], None), report)
    assert len(reports) == 1 and reports[0][1] == sg.urn and "security group g" in reports[0][0]


def test_a_node_with_unknown_group_ids_is_joined_through_property_dependencies() -> None:
    def preview(type_token: str, name: str, props: dict[str, Any], deps: dict[str, list[PolicyResource]]) -> PolicyResource:
        r = PolicyResource(type_token, unknown_checking_proxy(props), urn(type_token, name), name, _opts(), None, None, [], {})
        r.property_dependencies.update(deps)
        return r

    a, b = (preview(SG, g, {"name": g}, {}) for g in ("a", "b"))
    unknown_group = {"securityGroupId": UNKNOWN_STRING_VALUE, "ipProtocol": "-1"}
    rules = [
        preview(INGRESS, f"{g.name}-ssh", {**unknown_group, "cidrIpv6": c}, {"securityGroupId": [g]})
        for g, c in ((a, "::/1"), (b, "8000::/1"))
    ]
    lt = preview(
        LT, "nodes", {"vpcSecurityGroupIds": [UNKNOWN_STRING_VALUE, UNKNOWN_STRING_VALUE]}, {"vpcSecurityGroupIds": [a, b]}
    )
    reports: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        reports.append((message, urn))

    _no_public_ssh_union(StackValidationArgs([a, b, *rules, lt], None), report)
    assert reports == [
        (
            "nodes: its security groups (a, b) together open SSH (tcp/22) to the whole internet (::/1 + 8000::/1); "
            "list your own CIDRs in gpuforge:sshCidrs, or use SSM Session Manager",
            lt.urn,
        )
    ]
