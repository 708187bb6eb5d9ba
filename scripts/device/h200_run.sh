#!/usr/bin/env bash
# One device run on a lent GPU machine (session 4): everything that needs a real GPU, in one call.
#  1. the node install (issue 18) on this machine's CPython 3.12: the py312 lock's wheels and
#     gpuforge's own, hashed, with the bootstrap phase's pip flags, into /opt/gpuforge/venv;
#  2. that installed gpuforge's `validate --transport local` on the real GPU (node checks);
#  3. scripts/device/poc_capture.sh: nvidia-smi captures and the three POC workloads (issue 23).
# Usage (repository root on the device machine): bash scripts/device/h200_run.sh WHEELS_DIR
# WHEELS_DIR holds the py312 set (bootstrap/nodelock.py wheelhouse()). At most 8 files come back,
# so each part ends in one file under $OUT.
set -uo pipefail
wh=$(cd "${1:?folder with the py312 wheel set}" && pwd)
out=${OUT:?}
root=$(pwd)
work=$(mktemp -d)
log=$out/node.log
exec > >(tee -a "$log") 2>&1
echo "== machine"; date -u; uname -a; python3 -V; command -v python3; ldd --version | head -1; grep PRETTY /etc/os-release
echo "== 1. node install (py312 lock, --require-hashes, wheels only, no index)"
V=/opt/gpuforge/venv
lock=node-x86_64-py312.txt
t0=$(date +%s%N)
if python3 -m venv "$V" 2>"$work/venv.err"; then pip=("$V/bin/python" -m pip)
else cat "$work/venv.err"; rm -rf "$V"; python3 -m venv --without-pip "$V" && pip=(python3 -m pip --python "$V/bin/python")
  echo "(no ensurepip here: venv without pip, installed by the outer pip with --python)"; fi
"${pip[@]}" --isolated --disable-pip-version-check --no-cache-dir install -q \
  --require-hashes --only-binary :all: --no-index --find-links "$wh" -r "$wh/$lock" -r "$wh/gpuforge.txt"
echo "pip rc=$? in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
"$V/bin/gpuforge" --version
du -sm "$V/lib/python3.12/site-packages" | sed 's/^/site-packages MB: /'
"$V/bin/python" -c 'import sys, gpuforge.cli, gpuforge.validate.runner, gpuforge.validate.slurm
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pulumi", "pulumi_aws", "boto3", "botocore", "jinja2", "kubernetes"})
print("heavy modules imported:", heavy or "none")'
echo "== 2. validate --transport local with the node-installed gpuforge"
cat >"$work/inventory.yaml" <<'YAML'
# The lent machine: one H200, described as one of p5en.48xlarge's eight (the catalog's H200 node).
expect:
  gpus_per_node: 1
  interconnect: none
nodes:
  - name: lent-h200
    host: localhost
    instance_type: p5en.48xlarge
YAML
ev=$work/validate
mkdir -p "$ev"
cp "$work/inventory.yaml" "$ev/"
( cd "$work" && timeout -k 5 150 "$V/bin/gpuforge" validate --inventory inventory.yaml --transport local \
    --checks gpu.inventory,gpu.health,gpu.xid,gpu.topology,gpu.nvlink,compute,system.identity \
    --format json --out "$ev/run" --html "$ev/report.html" >"$ev/validate.json" 2>"$ev/validate.stderr" )
echo "validate rc=$?"; tail -n 12 "$ev/validate.stderr"
( cd "$work" && timeout -k 5 60 "$V/bin/gpuforge" validate --inventory inventory.yaml --transport local \
    --format plain --out "$ev/run-all" >"$ev/validate-all.txt" 2>"$ev/validate-all.stderr" )
echo "validate (all checks) rc=$?"; head -40 "$ev/validate-all.txt"
tar -C "$work" -czf "$out/validate.tar.gz" validate
echo "== 3. POC workloads and nvidia-smi captures"
mkdir -p "$work/poc"
OUT=$work/poc timeout -k 10 330 bash "$root/scripts/device/poc_capture.sh" "$root/validate/node_scripts"
echo "poc_capture rc=$?"
tar -C "$work" -czf "$out/poc.tar.gz" poc
ls -la "$out"
