"""Catalog tests use the shared moto server fixtures (tests/support/moto_server.py) for refresh."""

from tests.support.moto_server import aws_env, moto_server

__all__ = ["aws_env", "moto_server"]
