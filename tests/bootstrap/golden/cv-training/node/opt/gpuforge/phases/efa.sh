#!/bin/bash
# Rendered from bootstrap/templates/phases/efa.sh.j2 -- edit the template, not this output.
# Phase efa: EFA installer, aws-ofi-nccl, and the NCCL environment that forbids TCP fallback
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
# 4 EFA interface(s) on p4de.24xlarge: libfabric's efa provider, the AWS OFI NCCL
# plugin, and an environment that makes NCCL refuse to fall back to TCP sockets.
ver=1.34.0
if ! grep -q "EFA installer version: $ver" "$R/opt/amazon/efa_installed_packages" 2>/dev/null; then
  tmp=$(mktemp -d "$STATE/efa.XXXXXX")
  fetch https://efa-installer.amazonaws.com/aws-efa-installer-1.34.0.tar.gz "$tmp/efa.tar.gz" sha256 bd68839e741b0afd3ec2e37d50603803cfa7a279c120f0a736cc57c2ff2d7fdc
  tar -xzf "$tmp/efa.tar.gz" -C "$tmp"
  (cd "$tmp/aws-efa-installer" && ./efa_installer.sh -y)
  rm -rf "$tmp"
  changed "installed EFA installer $ver"
fi
fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1 || die "libfabric has no efa provider after installing EFA $ver"

ofi="$R/opt/aws-ofi-nccl"
want=1.9.1-aws
if [ "$(cat "$ofi/.gpuforge-version" 2>/dev/null)" != "$want" ]; then
  tmp=$(mktemp -d "$STATE/ofi.XXXXXX")
  fetch https://github.com/aws/aws-ofi-nccl/releases/download/v1.9.1-aws/aws-ofi-nccl-1.9.1-aws.tar.gz "$tmp/ofi.tar.gz" sha512 77e44dcdb77e6b25cae882d2124b6d9a2a66f2b85321ae827ec7e3fd88bacd214a537a2490a578af44b7457cc655b2e382fc148b6ed8594a68a30d145f3ce70e
  mkdir "$tmp/src" && tar -xzf "$tmp/ofi.tar.gz" -C "$tmp/src" --strip-components=1
  (cd "$tmp/src" && ./configure --prefix="$ofi" --with-libfabric="$R/opt/amazon/efa" \
    --with-cuda="$R/usr/local/cuda-12.4" --enable-platform-aws --disable-tests && make -j"$(nproc)" && make install)
  printf '%s\n' "$want" >"$ofi/.gpuforge-version"
  rm -rf "$tmp"
  changed "built aws-ofi-nccl $want"
fi
[ -e "$ofi/lib/libnccl-net.so" ] || die "aws-ofi-nccl plugin missing at ${ofi#"$R"}/lib/libnccl-net.so"

# For jobs (profile.d) and containers (docker --env-file /etc/gpuforge/nccl.env).
put "$R/etc/gpuforge/nccl.env" "FI_PROVIDER=efa
FI_EFA_USE_DEVICE_RDMA=1
NCCL_NET=AWS Libfabric
NCCL_SOCKET_IFNAME=^lo,docker
LD_LIBRARY_PATH=/opt/aws-ofi-nccl/lib:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib"
# shellcheck disable=SC2016 # sourced at login
put "$R/etc/profile.d/gpuforge-nccl.sh" 'set -a; . /etc/gpuforge/nccl.env; set +a'
observe efa_installer "$ver"
observe aws_ofi_nccl "$want"
