"""The Slurm head node's fixed size, shared by the component and the cost plan (no Pulumi here)."""

HEAD_ROOT_GIB = 50  # OS, Slurm, the controller's state save and logs
