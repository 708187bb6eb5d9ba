"""Test support shared by several test directories (fixtures loaded as pytest plugins)."""
