"""Run a corpus file through the parser and evaluator that judge it on a node, and compare the
verdict with the one its manifest entry states (written from reading the capture).

Each tool is fed exactly what the check's command would hand it: the Xid scan gets the kernel
log lines `grep -F 'NVRM: Xid'` keeps, between the scan's own markers; fi_info gets the exit
status marker its command appends. Nothing else is changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, ParseError
from gpuforge.validate.gpu.bootstrap_status import BootstrapStatusCheck
from gpuforge.validate.gpu.efa import MARK as FI_MARK
from gpuforge.validate.gpu.efa import EfaProviderCheck
from gpuforge.validate.gpu.health import GpuHealthCheck
from gpuforge.validate.gpu.inventory import GpuInventoryCheck
from gpuforge.validate.gpu.nvlink import NvlinkCheck
from gpuforge.validate.gpu.topology import TopologyCheck
from gpuforge.validate.gpu.xid import GREP as XID_GREP
from gpuforge.validate.gpu.xid import MARK as XID_MARK
from gpuforge.validate.gpu.xid import XidScanCheck
from gpuforge.validate.kubernetes import KubernetesExpect, evaluate_smi_pod
from gpuforge.validate.nccl import evaluate_nccl, parse_nccl
from gpuforge.validate.network import iperf, ping
from gpuforge.validate.thresholds import build_expectations

CORPUS = Path(__file__).resolve().parent
MANIFEST = CORPUS / "manifest.yaml"
NODE = "node"


@dataclass(frozen=True)
class Entry:
    file: str
    tool: str
    expect: dict[str, str]  # check name -> level
    node: dict[str, Any] = field(default_factory=dict)  # profile / instance_type / overrides
    args: dict[str, Any] = field(default_factory=dict)  # tool-specific: link_gbps, rc, scope ...
    note: str = ""

    def text(self) -> str:
        # bytes as stored; undecodable bytes are replaced, as the transport does with node output
        return (CORPUS / self.file).read_bytes().decode("utf-8", errors="replace")

    def expectations(self) -> Expectations:
        n = self.node
        return build_expectations(n.get("profile"), n.get("instance_type"), dict(n.get("overrides") or {}))


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    doc = yaml.safe_load(path.read_text())
    return [Entry(**e) for e in doc["entries"]]


def _node_check(check: Any) -> Callable[[Entry], list[CheckResult]]:
    def run(e: Entry) -> list[CheckResult]:
        return list(check().run_on_output(NODE, e.text(), e.expectations()))

    return run


def _xid(e: Entry) -> list[CheckResult]:
    kept = [ln for ln in e.text().splitlines() if re.search(XID_GREP, ln)]  # the command's grep -E
    out = f"{XID_MARK} source={e.args.get('source', 'dmesg')}\n" + "".join(f"{ln}\n" for ln in kept)
    return XidScanCheck().run_on_output(NODE, out + f"{XID_MARK} end\n", e.expectations())


def _fi_info(e: Entry) -> list[CheckResult]:
    out = e.text() + f"{FI_MARK} rc={int(e.args.get('rc', 0))}\n"
    return EfaProviderCheck().run_on_output(NODE, out, e.expectations())


def _nccl(e: Entry) -> list[CheckResult]:
    try:
        run = parse_nccl(e.text())
    except ParseError as exc:
        return [CheckResult("nccl.run", Level.UNKNOWN, (NODE,), None, None, f"could not parse output: {exc}")]
    return evaluate_nccl((NODE,), run, e.expectations(), scope=e.args.get("scope", "intra"))


def _iperf(e: Entry) -> list[CheckResult]:
    try:
        m = iperf.parse(e.text())
    except ParseError as exc:
        return [CheckResult(iperf.NAME, Level.UNKNOWN, ("a<->b",), None, None, f"could not parse output: {exc}")]
    return [iperf.evaluate("a", "b", m, e.args.get("link_gbps"), "corpus manifest")]


def _ping(e: Entry) -> list[CheckResult]:
    try:
        m = ping.parse(e.text())
    except ParseError as exc:
        return [CheckResult(ping.NAME, Level.UNKNOWN, ("a<->b",), None, None, f"could not parse output: {exc}")]
    return ping.evaluate("a", "b", m, e.args.get("p99_ms"), e.args.get("mtu"))


def _smi_table(e: Entry) -> list[CheckResult]:
    # the Kubernetes check's one-GPU pod runs plain `nvidia-smi`; its log is judged as it comes
    expect = KubernetesExpect(gpu_nodes=1, advertised_per_node={}, gpu_model=e.args.get("gpu_model"))
    return [evaluate_smi_pod(str(e.args.get("phase", "Succeeded")), e.text(), NODE, expect)]


TOOLS: dict[str, Callable[[Entry], list[CheckResult]]] = {
    "smi_csv": _node_check(GpuInventoryCheck),
    "smi_q": _node_check(GpuHealthCheck),
    "topo": _node_check(TopologyCheck),
    "nvlink": _node_check(NvlinkCheck),
    "xid": _xid,
    "nccl": _nccl,
    "iperf3": _iperf,
    "ping": _ping,
    "fi_info": _fi_info,
    "bootstrap": _node_check(BootstrapStatusCheck),
    "smi_table": _smi_table,
}


@dataclass(frozen=True)
class Outcome:
    entry: Entry
    right: bool
    got: dict[str, str]  # check name -> level seen (first result of that name)
    messages: dict[str, str]


def judge(e: Entry) -> Outcome:
    results = TOOLS[e.tool](e)
    got: dict[str, str] = {}
    messages: dict[str, str] = {}
    for r in results:
        got.setdefault(r.check, r.level.value)
        messages.setdefault(r.check, r.message)
    right = all(got.get(check) == level for check, level in e.expect.items())
    return Outcome(e, right, got, messages)
