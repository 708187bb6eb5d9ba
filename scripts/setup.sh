#!/usr/bin/env bash
# Sets up a development environment: Debian packages for the test hosts (when root), and a
# virtual environment in .venv with gpuforge and its dev tools installed. Idempotent: a second
# run installs nothing unless pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# slurmctld, slurmd, slurm-client, munge, libpmix2, libpmix-dev: the real Slurm of tests/slurm (srun --mpi=pmix
# dlopens the unversioned libpmix.so, which only libpmix-dev installs).
# slurmdbd, mariadb-server: Slurm accounting on a real database (tests/slurm/acctbed.py).
# mmdebstrap, systemd-container, apt-utils, gnupg: the first-boot rehearsal (tests/rehearsal).
# ethtool: the test bed's policer turns segmentation offload off (tests/validate/testbed.py police).
# netplan.io: netplan's real generator for the ENA Express MTU drop-in (tests/bootstrap/test_ena_express_mtu.py).
want_debs=${GPUFORGE_DEBS:-"iproute2 ethtool openssh-server openssh-client iperf3 iputils-ping procps shellcheck cloud-init slurmctld slurmd slurm-client munge libpmix2 libpmix-dev slurmdbd mariadb-server mmdebstrap systemd-container apt-utils gnupg chromium netplan.io"}
if [ "${1:-}" = "--with-test-hosts" ] && [ "$(id -u)" = 0 ]; then
  missing=""
  for pkg in $want_debs; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "setup: installing Debian packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$py" -m venv .venv
fi
stamp=.venv/.gpuforge-installed
# The editable install is setuptools' strict mode: a link tree under build/ that maps the folders to
# the gpuforge.* names exactly as the wheel does, which mypy can follow (the default import-hook mode
# it cannot). A link tree sees edits at once but not new files, so the stamp also records the list of
# package files: adding or removing one reinstalls (a few seconds, no dependency is fetched).
files_now=$(find cli common core components bootstrap validate policy -type f -not -path '*/__pycache__/*' | LC_ALL=C sort | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing gpuforge and dev tools into .venv (about a minute the first time)"
  # pip compiles .pyc at install time; this environment may set PYTHONDONTWRITEBYTECODE, and
  # without .pyc every run re-parses pulumi_aws (research/pulumi-feasibility.md §1).
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]' --config-settings editable_mode=strict
  echo "$files_now" > "$stamp"
elif [ "$(cat "$stamp")" != "$files_now" ]; then
  echo "setup: package files added or removed: refreshing the editable install's link tree"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e . --config-settings editable_mode=strict
  echo "$files_now" > "$stamp"
fi
