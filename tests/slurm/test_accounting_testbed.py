"""Slurm accounting on real daemons (tests/slurm/acctbed.py): Debian 12's slurmctld, slurmd and
slurmdbd 22.05.8 with MariaDB 10.11, configured by gpuforge's rendered slurm.conf, slurmdbd.conf.in,
90-gpuforge.cnf and accounting scripts, brought up in the head's order.

Two teams with one user each run jobs; sacct shows them with gres/gpu; `gpuforge cost --jobs`
prices them by the share rule against sacct's own elapsed seconds; a job over its team's GPU quota
pends with AssocGrpGRES; with slurmdbd stopped a job still runs, `cost --jobs` refuses (exit 1),
and once slurmdbd is back sacct and `cost --jobs` show the job. Needs root; every wait is bounded.

GPUFORGE_SACCT_CAPTURE=DIR keeps the sacct output each step read (how tests/cost/fixtures/sacct
was captured).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuforge.core.jobcost import NodePricing, sacct_args
from tests.slurm.acctbed import USERS, AcctBed, acct_missing
from tests.slurm.slurmbed import CONTROLLER

pytestmark = [pytest.mark.netns, pytest.mark.slow]
ANA, BO = USERS[0].name, USERS[1].name
PRICE = 32.0  # USD per bed node-hour: a round number, so the arithmetic below is easy to follow
SINCE = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))


@pytest.fixture(scope="module")
def bed() -> Iterator[AcctBed]:
    why = acct_missing()
    if why:
        pytest.skip(why)
    b = AcctBed(2)
    b.up()
    try:
        b.wait_for("two idle nodes", lambda s: len(s) == 2 and all(v[0] == "idle" for v in s.values()), 60)
        lay = b.layout()
        pricing = NodePricing(stack="gfbed", instance_type="bed-node", region="here", purchase_option="on_demand",
                              usd_per_node_hour=PRICE, cpus=lay.cpus, memory_mb=lay.real_memory_mb,
                              gpus=lay.gpus_per_node, gpu_type=lay.gpu_type, source="test bed")  # fmt: skip
        (b.root / "pricing.json").write_text(pricing.to_json())
        yield b
    finally:
        b.down()


def _capture(bed: AcctBed, name: str) -> str:
    """sacct as `cost --jobs` runs it; kept under GPUFORGE_SACCT_CAPTURE when set."""
    res = bed.client(*sacct_args(SINCE), check=False)
    where = os.environ.get("GPUFORGE_SACCT_CAPTURE")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{name}.txt").write_text(res.stdout)
        (Path(where) / f"{name}.stderr").write_text(f"rc={res.returncode}\n{res.stderr}")
    return res.stdout


def _cost(bed: AcctBed, capsys: pytest.CaptureFixture[str], fmt: str = "json") -> tuple[int, str, str]:
    from gpuforge.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        main(["cost", "--jobs", "--since", SINCE, "--pricing", str(bed.root / "pricing.json"),
              "--slurm-conf", bed.env["SLURM_CONF"], "--format", fmt])  # fmt: skip
    out = capsys.readouterr()
    return int(ex.value.code or 0), out.out, out.err


def _sbatch(bed: AcctBed, user: str, *args: str, wait: bool = True) -> str:
    res = bed.as_user(user, "sbatch", "--parsable", *(["--wait"] if wait else []), f"--output={bed.root}/out/%j.out",
                      *args, timeout=90, check=False)  # fmt: skip
    # on failure, what sbatch said and what slurmctld logged (a refused submission is in both)
    assert res.returncode == 0, f"sbatch as {user} {args}: rc {res.returncode}: {res.stderr}{bed.log_tail()}"
    return res.stdout.strip().split(";")[0]


def _finished_in_window(bed: AcctBed, job: str) -> bool:
    """The time-window query `cost --jobs` makes lists `job` as COMPLETED with its End time. After a
    slurmdbd outage the record shows COMPLETED with End=Unknown for a while (seen on this bed: sacct
    then counts ElapsedRaw up to now, so two reads a second apart differ) until slurmctld's buffered
    completion arrives; before that the record is not final."""
    fields = sacct_args(SINCE)[-1].removeprefix("--format=").split(",")
    state, end = fields.index("State"), fields.index("End")
    rows = [ln.split("|") for ln in bed.client(*sacct_args(SINCE), check=False).stdout.splitlines()]
    return any(r[0] == job and r[state] == "COMPLETED" and r[end] not in ("Unknown", "") for r in rows)


def _sacct_job(bed: AcctBed, job: str) -> str:
    return bed.client("sacct", "-X", "-n", "-P", "-j", job, "--format=JobID,User,Account,State,AllocTRES", check=False).stdout


def test_accounting_is_up_from_the_rendered_files(bed: AcctBed) -> None:
    conf = (bed.root / "etc" / "slurmdbd.conf")
    assert conf.stat().st_mode & 0o777 == 0o600
    assert not any(ln.startswith("StoragePass") for ln in (bed.root / "etc" / "slurmdbd.conf.in").read_text().splitlines())
    versions = [bed.client(d, "-V").stdout.split()[1] for d in ("slurmdbd", "slurmctld")]
    dbd, ctld = (tuple(int(x) for x in v.split(".")) for v in versions)
    assert dbd >= ctld, versions
    assoc = bed.client("sacctmgr", "-n", "-P", "show", "association", "format=account,user,grptres").stdout
    assert {"gfacct-vision||gres/gpu=16", "gfacct-search||gres/gpu=8", f"gfacct-vision|{ANA}|gres/gpu=12",
            f"gfacct-search|{BO}|"} <= set(assoc.splitlines()), assoc  # fmt: skip
    # the bootstrap re-runs its phases: a second registration changes nothing
    assert bed.accounting("register") == "" and bed.accounting("cluster") == ""
    assert "registered cluster gfbed" in bed.registered


def test_empty_accounting_is_said_as_such_never_as_zero(bed: AcctBed, capsys: pytest.CaptureFixture[str]) -> None:
    assert _capture(bed, "01-empty").splitlines()[1:] == []
    rc, out, _ = _cost(bed, capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["empty"] is True and doc["jobs"] == [] and doc["totals"] is None
    rc, out, _ = _cost(bed, capsys, "plain")
    assert rc == 0 and "no jobs ran since" in out and "0.00" not in out


def test_jobs_of_two_teams_are_accounted_and_priced(bed: AcctBed, capsys: pytest.CaptureFixture[str]) -> None:
    # ana (vision): part of a node: 2 of 8 GPUs, 2 of 8 CPUs, 100 of 500 MB -> a quarter of a node
    part = _sbatch(bed, ANA, "-p", "shared", "--gres=gpu:a100:2", "-c", "2", "--mem=100M", "--wrap", "sleep 3")
    # bo (search): the exclusive partition: every CPU of one node, so a whole node
    whole = _sbatch(bed, BO, "-p", "train", "-N1", "--gres=gpu:a100:8", "--wrap", "sleep 2")
    bed.wait_until("both jobs in sacct as COMPLETED, with their end",
                   lambda: all(_finished_in_window(bed, j) for j in (part, whole)), 60)  # fmt: skip
    assert "gres/gpu=2" in _sacct_job(bed, part) and "gres/gpu:a100=2" in _sacct_job(bed, part)
    assert "gres/gpu=8" in _sacct_job(bed, whole)
    raw = _capture(bed, "02-two-teams")
    elapsed = {line.split("|")[0]: int(line.split("|")[9]) for line in raw.splitlines()[1:]}

    rc, out, _ = _cost(bed, capsys)
    assert rc == 0, out
    doc: dict[str, Any] = json.loads(out)
    jobs = {j["job_id"]: j for j in doc["jobs"]}
    a, b = jobs[part], jobs[whole]
    assert (a["user"], a["team"], a["gpu_type"], a["gpus"]) == (ANA, "gfacct-vision", "a100", 2)
    assert (b["user"], b["team"], b["gpus"], b["cpus"]) == (BO, "gfacct-search", 8, 8)
    assert a["node_share"] == pytest.approx(0.25) and b["node_share"] == pytest.approx(1.0)
    assert a["elapsed_s"] == elapsed[part] >= 3
    assert a["gpu_hours"] == pytest.approx(2 * elapsed[part] / 3600, abs=1e-6)
    assert a["usd"] == pytest.approx(0.25 * elapsed[part] / 3600 * PRICE, abs=1e-6)
    assert b["usd"] == pytest.approx(1.0 * elapsed[whole] / 3600 * PRICE, abs=1e-6)
    teams = {t["team"]: t for t in doc["totals"]["teams"]}
    assert teams["gfacct-vision"]["usd"] == pytest.approx(a["usd"], abs=1e-6)
    assert teams["gfacct-search"]["gpu_hours"] == pytest.approx(8 * elapsed[whole] / 3600, abs=1e-6)
    rc, out, _ = _cost(bed, capsys, "csv")
    assert rc == 0 and out.splitlines()[0].startswith("record,job_id") and f"job,{part}," in out


def test_a_job_over_its_teams_gpu_quota_pends_with_assoc_grp_gres(bed: AcctBed,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    # search's quota is 8 GPUs; two whole nodes are 16
    job = _sbatch(bed, BO, "-p", "train", "-N2", "--gres=gpu:a100:8", "--wrap", "sleep 1", wait=False)
    try:
        seen: list[str] = []

        def over_quota() -> bool:  # "PENDING None" until the scheduler has looked at it
            seen.append(bed.client("squeue", "-h", "-j", job, "-o", "%T %r").stdout.strip())
            return seen[-1] == "PENDING AssocGrpGRES"

        try:
            bed.wait_until(f"job {job} to pend with AssocGrpGRES", over_quota, 30)
        except AssertionError as exc:
            raise AssertionError(f"squeue said {seen[-5:]}; {exc}") from None
        time.sleep(3)  # a scheduling pass later it still waits
        assert bed.client("squeue", "-h", "-j", job, "-o", "%T %r").stdout.strip() == "PENDING AssocGrpGRES"
        assert set(seen) <= {"PENDING None", "PENDING AssocGrpGRES"}, seen  # never ran, never another reason
        # slurmctld sends the pending job's record to slurmdbd on its own time: wait until the
        # time-window query cost --jobs makes lists it
        bed.wait_until(f"job {job} in sacct's time window as PENDING",
                       lambda: any(ln.startswith(f"{job}|") and "|PENDING|" in ln
                                   for ln in bed.client(*sacct_args(SINCE), check=False).stdout.splitlines()), 60)  # fmt: skip
        _capture(bed, "03-pending-over-quota")
        rc, out, _ = _cost(bed, capsys, "plain")
        assert rc == 0 and f"pending: job {job} (wrap) of {BO} in gfacct-search waits for 16 GPU(s): AssocGrpGRES" in out
    finally:
        bed.client("scancel", job, check=False)


def _validate_accounting(bed: AcctBed, tmp: Path, capsys: pytest.CaptureFixture[str],
                         monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[dict[str, Any]], dict[str, str]]:  # fmt: skip
    """`gpuforge validate --transport slurm --checks slurm.accounting` where Slurm's clients work:
    its exit, the accounting results and every node's verdict."""
    from gpuforge.cli import main

    monkeypatch.setenv("SLURM_CONF", bed.env["SLURM_CONF"])
    inv = tmp / "inventory.json"
    inv.write_text(json.dumps(bed.tb.inventory()))
    out = tmp / f"evidence-{time.monotonic_ns()}"
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--transport", "slurm", "--checks", "slurm.accounting",
              "--format", "json", "--out", str(out)])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    states = {n: v["state"] for n, v in doc["context"]["nodes"].items()}
    return int(ex.value.code or 0), [r for r in doc["results"] if r["check"] == "slurm.accounting"], states


def _head_status(bed: AcctBed) -> tuple[int, str]:
    """The head's accounting health, as its timer runs it: the rendered `gpuforge-slurm-accounting status`."""
    from gpuforge.bootstrap.slurm import ACCOUNTING_SCRIPT

    res = subprocess.run([str(bed.script(ACCOUNTING_SCRIPT)), "status"], capture_output=True, text=True, timeout=90,
                         check=False, env={**os.environ, **bed.env})  # fmt: skip
    return res.returncode, res.stdout.strip()


def test_jobs_run_while_slurmdbd_is_down_and_are_accounted_when_it_is_back(
    bed: AcctBed, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And validate says so meanwhile: the accounting store unreachable, a cluster-level finding
    with the records slurmctld holds for it, every node still ok and none drained; it clears
    once slurmdbd is back and slurmctld has sent what it held."""
    rc, [acct], states = _validate_accounting(bed, tmp_path, capsys, monkeypatch)
    assert rc == 0 and acct["level"] == "pass" and acct["targets"] == ["cluster gfbed"], acct
    assert set(states.values()) == {"ok"}
    rc, line = _head_status(bed)
    assert rc == 0 and line.startswith(f"accounting: slurmdbd {CONTROLLER}:{bed.dbd_port} answers and records cluster gfbed; "
                                       "slurmctld holds 0 record(s)"), line  # fmt: skip
    bed.stop_slurmdbd()
    try:
        rc, out, err = _cost(bed, capsys)
        assert rc == 1 and out == "" and err.startswith("error: cannot read Slurm accounting"), err
        _capture(bed, "04-slurmdbd-down")
        job = _sbatch(bed, ANA, "-p", "shared", "--gres=gpu:a100:1", "-c", "1", "--mem=50M", "--wrap", "sleep 2")
        assert bed.client("scontrol", "show", "job", job).stdout.count("JobState=COMPLETED") == 1
        rc, [acct], states = _validate_accounting(bed, tmp_path, capsys, monkeypatch)
        assert rc == 1 and acct["level"] == "error" and acct["targets"] == ["cluster gfbed"], acct
        msg = acct["message"]
        assert msg.startswith("accounting store unreachable: slurmdbd at ") and "Connection refused" in msg, msg
        assert acct["observed"] >= 1, acct  # the job's records, held by slurmctld (sdiag DBD Agent queue size)
        assert set(states.values()) == {"ok"}  # not a node failure
        assert all(st == "idle" for st, _ in bed.states().values())  # and nothing drained
        held = acct["observed"]
        rc, line = _head_status(bed)  # the head's health says the same
        assert rc == 1 and line.startswith(f"accounting store unreachable: slurmdbd {CONTROLLER}:{bed.dbd_port} does not "
                                           "answer (sacctmgr: error: "), line  # fmt: skip
        m = re.search(r"; slurmctld holds (\d+) record\(s\) for it; jobs still run$", line)
        assert m and int(m.group(1)) >= held, line
    finally:
        bed.start_slurmdbd()
    from gpuforge.validate.accounting import accounting_results
    from gpuforge.validate.slurm import SlurmClient

    bed.wait_until("the accounting finding to clear", lambda: [r.level.value for r in accounting_results(
        SlurmClient(env=bed.env))] == ["pass"], 90)  # fmt: skip
    rc, [acct], _ = _validate_accounting(bed, tmp_path, capsys, monkeypatch)
    assert rc == 0 and acct["level"] == "pass" and held >= 1, acct
    assert _head_status(bed)[0] == 0
    # slurmctld sends what it buffered once slurmdbd is back; `sacct -j` may show the job a few
    # seconds before a time-window query does (seen on this bed), so wait on the query cost --jobs makes.
    bed.wait_until(f"job {job} in sacct's time window after slurmdbd is back, with its end",
                   lambda: _finished_in_window(bed, job), 90)
    _capture(bed, "05-after-outage")
    rc, out, _ = _cost(bed, capsys)
    assert rc == 0
    [j] = [j for j in json.loads(out)["jobs"] if j["job_id"] == job]
    assert j["user"] == ANA and j["gpus"] == 1 and j["usd"] == pytest.approx(
        max(1 / 8, 50 / 500, 1 / 8) * j["elapsed_s"] / 3600 * PRICE, abs=1e-6)


def test_cost_jobs_over_ssh_to_a_host_of_the_cluster(bed: AcctBed, capsys: pytest.CaptureFixture[str]) -> None:
    """--head: sacct runs over the inventory's SSH (host key checked) on node1 of the bed, which
    reaches slurmdbd over its network; the figures are the ones read here."""
    from gpuforge.cli import main

    inv = bed.root / "inventory.json"
    inv.write_text(json.dumps(bed.tb.inventory()))
    args = ["cost", "--jobs", "--since", SINCE, "--pricing", str(bed.root / "pricing.json"),
            "--slurm-conf", bed.env["SLURM_CONF"], "--format", "json"]  # fmt: skip
    capsys.readouterr()
    with pytest.raises(SystemExit) as ex:
        main([*args, "--head", "node1", "--inventory", str(inv)])
    remote = json.loads(capsys.readouterr().out)
    assert ex.value.code == 0 and remote["accounting_read_on"] == "node1"
    rc, out, _ = _cost(bed, capsys)
    local = json.loads(out)
    assert rc == 0 and remote["jobs"] and remote["jobs"] == local["jobs"] and remote["totals"] == local["totals"]
