#!/bin/bash
# Rendered from bootstrap/templates/phases/base.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
put "$R/etc/apt/apt.conf.d/90gpuforge-dpkg-lock" "DPkg::Lock::Timeout \"$LOCK_WAIT_S\";"
apt_install ca-certificates curl gnupg chrony mdadm nvme-cli pciutils build-essential python3

put "$R/etc/chrony/sources.d/gpuforge-aws.sources" "server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4"
systemctl is-enabled chrony >/dev/null 2>&1 || { systemctl enable chrony; changed "enabled chrony"; }
systemctl is-active chrony >/dev/null 2>&1 || { systemctl start chrony; changed "started chrony"; }

name=nlp-inference-node01
[[ $name =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ ]] || die "node name '$name' is not a valid hostname"
if [ "$(cat "$R/etc/hostname" 2>/dev/null)" != "$name" ]; then
  hostnamectl set-hostname "$name"
  put "$R/etc/hostname" "$name"
fi
grep -qE "^127\.0\.1\.1[[:space:]]+$name\$" "$R/etc/hosts" 2>/dev/null || grep -q '^# gpuforge slurm hosts (begin)' "$R/etc/hosts" 2>/dev/null || {
  printf '127.0.1.1 %s\n' "$name" >>"$R/etc/hosts"; changed "added $name to /etc/hosts"; }
observe hostname "$name"

systemctl is-enabled gpuforge-bootstrap.service >/dev/null 2>&1 || {
  systemctl enable gpuforge-bootstrap.service; changed "enabled gpuforge-bootstrap.service"; }
