from tests.policy.conftest import record  # noqa: F401  (the same recorded-graph fixture)
