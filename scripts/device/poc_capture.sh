#!/usr/bin/env bash
# One device run (issue 23): capture nvidia-smi outputs and run the three shipped POC workloads
# and validate's compute probe for real on the lent GPU. Everything lands in $OUT: the results
# as JSON files, the nvidia-smi captures in one tarball (the device tool returns at most 8 files).
# Usage (on the device machine): bash poc_capture.sh DIR_WITH_SCRIPTS
set -uo pipefail
here=${1:?dir holding poc_workloads.py and gpu_compute.py}
out=${OUT:?}
py=${PYTHON:-python3}
cap=$(mktemp -d)/capture
mkdir -p "$cap"
export PYTHONUNBUFFERED=1 GPUFORGE_POC_INSTANCE_TYPE=${GPUFORGE_POC_INSTANCE_TYPE:-lent-h200} GPUFORGE_POC_NODES=1
date -u +%Y-%m-%dT%H:%M:%SZ >"$cap/date.txt"
nvidia-smi >"$cap/nvidia-smi.txt" 2>&1
nvidia-smi -q -x >"$cap/nvidia-smi-q.xml" 2>&1
nvidia-smi -q >"$cap/nvidia-smi-q.txt" 2>&1
nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE >"$cap/nvidia-smi-q-health.txt" 2>&1
nvidia-smi topo -m >"$cap/nvidia-smi-topo-m.txt" 2>&1
nvidia-smi nvlink -s >"$cap/nvidia-smi-nvlink-s.txt" 2>&1
nvidia-smi --query-gpu=index,name,uuid,serial,pci.bus_id,memory.total,driver_version,vbios_version,persistence_mode \
  --format=csv >"$cap/nvidia-smi-query-gpu.csv" 2>&1
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,power.limit --format=csv >"$cap/nvidia-smi-query-gpu-extra.csv" 2>&1
"$py" -c 'import torch,sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))' >"$cap/python-torch.txt" 2>&1
uname -a >"$cap/uname.txt"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || ngpu=1
run() {  # name, then the command; the last stdout line is the result
  local name=$1; shift
  echo "== $name: $*"
  GPUFORGE_POC_COMMAND="$*" timeout -k 5 110 "$@" >"$cap/$name.stdout" 2>"$cap/$name.stderr"
  echo "rc=$?"; tail -n 3 "$cap/$name.stderr"
  tail -n 1 "$cap/$name.stdout" | tee "$out/$name.json"
}
run resnet50-train "$py" -m torch.distributed.run --standalone --nproc_per_node="$ngpu" "$here/poc_workloads.py" \
  resnet50-train --batch-size 64 --warmup-steps 20 --max-steps 400 --max-seconds 25
# NVIDIA's published ResNet-50 figures use 256 images per GPU: measure that batch too, to compare like with like.
run resnet50-train-bs256 "$py" -m torch.distributed.run --standalone --nproc_per_node="$ngpu" "$here/poc_workloads.py" \
  resnet50-train --batch-size 256 --warmup-steps 15 --max-steps 150 --max-seconds 25
run bert-infer "$py" "$here/poc_workloads.py" bert-infer --batch-sizes 1,8,32,128 --seq-len 128 \
  --warmup-steps 10 --max-steps 300 --max-seconds 8
run mc-fp64 "$py" "$here/poc_workloads.py" mc-fp64 --paths-per-chunk 4194304 --time-steps 64 \
  --warmup-steps 3 --max-steps 100 --max-seconds 15
run gpu-compute "$py" "$here/gpu_compute.py"
nvidia-smi >"$cap/nvidia-smi-after.txt" 2>&1
tar -C "$(dirname "$cap")" -czf "$out/capture.tar.gz" capture
ls -la "$out"
