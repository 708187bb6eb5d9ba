#!/bin/bash
# Rendered from bootstrap/templates/phases/driver.sh.j2 -- edit the template, not this output.
# Phase driver: NVIDIA driver from NVIDIA's CUDA repository, pinned and held; persistence mode
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
# NVIDIA's CUDA repository, trusted only with its pinned signing key.
repo="https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
apt_key "${repo}3bf863cc.pub" EB693B3035CD5710E231E123A4B469963BF863CC cuda
put "$R/etc/apt/sources.list.d/gpuforge-cuda.list" "deb [signed-by=/etc/apt/keyrings/cuda.gpg] $repo /"
# Pin every package of the driver to one version, so a dependency or unattended-upgrades
# cannot pull a newer driver than the fabric manager (they must match exactly). libxnvctrl0
# (nvidia-settings' library, pulled in by cuda-drivers) carries the driver's version too.
put "$R/etc/apt/preferences.d/gpuforge-nvidia-driver" "Package: /^(cuda-drivers|nvidia-|libnvidia-|libxnvctrl|xserver-xorg-video-nvidia)/
Pin: version 550.90.07-*
Pin-Priority: 1001

Package: /^nvidia-container-|^libnvidia-container/
Pin: version *
Pin-Priority: 500"
# nouveau must not claim the GPUs before nvidia does (ParallelCluster writes the same file:
# aws-parallelcluster-cookbook resources/nvidia_driver/partial/_nvidia_driver_common.rb @ 960ff9f8).
if [ "$(cat "$R/etc/modprobe.d/blacklist-nouveau.conf" 2>/dev/null)" != $'blacklist nouveau\noptions nouveau modeset=0' ]; then
  put "$R/etc/modprobe.d/blacklist-nouveau.conf" $'blacklist nouveau\noptions nouveau modeset=0'
  # nouveau may sit in the initramfs and load before the blacklist is read. Ubuntu builds its
  # initramfs with initramfs-tools; a root without it has no initramfs of that kind to rebuild.
  if command -v update-initramfs >/dev/null; then update-initramfs -u; else log "no update-initramfs: no initramfs to rebuild"; fi
fi
if grep -q '^nouveau ' "$R/proc/modules" 2>/dev/null; then
  modprobe -r nouveau || die "nouveau is loaded and in use: blacklisted now, reboot the node to continue"
  changed "unloaded nouveau"
fi
apt_install "linux-headers-$(uname -r)" cuda-drivers-550=550.90.07-1
hold cuda-drivers-550 nvidia-driver-550
# The pinned driver's kernel module is built (DKMS) for this kernel. A kernel upgrade by
# unattended-upgrades would boot into a kernel the pinned driver may not build for: hold the
# running kernel and the linux-aws meta packages that pull new ones.
for k in "linux-image-$(uname -r)" "linux-headers-$(uname -r)" "linux-modules-$(uname -r)" linux-aws linux-image-aws linux-headers-aws; do
  if installed "$k"; then hold "$k"; fi
done
nvidia-smi -L >/dev/null 2>&1 || modprobe nvidia || die "driver installed but the nvidia module does not load (Secure Boot? kernel headers?)"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi fails: no working NVIDIA driver"
# Persistence mode: keeps the driver initialised between jobs (and across reboots via the daemon).
systemctl is-enabled nvidia-persistenced >/dev/null 2>&1 || { systemctl enable nvidia-persistenced; changed "enabled nvidia-persistenced"; }
if grep -qv Enabled <<<"$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader)"; then
  nvidia-smi -pm 1 >/dev/null; changed "persistence mode on"
fi
drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u)
observe driver "$drv"
[ "$drv" = "550.90.07" ] || die "driver $drv is loaded, expected 550.90.07 (reboot after an upgrade?)"
