"""EFA provider present on EFA instance types: `fi_info -p efa`.

One `efa_N-rdm` domain per EFA interface (validation-anchors.md §5 F12 shows `efa_0-rdm` on a
one-EFA instance). The command reports whether fi_info exists and its exit status, so "no
providers" is told apart from "libfabric not installed" and from truncated output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.checks import Expectations, NodeCheck, ParseError

MARK = "# gpuforge fi_info"
EFA_FI_INFO = "/opt/amazon/efa/bin/fi_info"  # where the EFA installer puts it
_RC = re.compile(rf"^{MARK} rc=(?P<rc>\d+)$")
_FIELD = re.compile(r"^(?P<key>provider|fabric|domain|version|type|protocol):\s*(?P<value>\S.*)$")
# What fi_info prints (to stderr) when fi_getinfo finds nothing: "fi_getinfo: -61" (libfabric
# util/info.c `fprintf(stderr, "fi_getinfo: %d\n", ret)`; newer builds add "(No data available)").
# Our command drops stderr, but published captures carry it (aws-samples/aws-hpc-tutorials,
# tests/validate/corpus/fi_info/): it is the answer "no provider", not an unknown line.
_GETINFO_FAILED = re.compile(r"^fi_getinfo: -?\d+(?: \(.*\))?$")


@dataclass(frozen=True)
class FiProvider:
    provider: str
    domain: str | None
    type: str | None


@dataclass(frozen=True)
class EfaInfo:
    installed: bool
    rc: int | None
    providers: tuple[FiProvider, ...]

    def rdm_domains(self) -> list[str]:
        return sorted(
            {p.domain for p in self.providers if p.provider == "efa" and p.type == "FI_EP_RDM" and p.domain}
        )


class EfaProviderCheck(NodeCheck[EfaInfo]):
    name: ClassVar[str] = "efa.provider"
    tier: ClassVar[int] = 0
    timeout_s: ClassVar[float] = 20.0

    def command(self) -> str:
        # validate runs in a non-login SSH session: no /etc/profile.d, so the EFA installer's PATH
        # entry (profile.d/efa.sh) is absent. gpuforge's bootstrap links fi_info into
        # /usr/local/bin; on a node set up otherwise, the installer's own place is tried too.
        return (
            f"fi=$(command -v fi_info 2>/dev/null || {{ [ -x {EFA_FI_INFO} ] && echo {EFA_FI_INFO}; }}); "
            f"if [ -n \"$fi\" ]; then \"$fi\" -p efa 2>/dev/null; echo \"{MARK} rc=$?\"; "
            f"else echo '{MARK} not-installed'; fi"
        )

    def parse(self, stdout: str) -> EfaInfo:
        lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
        if lines == [f"{MARK} not-installed"]:
            return EfaInfo(False, None, ())
        if not lines or not (m := _RC.match(lines[-1])):
            raise ParseError("no fi_info exit-status marker (truncated or timed out)")
        providers: list[dict[str, str]] = []
        for line in lines[:-1]:
            if _GETINFO_FAILED.match(line):
                continue  # no provider matched: the empty provider list says so
            f = _FIELD.match(line)
            if f is None:
                raise ParseError(f"unexpected fi_info line: {line[:80]!r}")
            if f["key"] == "provider":
                providers.append({})
            elif not providers:
                raise ParseError("fi_info field before any 'provider:' line")
            providers[-1][f["key"]] = f["value"].strip()
        return EfaInfo(
            True,
            int(m["rc"]),
            tuple(FiProvider(p["provider"], p.get("domain"), p.get("type")) for p in providers),
        )

    def evaluate(self, node: str, measurement: EfaInfo, expect: Expectations) -> list[CheckResult]:
        t = (node,)
        want = expect.efa_interfaces
        domains = measurement.rdm_domains()
        if not want:
            msg = f"no EFA expected ({want=}); {len(domains)} EFA RDM domain(s) seen"
            return [CheckResult(self.name, Level.INFO, t, domains, want, msg)]
        if not measurement.installed:
            msg = f"fi_info not found: libfabric/EFA software missing on an instance with {want} EFA"
            return [CheckResult(self.name, Level.ERROR, t, None, want, msg)]
        if len(domains) != want:
            msg = f"{len(domains)} EFA RDM domain(s) {domains}, expected {want} (fi_info rc={measurement.rc})"
            return [CheckResult(self.name, Level.ERROR, t, domains, want, msg)]
        return [CheckResult(self.name, Level.PASS, t, domains, want, f"{want} EFA RDM domain(s) via libfabric")]
