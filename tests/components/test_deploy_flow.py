"""The README's deploy flow, offline, end to end, for every committed stack:

    gpuforge preview --stack S        (the CLI's config rules, then the real program, mock engine)
    pulumi stack output --json inventory > inventory.json
    gpuforge validate --inventory inventory.json        (and `... | gpuforge validate --inventory -`)

The inventory is the real program's export (components/cluster.py) as the preview recorded it,
written as `pulumi stack output --json` prints a value (indented JSON). validate runs through its
real command line up to the point where it would open SSH connections: the transport factory is
replaced by one that records what it was handed and stops, so nothing leaves this machine.
What stays unverified offline: real ids and addresses, and SSH itself (tests/validate covers
the transport against real sshd hosts).
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuforge.cli import main
from gpuforge.validate.inventory import Inventory

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


class _Reached(Exception):
    """validate got past loading the inventory and asked for a transport."""


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def exported() -> dict[str, Any]:
    """`gpuforge preview --format json` of every stack, through the command line, once."""
    from click.testing import CliRunner

    from gpuforge.cli import cli

    runner = CliRunner()
    out: dict[str, Any] = {}
    for stack in STACKS:
        result = runner.invoke(cli, ["preview", "--stack", stack, "--format", "json", "--no-policies",
                                     "--project-dir", str(ROOT)])
        assert result.exit_code == 0, (stack, result.output)
        out[stack] = json.loads(result.stdout)["outputs"]["inventory"]
    return out


@pytest.mark.parametrize("stack", STACKS)
@pytest.mark.parametrize("form", ["file", "stdin"])
def test_exported_inventory_gets_past_validate_loading(stack, form, exported, tmp_path, capsys, monkeypatch):
    inventory = exported[stack]
    text = json.dumps(inventory, indent=2)  # what `pulumi stack output --json inventory` prints
    key = tmp_path / "id_ed25519"
    key.write_text("not used: validate stops before connecting\n")
    seen: list[Any] = []

    def stop(*args: Any, **kwargs: Any) -> Any:
        # whatever else the transport factory takes, it is handed the loaded Inventory
        seen.extend(a for a in (*args, *kwargs.values()) if isinstance(a, Inventory))
        raise _Reached

    monkeypatch.setattr("gpuforge.commands.validate._transport", stop)
    if form == "file":
        path = tmp_path / "inventory.json"
        path.write_text(text)
        source = str(path)
    else:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))
        source = "-"
    args = ["validate", "--inventory", source, "--ssh-key", str(key)]

    if not inventory["nodes"]:
        # EKS / Auto Scaling stacks: instances are launched after deploy; the README sends these to --discover.
        code, _, err = _cli(args, capsys)
        assert code == 2 and err.startswith("error:"), err
        assert f"gpuforge validate --discover {stack}" in err and "lists no nodes" in err
        return
    with pytest.raises(_Reached):
        main(args)
    (inv,) = seen
    assert inv.stack == stack and inv.profile == inventory["profile"]
    assert [(n.name, n.host, n.private_ip) for n in inv.nodes] == [
        (n["name"], n["host"], n["private_ip"]) for n in inventory["nodes"]
    ]
    assert inv.ssh.key_file == str(key) and inv.ssh.user == inventory["ssh"]["user"]


def test_every_inventory_key_the_program_exports_is_accepted(exported):
    """Not just today's stacks: each top-level key of the real export is a field validate knows."""
    from gpuforge.validate.inventory import Inventory

    keys = {k for inv in exported.values() for k in inv}
    assert keys <= set(Inventory.model_fields), keys - set(Inventory.model_fields)
