#!/bin/bash
# Rendered from bootstrap/templates/phases/cuda.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install cuda-toolkit-12-4=12.4.1-1
hold cuda-toolkit-12-4
# shellcheck disable=SC2016 # $PATH expands at login, not now
put "$R/etc/profile.d/gpuforge-cuda.sh" 'export PATH="/usr/local/cuda-12.4/bin:$PATH"'
grep -q "release 12.4," <<<"$("$R/usr/local/cuda-12.4/bin/nvcc" --version)" || die "nvcc is not CUDA 12.4"
observe cuda "12.4"
