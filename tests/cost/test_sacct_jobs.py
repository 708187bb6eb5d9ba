"""`gpuforge cost --jobs` on real sacct output captured from the accounting test bed
(tests/cost/fixtures/sacct, SOURCES.md there): the parser, the prices of those very jobs, and the
command end to end with a replay `sacct` on PATH that prints a capture and exits with its code."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from gpuforge.core.jobcost import NodePricing, SacctError, cost_jobs, parse_sacct

FIX = Path(__file__).resolve().parent / "fixtures" / "sacct"
# The bed's node (CPUs=8, RealMemory=500, 8 GPUs) at a round $32 per node-hour.
BED = NodePricing(stack="gfbed", instance_type="bed-node", region="here", purchase_option="on_demand",
                  usd_per_node_hour=32.0, cpus=8, memory_mb=500, gpus=8, gpu_type="a100", source="test")  # fmt: skip


def _text(name: str) -> str:
    return (FIX / f"{name}.txt").read_text()


def test_two_teams_capture_parses_to_its_jobs() -> None:
    a, b = parse_sacct(_text("02-two-teams"))
    assert (a.job_id, a.user, a.account, a.partition, a.state) == ("1", "gfacct-ana", "gfacct-vision", "shared", "COMPLETED")
    assert (a.elapsed_s, a.nodes, a.cpus, a.memory_mb, a.gpus, a.gpu_type) == (3, 1, 2, 100.0, 2, "a100")
    # exclusive partition: asked for 1 CPU, allocated all 8
    assert (b.user, b.account, b.partition, b.cpus, b.memory_mb, b.gpus) == ("gfacct-bo", "gfacct-search", "train", 8, 500.0, 8)


def test_the_captured_jobs_cost_what_the_share_rule_says() -> None:
    a, b = cost_jobs(parse_sacct(_text("02-two-teams")), BED)
    # ana: max(2/8 CPUs, 100/500 MB, 2/8 GPUs) = 0.25 of a node for 3 s at $32/h
    assert a.node_share == pytest.approx(0.25)
    assert a.usd == pytest.approx(0.25 * 3 / 3600 * 32)
    assert a.gpu_hours == pytest.approx(2 * 3 / 3600)
    # bo: every CPU of the node (exclusive): the whole node for 2 s
    assert b.node_share == pytest.approx(1.0) and b.usd == pytest.approx(2 / 3600 * 32)


def test_pending_job_is_kept_apart_and_cancelled_before_start_is_dropped() -> None:
    jobs = parse_sacct(_text("03-pending-over-quota"))
    [pending] = [j for j in jobs if j.pending]
    assert (pending.job_id, pending.req_gpus, pending.nodes, pending.elapsed_s) == ("3", 16, 2, 0)
    assert len(cost_jobs(jobs, BED)) == 2  # the pending job costs nothing
    after = parse_sacct(_text("05-after-outage"))
    assert [j.job_id for j in after] == ["1", "2", "4"]  # 3: CANCELLED by 0 with Start None, never ran


def test_header_only_is_no_jobs() -> None:
    assert parse_sacct(_text("01-empty")) == []


def test_broken_output_is_an_error_never_a_zero() -> None:
    good = _text("02-two-teams")
    lines = good.splitlines()
    with pytest.raises(SacctError, match="fields"):
        parse_sacct("\n".join([lines[0], lines[1][:40]]))  # a truncated record
    with pytest.raises(SacctError, match="lacks AllocTRES"):
        parse_sacct(good.replace("AllocTRES", "Alloc"))
    with pytest.raises(SacctError, match="ElapsedRaw"):
        parse_sacct(good.replace("|3|1|", "|x|1|", 1))
    with pytest.raises(SacctError, match="mem="):
        parse_sacct(good.replace("mem=100M", "mem=lots", 1))
    with pytest.raises(SacctError, match="no output"):
        parse_sacct(_text("04-slurmdbd-down"))


# -- the command, with a replay sacct on PATH


@pytest.fixture
def replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """replay(name): sacct prints <name>.txt and <name>.stderr and exits with the captured code."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "pricing.json").write_text(BED.to_json())
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")

    def use(name: str) -> Path:
        rc = (FIX / f"{name}.stderr").read_text().partition("\n")[0].removeprefix("rc=")
        (bindir / "sacct").write_text(f"#!/bin/sh\n# replays tests/cost/fixtures/sacct/{name}\ncat {FIX}/{name}.txt\n"
                                      f"tail -n +2 {FIX}/{name}.stderr >&2\nexit {rc}\n")  # fmt: skip
        # no squeue capture: it fails, and the pending reasons stay sacct's own
        (bindir / "squeue").write_text("#!/bin/sh\necho 'squeue: no capture in this replay' >&2\nexit 1\n")
        for tool in ("sacct", "squeue"):
            (bindir / tool).chmod(0o755)
        return tmp_path / "pricing.json"

    return use


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from gpuforge.cli import main

    with pytest.raises(SystemExit) as ex:
        main(args)
    out = capsys.readouterr()
    return int(ex.value.code or 0), out.out, out.err


def test_cost_jobs_json_totals_per_user_and_team(replay: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(replay)
    pricing = replay("05-after-outage")
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", "json"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["empty"] is False and [j["job_id"] for j in doc["jobs"]] == ["1", "2", "4"]
    vision = next(t for t in doc["totals"]["teams"] if t["team"] == "gfacct-vision")
    # jobs 1 (0.25 node x 3 s) and 4 (max(1/8, 50/500, 1/8) = 0.125 node x 2 s) at $32/h
    assert vision["jobs"] == 2 and vision["usd"] == pytest.approx((0.25 * 3 + 0.125 * 2) / 3600 * 32, abs=1e-6)
    assert vision["gpu_hours"] == pytest.approx((2 * 3 + 1 * 2) / 3600, abs=1e-6)
    assert doc["totals"]["all"]["usd"] == pytest.approx((0.25 * 3 + 1.0 * 2 + 0.125 * 2) / 3600 * 32, abs=1e-6)


def test_cost_jobs_csv_and_plain(replay: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(replay)
    pricing = replay("02-two-teams")
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and [r["record"] for r in rows] == ["job", "job", "total-user", "total-user", "total-team",
                                                       "total-team", "total-all"]  # fmt: skip
    assert rows[0]["user"] == "gfacct-ana" and float(rows[0]["node_share"]) == 0.25
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", "plain"], capsys)
    assert rc == 0 and "1\twrap\tgfacct-ana\tgfacct-vision\tshared\ta100\t2\t00:00:03" in out


def test_pending_job_is_named_with_its_reason(replay: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(replay)
    pricing = replay("03-pending-over-quota")
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", "plain"], capsys)
    # squeue (the replay has no capture of it) could not say why: sacct's own Reason stands
    assert rc == 0 and "# pending: job 3 (wrap) of gfacct-bo in gfacct-search waits for 16 GPU(s): None" in out


def test_empty_accounting_is_said_never_zero(replay: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(replay)
    pricing = replay("01-empty")
    for fmt in ("plain", "table", "csv"):
        rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", fmt], capsys)
        assert rc == 0 and "no jobs ran since 2026-12-03" in out and "0.0" not in out, fmt
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing), "--format", "json"], capsys)
    doc = json.loads(out)
    assert doc["empty"] is True and doc["totals"] is None


def test_unreadable_accounting_exits_1_with_sacct_reason(replay: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert callable(replay)
    pricing = replay("04-slurmdbd-down")
    rc, out, err = _run(["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(pricing)], capsys)
    assert rc == 1 and out == ""
    assert err.splitlines()[0] == ("error: cannot read Slurm accounting (sacct on here exited 1): "
                                   "sacct: error: Problem talking to the database: Connection refused")  # fmt: skip


@pytest.mark.parametrize(("args", "key"), [
    (["--jobs"], "--since"),
    (["--jobs", "--since", "last week"], "--since"),
    (["--since", "2026-12-01", "--stack", "cv-training"], "--since is for --jobs"),
    (["--stack", "cv-training", "--format", "csv"], "csv is for --jobs"),
    ([], "--stack is required"),
])  # fmt: skip
def test_bad_input_is_one_error_line_exit_2(args: list[str], key: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["cost", *args], capsys)
    assert rc == 2 and err.startswith("error: ") and key in err.splitlines()[0] and "Traceback" not in err


def test_cost_jobs_without_a_price_is_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr("gpuforge.core.jobcost.PRICING_FILE", str(tmp_path / "absent.json"))
    monkeypatch.setattr("gpuforge.commands.cost_jobs.PRICING_FILE", str(tmp_path / "absent.json"))
    rc, _, err = _run(["cost", "--jobs", "--since", "2026-12-01"], capsys)
    assert rc == 2 and "node price" in err


def test_cost_jobs_prices_with_the_stacks_own_arithmetic(replay: object, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--stack: the node price is `gpuforge cost`'s per node-hour at the stack's purchase option."""
    import shutil

    from gpuforge.core.costplan import stack_cost
    from tests.slurm.conftest import PROJECT, slurm_stack

    assert callable(replay)
    replay("02-two-teams")
    proj = tmp_path / "proj"
    (proj / "stacks").mkdir(parents=True)
    shutil.copy(PROJECT / "Pulumi.yaml", proj / "Pulumi.yaml")
    text = (PROJECT / "stacks" / "Pulumi.cv-training.yaml").read_text()
    extra = "  gpuforge:scheduler: slurm\n  gpuforge:os: ubuntu-24.04\n  gpuforge:purchaseOption: spot\n"
    (proj / "stacks" / "Pulumi.cv-training.yaml").write_text(text.replace("config:\n", "config:\n" + extra, 1))
    rc, out, _ = _run(["cost", "--jobs", "--since", "2026-12-03", "--stack", "cv-training", "--project-dir", str(proj),
                       "--format", "json"], capsys)  # fmt: skip
    doc = json.loads(out)
    cfg = slurm_stack("cv-training", os="ubuntu-24.04", purchaseOption="spot")
    price = stack_cost(cfg).per_node_hourly("spot")
    assert rc == 0 and price is not None and doc["pricing"]["usd_per_node_hour"] == pytest.approx(price)
    # the captured job 1 on a p4de: 2 GPUs of 8, 2 CPUs of 96, 100 MB: a quarter of the node for 3 s
    assert doc["jobs"][0]["node_share"] == pytest.approx(0.25) and doc["jobs"][0]["usd"] == pytest.approx(
        0.25 * 3 / 3600 * price, abs=1e-6)


def test_a_finished_job_whose_end_is_not_recorded_is_said_to_be_not_final(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the slurmdbd outage the accounting bed once showed job 4 COMPLETED with End=Unknown and
    an ElapsedRaw of 11 that grew with each read (its sacct line was not kept; this variant of
    05-after-outage sets those two fields, as SOURCES.md allows variants to be made)."""
    lines = _text("05-after-outage").splitlines()
    cells = lines[4].split("|")
    assert cells[0] == "4" and cells[5] == "COMPLETED"
    cells[8], cells[9] = "Unknown", "11"
    (tmp_path / "sacct.txt").write_text("\n".join([*lines[:4], "|".join(cells)]) + "\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sacct").write_text(f"#!/bin/sh\ncat {tmp_path}/sacct.txt\n")
    (bindir / "sacct").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    (tmp_path / "pricing.json").write_text(BED.to_json())
    base = ["cost", "--jobs", "--since", "2026-12-03", "--pricing", str(tmp_path / "pricing.json")]
    rc, out, _ = _run([*base, "--format", "json"], capsys)
    jobs = {j["job_id"]: j for j in json.loads(out)["jobs"]}
    assert rc == 0 and jobs["4"]["final"] is False and jobs["1"]["final"] is True and jobs["4"]["elapsed_s"] == 11
    rc, out, _ = _run([*base, "--format", "plain"], capsys)
    assert rc == 0 and ("# not final: job 4 is COMPLETED but its end is not in accounting yet (slurmdbd is catching up, "
                        "e.g. after an outage): priced for the 00:00:11 up to now; read again for its final cost") in out
    assert "not final: job 1 " not in out and "not final: job 2 " not in out
