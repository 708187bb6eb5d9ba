"""Small node checks the network stage depends on: identity, tools present, interface MTU.

They are NodeChecks like the GPU ones (command, pure parse, pure evaluate), at tier 0, so a
node without iperf3 fails its gate with that reason instead of producing a "slow link".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError

NETWORK_TOOLS = ("iperf3", "ping", "ss", "timeout")
# ENA Express (SRD) carries packets of up to MTU 8900; larger ones go by plain ENA and its lower
# per-flow limit. 8800-8900 is what AWS's checker calls good (MTU_RECOMMENDED_MIN/MAX in
# amzn/amzn-ec2-ena-utilities ena-express/check-ena-express-settings.sh @ 6ecb14cf1dc3; EC2 User
# Guide, ENA Express prerequisites). The bootstrap sets 8900 (phases/base.sh.j2, with enaExpress).
ENA_EXPRESS_MTU = (8800, 8900)


@dataclass(frozen=True)
class Identity:
    hostname: str
    kernel: str


class IdentityCheck(NodeCheck[Identity]):
    name: ClassVar[str] = "system.identity"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 10.0

    def command(self) -> str:
        return "uname -n; uname -r"

    def parse(self, stdout: str) -> Identity:
        lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
        if len(lines) != 2:
            raise ParseError(f"expected 2 lines (hostname, kernel), got {len(lines)}")
        return Identity(lines[0], lines[1])

    def evaluate(self, node: str, measurement: Identity, expect: Expectations) -> list[CheckResult]:
        m = measurement
        observed = {"hostname": m.hostname, "kernel": m.kernel}
        return [CheckResult(self.name, Level.INFO, (node,), observed, None, f"{m.hostname}, kernel {m.kernel}")]


class ToolsCheck(NodeCheck[dict[str, bool]]):
    name: ClassVar[str] = "system.network_tools"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 10.0

    def command(self) -> str:
        return "; ".join(f"command -v {t} >/dev/null && echo '{t} yes' || echo '{t} no'" for t in NETWORK_TOOLS)

    def parse(self, stdout: str) -> dict[str, bool]:
        found: dict[str, bool] = {}
        for line in stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in NETWORK_TOOLS and parts[1] in ("yes", "no"):
                found[parts[0]] = parts[1] == "yes"
        missing = [t for t in NETWORK_TOOLS if t not in found]
        if missing:
            raise ParseError(f"no answer for {', '.join(missing)}")
        return found

    def evaluate(self, node: str, measurement: dict[str, bool], expect: Expectations) -> list[CheckResult]:
        absent = [t for t, ok in measurement.items() if not ok]
        if absent:
            return [
                CheckResult(
                    self.name,
                    Level.ERROR,
                    (node,),
                    {"missing": absent},
                    list(NETWORK_TOOLS),
                    f"missing {', '.join(absent)}: install them (Debian: iperf3 iputils-ping iproute2 coreutils)",
                )
            ]
        return [CheckResult(self.name, Level.PASS, (node,), list(NETWORK_TOOLS), list(NETWORK_TOOLS), "present")]


class MtuCheck(NodeCheck[dict[str, int]]):
    name: ClassVar[str] = "network.mtu"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 10.0

    def command(self) -> str:
        return 'for d in /sys/class/net/*; do [ -r "$d/mtu" ] && echo "${d##*/} $(cat "$d/mtu")"; done; true'

    def parse(self, stdout: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in stdout.splitlines():
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise ParseError(f"unexpected line {line!r}")
            if parts[0] != "lo":
                out[parts[0]] = int(parts[1])
        if not out:
            raise ParseError("no network interface besides lo")
        return out

    def evaluate(self, node: str, measurement: dict[str, int], expect: Expectations) -> list[CheckResult]:
        want = expect.extra.get("mtu")
        if want is None:
            return [CheckResult(self.name, Level.INFO, (node,), measurement, None, "no expected MTU stated")]
        if expect.extra.get("ena_express") and expect.extra.get("ena_express_supported"):
            return [self._ena_express(node, measurement, int(want))]
        if any(v >= int(want) for v in measurement.values()):
            return [CheckResult(self.name, Level.PASS, (node,), measurement, want, f"an interface has MTU >= {want}")]
        return [
            CheckResult(
                self.name,
                Level.ERROR,
                (node,),
                measurement,
                want,
                f"no interface has MTU {want} (source: {expect.sources.get('mtu', 'unstated')})",
            )
        ]

    def _ena_express(self, node: str, measurement: dict[str, int], want: int) -> CheckResult:
        # Not "any interface >= want": EC2's default 9001 on the ENA Express interface is the fault.
        # /sys does not say which interface that is, so an interface in the range stands for it.
        lo, hi = min(want, ENA_EXPRESS_MTU[0]), ENA_EXPRESS_MTU[1]
        if any(lo <= v <= hi for v in measurement.values()):
            return CheckResult(self.name, Level.PASS, (node,), measurement, want, f"an interface has MTU {lo}-{hi} (ENA Express)")
        return CheckResult(
            self.name,
            Level.ERROR,
            (node,),
            measurement,
            want,
            f"no interface has MTU {lo}-{hi}: ENA Express carries no packet over {hi} bytes, so TCP falls back to "
            f"plain ENA and its per-flow limit; set MTU {hi} on the primary interface (gpuforge:enaExpress does)",
        )


def system_checks(network: bool) -> list[NodeCheck[object]]:
    checks: list[NodeCheck[object]] = [IdentityCheck()]  # type: ignore[list-item]
    if network:
        checks += [ToolsCheck(), MtuCheck()]  # type: ignore[list-item]
    return checks
