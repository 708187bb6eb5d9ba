"""GPU-side node checks: inventory and identity, health (ECC, row remap, throttle), Xid scan,
topology and NVLink, bootstrap status, EFA provider. Each is a NodeCheck (validate/checks.py)."""
