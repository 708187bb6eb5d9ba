"""validate's accounting check (validate/accounting.py) on real captured Slurm output
(tests/slurm/fixtures/accounting, SOURCES.md): slurmdbd up, stopped with a job's records held by
slurmctld, and back. The live run is in test_accounting_testbed.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from gpuforge.common.results import Level
from gpuforge.validate import accounting
from gpuforge.validate.slurm import SlurmClient

FIX = Path(__file__).parent / "fixtures" / "accounting"


def _captured(name: str) -> tuple[int, str, str, float]:
    rc_line, _, err = (FIX / f"{name}.stderr").read_text().partition("\n")
    return int(rc_line.removeprefix("rc=")), (FIX / f"{name}.txt").read_text(), err, 0.1


def _replay(step: str) -> Callable[[Sequence[str], SlurmClient, float], tuple[int | None, str, str, float]]:
    def run(argv: Sequence[str], _settings: SlurmClient, _deadline: float) -> tuple[int | None, str, str, float]:
        name = {"scontrol": "config", "sacctmgr": f"{step}-sacctmgr", "sdiag": f"{step}-sdiag"}[argv[0]]
        return _captured(name)

    return run


def test_slurmdbd_up_passes_with_an_empty_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounting, "_run", _replay("up"))
    [r] = accounting.accounting_results()
    assert (r.level, r.targets, r.observed) == (Level.PASS, ("cluster gfbed",), 0)
    assert r.message.startswith("slurmdbd at 10.244.76.254:24141 answers and records cluster gfbed")


def test_slurmdbd_stopped_is_a_cluster_finding_with_the_held_records(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounting, "_run", _replay("down"))
    [r] = accounting.accounting_results()
    assert (r.level, r.targets, r.observed) == (Level.ERROR, ("cluster gfbed",), 3)
    assert r.message.startswith("accounting store unreachable: slurmdbd at 10.244.76.254:24141 does not answer "
                                "(sacctmgr: error: Sending PersistInit msg: Connection refused); slurmctld holds 3")  # fmt: skip
    assert "no node is drained" in r.message


def test_back_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accounting, "_run", _replay("back"))
    [r] = accounting.accounting_results()
    assert (r.level, r.observed) == (Level.PASS, 0)


def test_what_slurm_does_not_say_is_said_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """sdiag without an answer: the queue is unknown, not 0; scontrol without one: the check is unknown."""
    def no_sdiag(argv: Sequence[str], s: SlurmClient, d: float) -> tuple[int | None, str, str, float]:
        return (None, "", "", 30.0) if argv[0] == "sdiag" else _replay("down")(argv, s, d)

    monkeypatch.setattr(accounting, "_run", no_sdiag)
    [r] = accounting.accounting_results()
    assert r.level is Level.ERROR and r.observed is None and "holds unknown (sdiag did not answer)" in r.message
    monkeypatch.setattr(accounting, "_run", lambda argv, s, d: (None, "", "", 30.0))  # scontrol past its deadline
    [r] = accounting.accounting_results()
    assert r.level is Level.UNKNOWN and r.message == "cannot read Slurm's configuration (scontrol show config timed out)"


def test_no_accounting_configured_is_no_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same capture with the type the renderer writes without accounting (accounting_storage/none)."""
    text = (FIX / "config.txt").read_text().replace("accounting_storage/slurmdbd", "accounting_storage/none")
    monkeypatch.setattr(accounting, "_run", lambda argv, s, d: (0, text, "", 0.1))
    assert accounting.accounting_results() == []
