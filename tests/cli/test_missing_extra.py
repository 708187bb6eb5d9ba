"""A command that reaches a module only an extra installs says which extra, in one `error:` line
with the pip command, exit 2 (issue 18). tests/packaging/test_wheel.py runs the same in a real
base-only venv; here the missing module is simulated in this process."""

from __future__ import annotations

import builtins
import sys
from typing import Any

import pytest

from gpuforge.cli import main


def _without(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """Make `import <missing>` (and its submodules) fail as in a venv without it."""
    real = builtins.__import__
    for name in [m for m in sys.modules if m == missing or m.startswith(missing + ".")]:
        monkeypatch.delitem(sys.modules, name)

    def fake(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == missing or name.startswith(missing + "."):
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ex:
        main(list(args))
    code = ex.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_a_deploy_command_without_the_extra_names_pip_install_deploy(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    for mod in [m for m in sys.modules if m.startswith("gpuforge.commands.stack")]:
        monkeypatch.delitem(sys.modules, mod)
    _without(monkeypatch, "jinja2")
    code, err = _run(capsys, "stack", "list")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: gpuforge stack needs the deploy extra (jinja2 is not installed): pip install 'gpuforge[deploy]'"
    ]


def test_a_module_missing_at_run_time_names_its_own_extra(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """doctor imports boto3 only when it checks AWS: the aws extra is the one to install."""
    _without(monkeypatch, "boto3")
    code, err = _run(capsys, "doctor")
    assert code == 2
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: gpuforge doctor needs the aws extra (boto3 is not installed): pip install 'gpuforge[aws]'"
    ]


def test_a_missing_module_that_no_extra_installs_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gpuforge module that is missing is a packaging bug: it stays a ModuleNotFoundError."""
    for mod in [m for m in sys.modules if m.startswith("gpuforge.commands.cost")]:
        monkeypatch.delitem(sys.modules, mod)
    _without(monkeypatch, "gpuforge.core.costplan")
    with pytest.raises(ModuleNotFoundError):
        main(["cost", "--help"])
