#!/bin/bash
# Rendered from bootstrap/templates/phases/containers.sh.j2 -- edit the template, not this output.
# shellcheck source=../lib.sh
. "${GPUFORGE_ROOT:-}/opt/gpuforge/lib.sh"
apt_install docker.io
apt_key https://nvidia.github.io/libnvidia-container/gpgkey C95B321B61E88C1809C4F759DDCAE044F796ECB0 nvidia-container-toolkit
put "$R/etc/apt/sources.list.d/gpuforge-nvidia-container-toolkit.list" "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] https://nvidia.github.io/libnvidia-container/stable/deb/amd64 /"
apt_install nvidia-container-toolkit=1.17.8-1 nvidia-container-toolkit-base=1.17.8-1 libnvidia-container-tools=1.17.8-1 libnvidia-container1=1.17.8-1
hold nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1
if ! grep -q '"nvidia"' "$R/etc/docker/daemon.json" 2>/dev/null; then
  nvidia-ctk runtime configure --runtime=docker --config="$R/etc/docker/daemon.json"
  systemctl restart docker
  changed "docker: nvidia runtime configured"
fi
systemctl is-enabled docker >/dev/null 2>&1 || { systemctl enable docker; changed "enabled docker"; }
systemctl is-active docker >/dev/null 2>&1 || { systemctl start docker; changed "started docker"; }
grep -q 'Runtimes:.*nvidia' <<<"$(docker info 2>/dev/null)" || die "docker does not list the nvidia runtime"
observe nvidia_container_toolkit "$(dpkg-query -W -f='${Version}' nvidia-container-toolkit)"
