"""The fixtures' own tests use them the way other test directories do (see moto_server.py)."""

from tests.support.moto_server import aws_env, moto_auth, moto_server

__all__ = ["aws_env", "moto_auth", "moto_server"]
