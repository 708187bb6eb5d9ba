"""The Slurm head node's size, shared by the component and the cost plan (no Pulumi here).

The head runs slurmctld, and slurmdbd for accounting; with the embedded database (the default) it
also runs MariaDB, whose buffer pool slurmdbd wants at 1 GiB or more (90-gpuforge.cnf), so the
head doubles to the next size. MariaDB's datadir is on an EBS volume of its own, kept when the head
is replaced or the stack destroyed (components/slurmhead.py), not on the head's root volume, which
EC2 deletes with the instance.
"""

from typing import Final

HEAD_ROOT_GIB = 50  # OS, Slurm, the controller's state save and logs
HEAD_DB_INSTANCE_TYPE = "m6i.xlarge"  # 4 vCPU, 16 GiB: slurmctld, slurmdbd and MariaDB (1 GiB buffer pool)
HEAD_DB_VOLUME_TYPE: Final = "gp3"  # baseline 3,000 IOPS and 125 MB/s are included in the GB-month price
HEAD_DB_VOLUME_GIB = 50  # MariaDB's datadir (/var/lib/mysql): slurmdbd's job and step records
