"""The validate stage: proves a running cluster over SSH. Never imports Pulumi (DESIGN.md)."""
