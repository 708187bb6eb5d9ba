#!/bin/bash
# Rendered from bootstrap/templates/phases/tools.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install iperf3 datacenter-gpu-manager=1:3.3.6
hold datacenter-gpu-manager
systemctl is-enabled nvidia-dcgm >/dev/null 2>&1 || { systemctl enable nvidia-dcgm; changed "enabled DCGM"; }
systemctl is-active nvidia-dcgm >/dev/null 2>&1 || { systemctl start nvidia-dcgm; changed "started DCGM"; }
observe dcgm "$(dpkg-query -W -f='${Version}' datacenter-gpu-manager)"
