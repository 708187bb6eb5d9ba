#!/bin/bash
# Rendered from bootstrap/templates/phases/efa.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
ver=1.34.0
if ! grep -q "EFA installer version: $ver" "$R/opt/amazon/efa_installed_packages" 2>/dev/null; then
  tmp=$(workdir efa)
  fetch https://efa-installer.amazonaws.com/aws-efa-installer-1.34.0.tar.gz "$tmp/efa.tar.gz" sha256 bd68839e741b0afd3ec2e37d50603803cfa7a279c120f0a736cc57c2ff2d7fdc
  tar -xzf "$tmp/efa.tar.gz" -C "$tmp"
  lock_wait  # the installer runs apt-get update and dpkg itself
  (cd "$tmp/aws-efa-installer" && ./efa_installer.sh -y)
  rm -rf "$tmp"
  changed "installed EFA installer $ver"
fi
efa_bin="$R/opt/amazon/efa/bin"
"$efa_bin/fi_info" -p efa -t FI_EP_RDM >/dev/null 2>&1 || die "libfabric has no efa provider after installing EFA $ver"
link "$efa_bin/fi_info" "$R/usr/local/bin"

ptrace=$(sysctl -n kernel.yama.ptrace_scope 2>/dev/null || echo none)
put "$R/etc/sysctl.d/90-gpuforge-efa-ptrace.conf" "kernel.yama.ptrace_scope = 0"
if [ "$ptrace" != 0 ] && [ "$ptrace" != none ]; then
  sysctl -q -w kernel.yama.ptrace_scope=0
  changed "kernel.yama.ptrace_scope=0 (was $ptrace)"
fi

apt_install libhwloc-dev

ofi="$R/opt/aws-ofi-nccl"
want=1.9.1-aws
if [ "$(cat "$ofi/.gpuforge-version" 2>/dev/null)" != "$want" ]; then
  tmp=$(workdir ofi)
  fetch https://github.com/aws/aws-ofi-nccl/releases/download/v1.9.1-aws/aws-ofi-nccl-1.9.1-aws.tar.gz "$tmp/ofi.tar.gz" sha512 77e44dcdb77e6b25cae882d2124b6d9a2a66f2b85321ae827ec7e3fd88bacd214a537a2490a578af44b7457cc655b2e382fc148b6ed8594a68a30d145f3ce70e
  mkdir "$tmp/src" && tar -xzf "$tmp/ofi.tar.gz" -C "$tmp/src" --strip-components=1
  (cd "$tmp/src" && { ./configure --prefix="$ofi" --with-libfabric="$R/opt/amazon/efa" \
    --with-cuda="$R/usr/local/cuda-12.4" --enable-platform-aws --disable-tests >configure.out 2>&1 ||
    die "aws-ofi-nccl $want: configure failed: $(grep -m1 'configure: error' configure.out || tail -n1 configure.out)"; })
  (cd "$tmp/src" && make -j"$(nproc)" && make install)
  printf '%s\n' "$want" >"$ofi/.gpuforge-version"
  rm -rf "$tmp"
  changed "built aws-ofi-nccl $want"
fi
[ -e "$ofi/lib/libnccl-net.so" ] || die "aws-ofi-nccl plugin missing at ${ofi#"$R"}/lib/libnccl-net.so"

ldconf="$R/etc/ld.so.conf.d/gpuforge-efa.conf"
want_ld=$'/opt/aws-ofi-nccl/lib\n/opt/amazon/efa/lib\n/opt/amazon/openmpi/lib'
if [ "$(cat "$ldconf" 2>/dev/null)" != "$want_ld" ]; then put "$ldconf" "$want_ld"; ldconfig; fi

put "$R/etc/gpuforge/nccl.env" 'FI_PROVIDER=efa
FI_EFA_USE_DEVICE_RDMA=1
NCCL_NET=AWS Libfabric
NCCL_SOCKET_IFNAME=^lo,docker'
put "$R/etc/profile.d/gpuforge-nccl.sh" '# gpuforge NCCL environment for login shells; the same values as /etc/gpuforge/nccl.env.
export FI_PROVIDER=efa
export FI_EFA_USE_DEVICE_RDMA=1
export NCCL_NET='"'"'AWS Libfabric'"'"'
export NCCL_SOCKET_IFNAME='"'"'^lo,docker'"'"''
observe efa_installer "$ver"
observe aws_ofi_nccl "$want"
