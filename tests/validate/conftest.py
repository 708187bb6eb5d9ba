"""The moto server fixtures for `--discover` (tests/support/moto_server.py); imported, not
`pytest_plugins`, because this conftest is not the rootdir one."""

from __future__ import annotations

from tests.support.moto_server import aws_env, moto_auth, moto_server

__all__ = ["aws_env", "moto_auth", "moto_server"]
