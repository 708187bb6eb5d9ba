#!/bin/bash
# Rendered from bootstrap/templates/phases/self-check.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
miss=()
out=$(nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader) || die "nvidia-smi fails"
n=$(grep -c . <<<"$out")
[ "$n" -eq 8 ] || miss+=("$n GPUs visible, expected 8")
names=$(cut -d, -f1 <<<"$out" | sed 's/^ *//; s/ *$//' | sort -u | paste -sd/ -)
[ "$names" = 'Tesla V100-SXM2-32GB' ] || miss+=("GPU model '$names', expected 'Tesla V100-SXM2-32GB'")
drv=$(cut -d, -f2 <<<"$out" | tr -d ' ' | sort -u | paste -sd/ -)
[ "$drv" = 550.90.07 ] || miss+=("driver $drv, expected 550.90.07")
if grep -qv Enabled <<<"$(cut -d, -f3 <<<"$out")"; then miss+=("persistence mode is off on some GPU"); fi
nefa=$("$R/usr/local/bin/fi_info" -p efa -t FI_EP_RDM 2>/dev/null |
  awk '$1 == "provider:" { efa = ($2 == "efa") } efa && $1 == "domain:" { print $2 }' | sort -u | grep -c . || true)
[ "$nefa" -eq 1 ] || miss+=("$nefa EFA devices with the efa provider, expected 1")
[ -e "$R/opt/aws-ofi-nccl/lib/libnccl-net.so" ] || miss+=("aws-ofi-nccl plugin missing")
ptrace=$(sysctl -n kernel.yama.ptrace_scope 2>/dev/null || echo none)
[ "$ptrace" = 0 ] || [ "$ptrace" = none ] || miss+=("kernel.yama.ptrace_scope is $ptrace, not 0 (Open MPI intra-node)")
observe efa_devices "$nefa"
grep -q 'Runtimes:.*nvidia' <<<"$(docker info 2>/dev/null)" || miss+=("docker has no nvidia runtime")
systemctl is-active amazon-cloudwatch-agent >/dev/null 2>&1 || miss+=("CloudWatch agent is not running: the idle-GPU alarm gets no data")
mountpoint -q "$R"/scratch || miss+=("/scratch is not mounted")
mountpoint -q "$R"/data || miss+=("/data is not mounted")
if [ "${#miss[@]}" -gt 0 ]; then
  old=$IFS; IFS=';'; msg="self-check: ${miss[*]}"; IFS=$old
  die "$msg"
fi
log "self-check passed: $n x $names, driver $drv"
