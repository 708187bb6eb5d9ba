"""Pulumi components and the data they read (catalog, profiles, config schema)."""
