"""The Kubernetes GPU layer: EKS or an existing cluster, the NVIDIA device plugin, team quotas
and the inference service.

This package's root and `settings`/`sharing`/`quotas` import no Pulumi, so `validate` and the
config schema may read them; the Pulumi components live in `component`, `eks` and the object
builders.
"""
