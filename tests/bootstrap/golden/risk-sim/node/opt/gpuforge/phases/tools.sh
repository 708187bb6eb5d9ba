#!/bin/bash
# Rendered from bootstrap/templates/phases/tools.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install iperf3 datacenter-gpu-manager=1:3.3.6
hold datacenter-gpu-manager
systemctl is-enabled nvidia-dcgm >/dev/null 2>&1 || { systemctl enable nvidia-dcgm; changed "enabled DCGM"; }
systemctl is-active nvidia-dcgm >/dev/null 2>&1 || { systemctl start nvidia-dcgm; changed "started DCGM"; }
observe dcgm "$(dpkg-query -W -f='${Version}' datacenter-gpu-manager)"
dst="$R/opt/nccl-tests"
want="v2.13.9 nccl 2.21.5-1+cuda12.4"
if [ "$(cat "$dst/.gpuforge-version" 2>/dev/null)" != "$want" ]; then
  tmp=$(workdir nccl-tests)
  fetch https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.13.9.tar.gz "$tmp/src.tar.gz" sha256 ''
  mkdir "$tmp/src" && tar -xzf "$tmp/src.tar.gz" -C "$tmp/src" --strip-components=1
  make -C "$tmp/src" -j"$(nproc)" MPI=1 MPI_HOME="$R/opt/amazon/openmpi" CUDA_HOME="$R/usr/local/cuda-12.4" NCCL_HOME="$R/usr" >/dev/null
  mkdir -p "$dst/bin"
  cp "$tmp"/src/build/*_perf "$dst/bin/"
  printf '%s\n' "$want" >"$dst/.gpuforge-version"
  rm -rf "$tmp"
  changed "built nccl-tests v2.13.9"
fi
[ -x "$dst/bin/all_reduce_perf" ] || die "nccl-tests all_reduce_perf missing in ${dst#"$R"}/bin"
for b in "$dst"/bin/*_perf; do link "$b" "$R/usr/local/bin"; done
observe nccl_tests "v2.13.9"
