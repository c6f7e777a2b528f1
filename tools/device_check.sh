#!/bin/bash
# The real-GPU check of pytest-gpuaccept, run once on a GPU machine with PyTorch and NVML (no network):
# records NVML, nvidia-smi, sysfs and provenance readings, and runs the acceptance suite on a 1-GPU
# contract. Everything lands in $OUT/device.tar.gz (tests/data/h200/ holds what a session recorded).
# Wheels: .whl/ holds pytest_gpuaccept (built here: pip wheel --no-deps -w .whl .), pytest-html, pytest-metadata.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; R=$OUT/rec; mkdir -p "$R"
step() { echo "== $*"; }
step install
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >"$R/pip.txt" 2>&1
export PYTHONPATH=/tmp/site
python3 -c "import pytest, pynvml, torch, pytest_gpuaccept; print('pytest', pytest.__version__, 'torch', torch.__version__, 'nvml', pynvml.__file__)" >"$R/versions.txt" 2>&1
step nvidia-smi
timeout 30 nvidia-smi >"$R/nvidia-smi.txt" 2>&1
timeout 30 nvidia-smi -q >"$R/nvidia-smi-q.txt" 2>&1
timeout 30 nvidia-smi topo -m >"$R/nvidia-smi-topo-m.txt" 2>&1
timeout 30 nvidia-smi nvlink -s >"$R/nvidia-smi-nvlink-s.txt" 2>&1; echo "rc=$?" >>"$R/nvidia-smi-nvlink-s.txt"
timeout 30 nvidia-smi --query-gpu=index,name,pci.bus_id,pci.device_id,mig.mode.current,power.limit,power.default_limit,enforced.power.limit --format=csv >"$R/nvidia-smi-query.csv" 2>&1
step sysfs
for d in /sys/bus/pci/devices/*; do
  printf '%s vendor=%s device=%s class=%s physfn=%s driver=%s\n' "${d##*/}" "$(cat $d/vendor)" "$(cat $d/device)" "$(cat $d/class)" \
    "$(test -e $d/physfn && echo yes || echo no)" "$(basename "$(readlink $d/driver 2>/dev/null)" 2>/dev/null)"
done >"$R/sysfs-pci-list.txt" 2>&1
for n in /sys/class/net/*; do echo "${n##*/} device=$(readlink -f $n/device 2>/dev/null) type=$(cat $n/type) phys_port_id=$(cat $n/phys_port_id 2>&1 | head -c 80)"; done >"$R/sysfs-net.txt" 2>&1
step record-nvml
timeout 60 python3 -m pytest_gpuaccept record-nvml "$R/nvml-h200.json" --samples 3 >"$R/record-nvml.txt" 2>&1
CUDA_VISIBLE_DEVICES= timeout 60 python3 -m pytest_gpuaccept record-nvml "$R/nvml-h200-cuda-visible-devices-empty.json" --samples 0 >>"$R/record-nvml.txt" 2>&1
step provenance
{ for t in nvidia-smi python3 dmesg; do p=$(command -v $t); echo "$t $p $(readlink -f $p)"; sha256sum "$(readlink -f $p)"; head -c 4 "$(readlink -f $p)" | od -c | head -1; dpkg -S "$(readlink -f $p)" 2>&1; done; } >"$R/provenance.txt" 2>&1
timeout 20 dmesg 2>&1 | tail -50 >"$R/dmesg-tail.txt"
step doctor
timeout 120 python3 -m pytest_gpuaccept doctor --contract h200-sxm-1gpu >"$R/doctor-h200.txt" 2>&1; echo "rc=$?" >>"$R/doctor-h200.txt"
timeout 120 python3 -m pytest_gpuaccept doctor --contract h100-sxm5-8gpu >"$R/doctor-h100-preset.txt" 2>&1; echo "rc=$?" >>"$R/doctor-h100-preset.txt"
step torch-allreduce
timeout 120 python3 -m pytest_gpuaccept.workloads.torch_allreduce -g 1 -b 1048576 -e 67108864 -f 2 -n 5 -w 2 >"$R/torch-allreduce-1gpu.txt" 2>"$R/torch-allreduce-1gpu.stderr.txt"
step acceptance
mkdir -p "$R/run"
(cd "$R/run" && timeout 300 python3 -m pytest --contract=h200-sxm-1gpu -p no:cacheprovider -rA >pytest.txt 2>&1; echo "rc=$?" >>pytest.txt)
tail -5 "$R/run/pytest.txt"
step pack
tar -czf "$OUT/device.tar.gz" -C "$OUT" rec && rm -rf "$R"
ls -la "$OUT"
