"""Is Slurm's accounting store reachable? A cluster-level finding, asked of Slurm's own clients
where they work (the head node; issue 24).

A slurmdbd outage does not stop jobs: slurmctld keeps the records it could not send in its DBD
agent queue and sends them once slurmdbd is back (up to MaxDBDMsgs; past that it drops them). So
the outage is not a node failure and never a drain, but it must be seen: sacct, `gpuforge cost
--jobs` and quotas' usage read nothing new until it ends. Three client calls, each bounded:

- `scontrol show config`: AccountingStorageType/Host/Port and ClusterName (no accounting, no check);
- `sacctmgr show cluster NAME`: slurmdbd answers (its own connection, from here), and knows the cluster;
- `sdiag`: "DBD Agent queue size: N" (Slurm 22.05.8 and 23.11.4 src/sdiag/sdiag.c), the records
  slurmctld holds for slurmdbd.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuforge.common.results import CheckResult, Level
from gpuforge.validate.slurm import SlurmClient, _run

CHECK = "slurm.accounting"
_CONFIG_LINE = re.compile(r"^(\w+)\s*=\s*(.*?)\s*$")
_QUEUE = re.compile(r"^DBD Agent queue size:\s*(\d+)\s*$", re.MULTILINE)


def config_values(text: str) -> dict[str, str]:
    """`scontrol show config`'s `Key = value` lines."""
    return {m.group(1): m.group(2) for m in map(_CONFIG_LINE.match, text.splitlines()) if m}


def queue_size(sdiag: str) -> int | None:
    m = _QUEUE.search(sdiag)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class AccountingState:
    cluster: str
    store: str  # AccountingStorageHost:Port
    answers: bool  # sacctmgr got an answer from slurmdbd
    knows_cluster: bool
    why: str  # sacctmgr's last error line when it did not answer
    queued: int | None  # sdiag's DBD Agent queue size; None when sdiag did not say


def judge(s: AccountingState) -> CheckResult:
    queued = "unknown (sdiag did not answer)" if s.queued is None else str(s.queued)
    target = (f"cluster {s.cluster}",)
    if not s.answers:
        return CheckResult(CHECK, Level.ERROR, target, s.queued, 0,
                           f"accounting store unreachable: slurmdbd at {s.store} does not answer ({s.why}); slurmctld "
                           f"holds {queued} record(s) for it (sdiag DBD Agent queue size). Jobs still run and are "
                           "recorded once it is back; until then sacct and cost --jobs show nothing new. Not a node "
                           "fault: no node is drained for it")  # fmt: skip
    if not s.knows_cluster:
        return CheckResult(CHECK, Level.ERROR, target, s.queued, 0,
                           f"slurmdbd at {s.store} answers but has no cluster {s.cluster}: nothing of this cluster "
                           f"is recorded (slurmctld holds {queued} record(s)); the head's slurm-accounting phase "
                           "registers it (sacctmgr add cluster)")  # fmt: skip
    return CheckResult(CHECK, Level.PASS, target, s.queued, None,
                       f"slurmdbd at {s.store} answers and records cluster {s.cluster}; slurmctld holds {queued} "
                       "record(s) for it")  # fmt: skip


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def accounting_results(settings: SlurmClient | None = None, deadline_s: float = 30.0) -> list[CheckResult]:
    """The check, through this machine's Slurm clients; [] when the cluster has no accounting."""
    settings = settings or SlurmClient()
    rc, out, err, _ = _run(["scontrol", "show", "config"], settings, deadline_s)
    if rc != 0:
        why = "timed out" if rc is None else f"exit {rc}: {_last_line(err)}"
        return [CheckResult(CHECK, Level.UNKNOWN, ("cluster",), None, None,
                            f"cannot read Slurm's configuration (scontrol show config {why})")]  # fmt: skip
    conf = config_values(out)
    if conf.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/slurmdbd":
        return []
    cluster = conf.get("ClusterName", "?")
    store = f"{conf.get('AccountingStorageHost', '?')}:{conf.get('AccountingStoragePort', '?')}"
    rc, out, err, _ = _run(["sacctmgr", "--immediate", "--noheader", "--parsable2", "show", "cluster", cluster,
                            "format=Cluster"], settings, deadline_s)  # fmt: skip
    answers = rc == 0
    why = "" if answers else ("timed out" if rc is None else _last_line(err))
    knows = answers and cluster in {ln.strip() for ln in out.splitlines()}
    rc, sdiag, _, _ = _run(["sdiag"], settings, deadline_s)
    queued = queue_size(sdiag) if rc == 0 else None
    return [judge(AccountingState(cluster, store, answers, knows, why, queued))]
