#!/bin/bash
# Rendered from bootstrap/templates/phases/cuda.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install cuda-toolkit-12-4=12.4.1-1 libnccl2=2.21.5-1+cuda12.4 libnccl-dev=2.21.5-1+cuda12.4
hold cuda-toolkit-12-4 libnccl2 libnccl-dev
# shellcheck disable=SC2016 # $PATH expands at login, not now
put "$R/etc/profile.d/gpuforge-cuda.sh" 'export PATH="/usr/local/cuda-12.4/bin:$PATH"'
grep -q "release 12.4," <<<"$("$R/usr/local/cuda-12.4/bin/nvcc" --version)" || die "nvcc is not CUDA 12.4"
observe cuda "12.4"
observe nccl "$(dpkg-query -W -f='${Version}' libnccl2)"
