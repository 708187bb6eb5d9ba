"""The Slurm head node's size, shared by the component and the cost plan (no Pulumi here).

The head runs slurmctld, and slurmdbd for accounting; with the embedded database (the default) it
also runs MariaDB, whose buffer pool slurmdbd wants at 1 GiB or more (90-gpuforge.cnf), so the
head doubles to the next size and its root volume grows by the database's share.
"""

HEAD_ROOT_GIB = 50  # OS, Slurm, the controller's state save and logs
HEAD_DB_GIB = 50  # MariaDB's datadir (/var/lib/mysql) on the same encrypted root volume
HEAD_DB_INSTANCE_TYPE = "m6i.xlarge"  # 4 vCPU, 16 GiB: slurmctld, slurmdbd and MariaDB (1 GiB buffer pool)


def head_root_gib(embedded_db: bool) -> int:
    return HEAD_ROOT_GIB + (HEAD_DB_GIB if embedded_db else 0)
