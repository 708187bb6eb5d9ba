#!/usr/bin/env bash
# One device run on a lent GPU machine (session 5): Slurm on a real GPU, with the product's
# cgroup.conf (CgroupPlugin=cgroup/v2, ConstrainDevices=yes) and gres, and the node-installed
# gpuforge's `validate --transport slurm` through srun. What it answers: does a job see the GPU
# when it asks for the gres, and not otherwise, under cgroup v2; and does validate through Slurm
# see the GPU (the finding of session 3: "validate through Slurm sees no GPUs").
#
# Substitutions (this machine is not a gpuforge node; said again in the log):
#  - Debian 12's Slurm 22.05.8 and munge 0.5.15 (carried .debs, unpacked with dpkg -x; libraries this
#    machine lacks from a carried folder), not Ubuntu 24.04's slurm-wlm 23.11.4: no archive here;
#  - gres.conf without `AutoDetect=nvml`: Debian's build has no gpu_nvml plugin;
#  - slurmctld and slurmd on this one machine, SlurmUser=root, no slurmdbd (accounting off), no
#    HealthCheckProgram, no topology.conf; node and partition lines from `slurmd -C`;
#  - when PID 1 is not systemd, the daemons start by hand and cgroup.conf gains IgnoreSystemd=yes.
# Usage (repository root on the device machine): bash scripts/device/slurm_gpu_run.sh BW_DIR WHEELS_DIR
set -uo pipefail
bw=$(cd "${1:?folder with the carried .debs and lib/}" && pwd)
wh=$(cd "${2:?folder with the py312 wheel set}" && pwd)
out=${OUT:?}
root=$(pwd)
golden=$root/tests/slurm/golden/cv-training-24.04/etc/slurm
log=$out/slurm-gpu.log
exec > >(tee -a "$log") 2>&1
step() { echo; echo "== $*"; }
step "machine"
date -u; uname -r; grep PRETTY /etc/os-release; echo "pid 1: $(ps -o comm= -p 1)"; nproc; free -g | sed -n 2p
echo "cgroup fs: $(stat -fc %T /sys/fs/cgroup)"; grep -E ' /sys/fs/cgroup( |/)' /proc/self/mountinfo | head -3
echo "controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"; echo "subtree: $(cat /sys/fs/cgroup/cgroup.subtree_control 2>&1)"
echo "self: $(cat /proc/self/cgroup)"; stat -c '%n %F %t:%T' /dev/nvidia* 2>&1 | head; nvidia-smi -L
step "unpack Slurm 22.05.8 + munge (Debian 12)"
stage=$(mktemp -d)
for d in "$bw"/*.deb; do dpkg -x "$d" "$stage" && echo "unpacked $(basename "$d")"; done
# into / through this machine's merged-/usr links (/lib -> usr/lib), never over them
tar -C "$stage" -cf - . | tar -C / -xf - --keep-directory-symlink --no-same-owner
for b in slurmd slurmstepd slurmctld; do ln -sfn "$b-wlm" "/usr/sbin/$b"; done  # what the postinst's update-alternatives does
mkdir -p /opt/bwlib
for f in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/slurmstepd /usr/bin/srun /usr/bin/sinfo /usr/bin/scontrol \
  /usr/sbin/munged /usr/lib/x86_64-linux-gnu/slurm-wlm/*.so; do
  ldd "$f" 2>/dev/null | awk '/not found/ {print $1}'
done | sort -u | while read -r lib; do
  if [ -e "$bw/lib/$lib" ]; then cp -L "$bw/lib/$lib" /opt/bwlib/ && echo "library from Debian 12: $lib"; else echo "missing: $lib"; fi
done
export LD_LIBRARY_PATH=/opt/bwlib  # only what this machine lacks; nothing of its own is shadowed
/usr/sbin/slurmd -V
step "munge"
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge && chmod 700 /etc/munge /var/lib/munge
dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none && chmod 400 /etc/munge/munge.key
/usr/sbin/munged --force && sleep 1 && echo "munged up: $(pgrep -x munged)"
step "configuration"
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurmctld
conf=$(/usr/sbin/slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+/NodeName=lent-h200/; s/ UpTime=.*//')
grep -v -E '^(SlurmctldHost|SlurmUser|Accounting|HealthCheck|TopologyPlugin|NodeName|PartitionName|JobAcct)' \
  "$golden/slurm.conf" >/etc/slurm/slurm.conf
cat >>/etc/slurm/slurm.conf <<EOF
# device run: the cv-training render with this machine as head and node (scripts/device/slurm_gpu_run.sh)
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AccountingStorageType=accounting_storage/none
$conf NodeAddr=127.0.0.1 Gres=gpu:h200:1 State=UNKNOWN
PartitionName=train Nodes=lent-h200 Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
EOF
cp "$golden/cgroup.conf" /etc/slurm/cgroup.conf
pid1=$(ps -o comm= -p 1)
[ "$pid1" = systemd ] || printf '# device run: PID 1 is %s, not systemd\nIgnoreSystemd=yes\n' "$pid1" >>/etc/slurm/cgroup.conf
printf '%s\n' "# device run: the render's line for one H200 (no gpu_nvml in Debian's build, so no AutoDetect=nvml)" \
  "NodeName=lent-h200 Name=gpu Type=h200 File=/dev/nvidia0" >/etc/slurm/gres.conf
if [ -n "${DRY_RUN:-}" ]; then  # a rehearsal of this script on a cgroup v1 build machine with no GPU
  echo "DRY RUN: no cgroup plugins (this host mounts cgroup v1); nothing here is a result"
  sed -i 's|^ProctrackType=.*|ProctrackType=proctrack/linuxproc|; s|^TaskPlugin=.*|TaskPlugin=task/affinity|' /etc/slurm/slurm.conf
  : >/etc/slurm/cgroup.conf
  [ -e /dev/nvidia0 ] || { mknod /run/dry-nvidia0 c 195 0; sed -i 's|/dev/nvidia0|/run/dry-nvidia0|' /etc/slurm/gres.conf; }
fi
grep -v '^#' /etc/slurm/slurm.conf | grep -v '^$'; cat /etc/slurm/cgroup.conf /etc/slurm/gres.conf
step "daemons"
if [ "$pid1" = systemd ]; then
  mkdir -p /etc/systemd/system/slurmd.service.d
  cp "$bw/slurmd-dropin.conf" /etc/systemd/system/slurmd.service.d/gpuforge.conf  # the render's drop-in
  echo 'SLURMD_OPTIONS="-N lent-h200"' >/etc/default/slurmd  # device run: this machine's hostname is not the node name
  printf '[Service]\nEnvironment=LD_LIBRARY_PATH=/opt/bwlib\n' >/etc/systemd/system/slurmd.service.d/zz-device.conf
  mkdir -p /etc/systemd/system/slurmctld.service.d
  printf '[Service]\nEnvironment=LD_LIBRARY_PATH=/opt/bwlib\n' >/etc/systemd/system/slurmctld.service.d/zz-device.conf
  systemctl daemon-reload; systemctl start slurmctld; sleep 2; systemctl start slurmd; sleep 3
  systemctl --no-pager status slurmctld slurmd | head -30
else
  /usr/sbin/slurmctld; sleep 2
  # the layout systemd would give the unit (system.slice/slurmd.service, Delegate=yes): slurmd's
  # cgroup/v2 makes its slurmstepd scope beside it in system.slice (first try: "Could not create
  # scope directory /sys/fs/cgroup/system.slice/lent-h200_slurmstepd.scope")
  cg=/sys/fs/cgroup/system.slice
  mkdir -p "$cg/slurmd.service" && echo "+cpuset +cpu +io +memory +pids" >"$cg/cgroup.subtree_control"
  ( echo "$BASHPID" >"$cg/slurmd.service/cgroup.procs" && exec /usr/sbin/slurmd -N lent-h200 ); sleep 3
fi
end=$((SECONDS + 30))
while [ $SECONDS -lt $end ]; do
  st=$(timeout 5 sinfo -h -N -n lent-h200 -o '%T' 2>/dev/null); [ "$st" = idle ] && break; sleep 1
done
timeout 5 sinfo -N -o '%N %T %G %E'; timeout 5 scontrol show node lent-h200 | grep -E 'Gres|CfgTRES|State|Reason'
step "a job that asks for the GPU"
# shellcheck disable=SC2016  # expanded by the job's shell, not this one
timeout 30 srun -w lent-h200 --gres=gpu:h200:1 bash -c 'echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; cat /proc/self/cgroup; nvidia-smi -L'
echo "rc=$?"
step "a job that does not (ConstrainDevices must hide the GPU)"
# shellcheck disable=SC2016
timeout 30 srun -w lent-h200 bash -c 'cat /proc/self/cgroup; nvidia-smi -L; echo nvidia-smi rc=$?; head -c 1 /dev/nvidia0 >/dev/null; echo open rc=$?'
echo "rc=$?"
step "node install of gpuforge, then validate --transport slurm"
V=/opt/gpuforge/venv
if [ -n "${DRY_RUN:-}" ]; then V=$root/.venv; echo "DRY RUN: the build machine's venv (its Python is not the py312 target)"
else
  python3 -m venv "$V" && "$V/bin/python" -m pip --isolated --disable-pip-version-check --no-cache-dir install -q \
    --require-hashes --only-binary :all: --no-index --find-links "$wh" -r "$wh/node-x86_64-py312.txt" -r "$wh/gpuforge.txt"
  echo "pip rc=$?"
fi
work=$(mktemp -d)
cat >"$work/inventory.yaml" <<'YAML'
expect:
  gpus_per_node: 1
  interconnect: none
nodes:
  - name: lent-h200
    host: 127.0.0.1
YAML
# No instance_type: the transport would ask srun for the catalog's gres (p5en: gpu:h200:8) and this
# one-GPU machine cannot give it ("Requested node configuration is not available", seen in the dry
# run); without it the transport asks sinfo for the node's configured gres.
( cd "$work" && timeout -k 5 120 "$V/bin/gpuforge" validate --inventory inventory.yaml --transport slurm \
    --checks gpu.inventory,gpu.health,gpu.topology,system.identity --format json --out "$work/run" \
    >"$out/validate-slurm.json" 2>"$work/validate.stderr" )
echo "validate rc=$?"; tail -n 15 "$work/validate.stderr"
[ -s "$out/validate-slurm.json" ] && "$V/bin/python" - "$out/validate-slurm.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])).get("results", []):
    print(f"{r['level']:7} {r['check']:24} {','.join(r.get('targets') or [])} {r.get('message', '')[:110]}")
PY
step "logs"
mkdir -p "$work/logs" && cp /var/log/slurm/*.log "$work/logs/" 2>/dev/null
tar -C "$work" -czf "$out/slurm-logs.tar.gz" logs run 2>/dev/null
tail -n 25 /var/log/slurm/slurmd-lent-h200.log 2>/dev/null || tail -n 25 /var/log/slurm/slurmd*.log
