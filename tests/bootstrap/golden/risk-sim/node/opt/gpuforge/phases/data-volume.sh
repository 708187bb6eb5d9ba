#!/bin/bash
# Rendered from bootstrap/templates/phases/data-volume.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
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
    [ -n "$root" ] && [[ $root == "$d"* ]] && continue
    cands+=("$d")
  done
  mapfile -t cands < <(printf '%s\n' "${cands[@]}" | sed '/^$/d' | sort -u)
  [ "${#cands[@]}" -gt 1 ] && die "several non-root EBS volumes (${cands[*]}); pass data_volume_id to pick one"
  [ "${#cands[@]}" -eq 1 ] && { dev="${cands[0]}"; break; }
  log "waiting for the data volume to attach ($i/60)"; sleep "${GPUFORGE_POLL_S:-5}"
done
[ -n "$dev" ] || die "no EBS data volume attached after 60 tries"
blkid -p "$dev" >/dev/null 2>&1 || { mkfs.ext4 -q -L gpuforge-data "$dev"; changed "formatted $dev"; }
uuid=$(blkid -s UUID -o value "$dev")
mkdir -p "$R$mnt"
grep -q "^UUID=$uuid " "$R/etc/fstab" || {
  printf 'UUID=%s %s ext4 defaults,nofail,x-systemd.device-timeout=30s 0 2\n' "$uuid" "$mnt" >>"$R/etc/fstab"
  changed "fstab: $mnt"; }
mountpoint -q "$R$mnt" || { mount "$mnt"; changed "mounted $mnt"; }
observe data_volume "$dev $uuid"
