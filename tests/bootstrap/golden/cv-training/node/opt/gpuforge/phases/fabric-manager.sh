#!/bin/bash
# Rendered from bootstrap/templates/phases/fabric-manager.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install nvidia-fabricmanager-550=550.90.07-1
hold nvidia-fabricmanager-550
drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u)
fm=$(nv-fabricmanager --version | sed -n 's/.*version is *: *//p')
[ "$fm" = "$drv" ] || die "fabric manager ${fm:-missing} does not match driver $drv"
systemctl is-enabled nvidia-fabricmanager >/dev/null 2>&1 || { systemctl enable nvidia-fabricmanager; changed "enabled fabric manager"; }
systemctl is-active nvidia-fabricmanager >/dev/null 2>&1 || { systemctl start nvidia-fabricmanager; changed "started fabric manager"; }
systemctl is-active nvidia-fabricmanager >/dev/null 2>&1 || die "nvidia-fabricmanager did not start (journalctl -u nvidia-fabricmanager)"
observe fabric_manager "$fm"
