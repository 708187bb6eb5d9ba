#!/bin/bash
# Rendered from bootstrap/templates/phases/ngc.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
img=nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04
if docker image inspect "$img" >/dev/null 2>&1; then
  log "$img already present"
else
  docker pull -q "$img" >/dev/null || die "docker pull $img failed (private image? set gpuforge:ngcApiKeyParameter)"
  changed "pulled $img"
fi
observe ngc_image "$img"
