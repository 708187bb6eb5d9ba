"""The inventory: every accepted shape, and bad input as `error:` naming file and key (exit 2)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpuforge.common.errors import InputError
from gpuforge.validate.inventory import load_inventory, parse_inventory

INV = {
    "profile": "nlp-inference",
    "expect": {"link_gbps": 25, "gpus_per_node": 1},
    "ssh": {"user": "ubuntu", "key_file": "~/.ssh/id_ed25519", "jump_host": "admin@bastion:2222"},
    "nodes": [
        {"name": "node1", "host": "203.0.113.10", "instance_type": "g4dn.8xlarge", "private_ip": "10.0.1.10"},
        {"name": "node2", "host": "203.0.113.11", "az_id": "use1-az4"},
    ],
}


def test_plain_yaml_and_pulumi_shapes_agree(tmp_path: Path) -> None:
    plain = parse_inventory(json.dumps(INV), "x")
    assert plain.nodes[0].data_address == "10.0.1.10" and plain.nodes[1].data_address == "203.0.113.11"
    assert plain.nodes[1].extras() == {"az_id": "use1-az4"}
    assert plain.ssh.jump_host is not None and (plain.ssh.jump_host.user, plain.ssh.jump_host.port) == ("admin", 2222)
    assert plain.expect is not None and plain.expect.stated() == {"link_gbps": 25, "gpus_per_node": 1}
    all_outputs = parse_inventory(json.dumps({"inventory": INV, "vpcId": "vpc-1"}), "x")  # `pulumi stack output --json`
    serialized = parse_inventory(json.dumps(json.dumps(INV)), "x")  # an export of json.dumps(...)
    assert all_outputs == plain == serialized
    f = tmp_path / "inv.yaml"
    f.write_text("nodes:\n  - {name: a, host: 10.0.0.1}\n")
    inv = load_inventory(str(f))
    assert inv.ssh.user == "root" and inv.ssh.port == 22 and inv.profile is None


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"nodes": []}, "nodes"),
        ({"nodes": [{"name": "a"}]}, "nodes.0.host"),
        ({"nodes": [{"name": "a", "host": "h"}, {"name": "a", "host": "i"}]}, "appears twice"),
        ({"nodes": [{"name": "a", "host": "h"}], "ssh": {"usr": "x"}}, "ssh.usr"),
        ({"nodes": [{"name": "a", "host": "h"}], "ssh": {"port": 0}}, "ssh.port"),
        ({"nodes": [{"name": "a", "host": "h"}], "expect": {"link_gbps": -1}}, "expect.link_gbps"),
        ([1, 2], "must be a mapping"),
    ],
)
def test_bad_inventory_names_the_key(doc: object, needle: str) -> None:
    with pytest.raises(InputError) as err:
        parse_inventory(json.dumps(doc), "inv.json")
    assert "inv.json" in err.value.render() and needle in err.value.render()


def test_cli_bad_input_is_exit_2_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuforge.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [ {name: a\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"nodes": [{"name": "a"}]})))
    for args, needle in (
        (["validate", "--inventory", str(tmp_path / "nope.yaml")], "no such file"),
        (["validate", "--inventory", str(bad)], "not valid YAML/JSON at line"),
        (["validate", "--inventory", "-"], "error: <stdin>: nodes.0.host: Field required"),
    ):
        with pytest.raises(SystemExit) as ex:
            main(args)
        err = capsys.readouterr().err
        assert ex.value.code == 2 and needle in err and "Traceback" not in err


def test_cli_missing_key_file_and_known_hosts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"ssh": {"key_file": str(tmp_path / "k")}, "nodes": [{"name": "a", "host": "h"}]}))
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--checks", "system", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.startswith("error: ssh.key_file:") and "Traceback" not in err
    key = tmp_path / "k"
    key.write_text("not a key")
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--checks", "system", "--out", str(tmp_path / "o")])
    assert ex.value.code == 2 and "ssh.key_file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--checks", "nosuch"])
    assert ex.value.code == 2 and "--checks: unknown check 'nosuch'" in capsys.readouterr().err


@pytest.mark.parametrize("transport", ["ssh", "local"])
def test_the_accounting_check_named_without_slurm_is_refused_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: str
) -> None:
    """`--checks slurm.accounting` asks the controller: over ssh or local it would run nothing and say nothing."""
    from gpuforge.cli import main

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"nodes": [{"name": "a", "host": "localhost"}]}))
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--inventory", str(inv), "--transport", transport, "--checks", "slurm.accounting", "--out", str(out)])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.startswith("error: --checks slurm.accounting: runs only with --transport slurm")
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err and not out.exists()
