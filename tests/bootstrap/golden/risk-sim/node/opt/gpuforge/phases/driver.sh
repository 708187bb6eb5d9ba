#!/bin/bash
# Rendered from bootstrap/templates/phases/driver.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
repo="https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
apt_key "${repo}3bf863cc.pub" EB693B3035CD5710E231E123A4B469963BF863CC cuda
put "$R/etc/apt/sources.list.d/gpuforge-cuda.list" "deb [signed-by=/etc/apt/keyrings/cuda.gpg] $repo /"
put "$R/etc/apt/preferences.d/gpuforge-nvidia-driver" "Package: /^(cuda-drivers|nvidia-|libnvidia-|libxnvctrl|xserver-xorg-video-nvidia)/
Pin: version 550.90.07-*
Pin-Priority: 1001

Package: /^nvidia-container-|^libnvidia-container/
Pin: version *
Pin-Priority: 500"
if [ "$(cat "$R/etc/modprobe.d/blacklist-nouveau.conf" 2>/dev/null)" != $'blacklist nouveau\noptions nouveau modeset=0' ]; then
  put "$R/etc/modprobe.d/blacklist-nouveau.conf" $'blacklist nouveau\noptions nouveau modeset=0'
  if command -v update-initramfs >/dev/null; then update-initramfs -u; else log "no update-initramfs: no initramfs to rebuild"; fi
fi
if grep -q '^nouveau ' "$R/proc/modules" 2>/dev/null; then
  modprobe -r nouveau || die "nouveau is loaded and in use: blacklisted now, reboot the node to continue"
  changed "unloaded nouveau"
fi
apt_install "linux-headers-$(uname -r)" cuda-drivers-550=550.90.07-1
hold cuda-drivers-550 nvidia-driver-550
for k in "linux-image-$(uname -r)" "linux-headers-$(uname -r)" "linux-modules-$(uname -r)" linux-aws linux-image-aws linux-headers-aws; do
  if installed "$k"; then hold "$k"; fi
done
nvidia-smi -L >/dev/null 2>&1 || modprobe nvidia || die "driver installed but the nvidia module does not load (Secure Boot? kernel headers?)"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi fails: no working NVIDIA driver"
systemctl is-enabled nvidia-persistenced >/dev/null 2>&1 || { systemctl enable nvidia-persistenced; changed "enabled nvidia-persistenced"; }
if grep -qv Enabled <<<"$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader)"; then
  nvidia-smi -pm 1 >/dev/null; changed "persistence mode on"
fi
drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u)
observe driver "$drv"
[ "$drv" = "550.90.07" ] || die "driver $drv is loaded, expected 550.90.07 (reboot after an upgrade?)"
