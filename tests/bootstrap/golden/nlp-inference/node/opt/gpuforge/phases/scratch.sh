#!/bin/bash
# Rendered from bootstrap/templates/phases/scratch.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
mnt=/scratch
mapfile -t disks < <(for l in "$R"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_*; do
  [ -e "$l" ] && [[ $l != *-part* ]] && readlink -f "$l"; done | sort -u)
[ "${#disks[@]}" -eq 1 ] || die "expected 1 instance-store NVMe disks, found ${#disks[@]}: ${disks[*]:-none}"
mountpoint -q "$R$mnt" && { log "$mnt already mounted"; exit 0; }
dev="${disks[0]}"
blkid -p "$dev" >/dev/null 2>&1 || { mkfs.ext4 -q -F -L gpuforge-scratch -E nodiscard "$dev"; changed "formatted $dev"; }
uuid=$(blkid -s UUID -o value "$dev")
mkdir -p "$R$mnt"
line="UUID=$uuid $mnt ext4 defaults,nofail,noatime,x-systemd.device-timeout=10s 0 2"
grep -q "^UUID=$uuid " "$R/etc/fstab" || {
  grep -v "[[:space:]]${mnt}[[:space:]]" "$R/etc/fstab" >"$R/etc/fstab.gpuforge-tmp" || true
  printf '%s\n' "$line" >>"$R/etc/fstab.gpuforge-tmp" && mv "$R/etc/fstab.gpuforge-tmp" "$R/etc/fstab"
  changed "fstab: $mnt"; }
mount "$mnt"
changed "mounted $mnt"
chmod 1777 "$R$mnt"
