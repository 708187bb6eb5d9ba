#!/bin/bash
# Rendered from bootstrap/templates/phases/data-volume.sh.j2 -- edit the template, not this output.
# Phase data-volume: st1 EBS data volume -> /data (format only if blank)
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
# The EBS data volume (st1, 4096 GiB) is attached after launch. EBS volumes
# carry their volume id as the NVMe serial, visible as /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol<id>.
mnt=/data
want=''
root=$(readlink -f "$(findmnt -no SOURCE /)" 2>/dev/null || true)
dev=""
for i in $(seq 1 60); do
  cands=()
  for l in "$R"/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol*; do
    { [ -e "$l" ] && [[ $l != *-part* ]]; } || continue
    [ -n "$want" ] && [ "${l##*_}" != "$want" ] && continue
    d=$(readlink -f "$l")
    # The root volume is EBS too: skip the disk that holds /.
    [ -n "$root" ] && [[ $root == "$d"* ]] && continue
    cands+=("$d")
  done
  mapfile -t cands < <(printf '%s\n' "${cands[@]}" | sed '/^$/d' | sort -u)
  [ "${#cands[@]}" -gt 1 ] && die "several non-root EBS volumes (${cands[*]}); pass data_volume_id to pick one"
  [ "${#cands[@]}" -eq 1 ] && { dev="${cands[0]}"; break; }
  log "waiting for the data volume to attach ($i/60)"; sleep "${GPUFORGE_POLL_S:-5}"
done
[ -n "$dev" ] || die "no EBS data volume attached after 60 tries"
# Format only a blank volume: anything with a signature (an earlier filesystem) is kept.
blkid -p "$dev" >/dev/null 2>&1 || { mkfs.ext4 -q -L gpuforge-data "$dev"; changed "formatted $dev"; }
uuid=$(blkid -s UUID -o value "$dev")
mkdir -p "$R$mnt"
grep -q "^UUID=$uuid " "$R/etc/fstab" || {
  printf 'UUID=%s %s ext4 defaults,nofail,x-systemd.device-timeout=30s 0 2\n' "$uuid" "$mnt" >>"$R/etc/fstab"
  changed "fstab: $mnt"; }
mountpoint -q "$R$mnt" || { mount "$mnt"; changed "mounted $mnt"; }
observe data_volume "$dev $uuid"
