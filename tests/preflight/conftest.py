"""Preflight tests run against the shared moto server fixtures.

The fixtures are imported, not listed in `pytest_plugins`: pytest only accepts
`pytest_plugins` in the rootdir conftest, and this one is not at the root.
"""

from tests.support.moto_server import aws_env, moto_auth, moto_server

__all__ = ["aws_env", "moto_auth", "moto_server"]
