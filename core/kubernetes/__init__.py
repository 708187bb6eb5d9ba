"""Kubernetes settings of a stack (no pulumi_kubernetes): defaults, GPU sharing and team quotas."""
