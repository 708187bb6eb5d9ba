#!/bin/bash
# Rendered from bootstrap/templates/phases/scratch.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
mnt=/scratch
mapfile -t disks < <(for l in "$R"/dev/disk/by-id/nvme-Amazon_EC2_NVMe_Instance_Storage_*; do
  [ -e "$l" ] && [[ $l != *-part* ]] && readlink -f "$l"; done | sort -u)
[ "${#disks[@]}" -eq 2 ] || die "expected 2 instance-store NVMe disks, found ${#disks[@]}: ${disks[*]:-none}"
mountpoint -q "$R$mnt" && { log "$mnt already mounted"; exit 0; }
dev="$R/dev/md/gpuforge-scratch"
if ! mdadm --detail "$dev" >/dev/null 2>&1; then
  mdadm --assemble --scan >/dev/null 2>&1 || true
  mdadm --detail "$dev" >/dev/null 2>&1 || {
    mdadm --create "$dev" --level=0 --raid-devices=2 --run "${disks[@]}"; changed "created RAID0 of 2 disks"; }
fi
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
