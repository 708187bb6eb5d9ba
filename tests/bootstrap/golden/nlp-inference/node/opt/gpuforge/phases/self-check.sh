#!/bin/bash
# Rendered from bootstrap/templates/phases/self-check.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
miss=()
out=$(nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader) || die "nvidia-smi fails"
n=$(grep -c . <<<"$out")
[ "$n" -eq 1 ] || miss+=("$n GPUs visible, expected 1")
names=$(cut -d, -f1 <<<"$out" | sed 's/^ *//; s/ *$//' | sort -u | paste -sd/ -)
[ "$names" = 'Tesla T4' ] || miss+=("GPU model '$names', expected 'Tesla T4'")
drv=$(cut -d, -f2 <<<"$out" | tr -d ' ' | sort -u | paste -sd/ -)
[ "$drv" = 550.90.07 ] || miss+=("driver $drv, expected 550.90.07")
if grep -qv Enabled <<<"$(cut -d, -f3 <<<"$out")"; then miss+=("persistence mode is off on some GPU"); fi
grep -q 'Runtimes:.*nvidia' <<<"$(docker info 2>/dev/null)" || miss+=("docker has no nvidia runtime")
systemctl is-active amazon-cloudwatch-agent >/dev/null 2>&1 || miss+=("CloudWatch agent is not running: the idle-GPU alarm gets no data")
mountpoint -q "$R"/scratch || miss+=("/scratch is not mounted")
if [ "${#miss[@]}" -gt 0 ]; then
  old=$IFS; IFS=';'; msg="self-check: ${miss[*]}"; IFS=$old
  die "$msg"
fi
log "self-check passed: $n x $names, driver $drv"
