#!/usr/bin/env bash
# One prepared command for one H200: bench/gpu.py (bare CE, DEL unfused and fused, Liger-Kernel's
# fused linear cross-entropy) at V=151936, H in {1536, 3584}, N in {8192, 32768}, bf16.
#
#   here:    mkdir -p .whl && grep -qx '.whl/' .git/info/exclude 2>/dev/null || echo '.whl/' >> .git/info/exclude
#            pip download --no-deps -d .whl liger-kernel     # 0.8.5, py3-none-any (checked 2026-12-03); triton is on the device
#   device:  bash bench/device_gpu.sh      (device tool: run(command="bash bench/device_gpu.sh", carry=[".whl"], timeout_s=600))
#
# Prints the table and the goal ratios (DEL fused / Liger <= 1.15 in time and memory, DEL / CE
# <= 1.05 in time) for docs/benchmarks.md; writes $OUT/gpu.json. Without the Liger wheel it runs
# the rest and says that the fused ratio was not measured.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/device_gpu}
WHEELS=${NUMLOSS_WHEELS:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
if [ -n "$(ls "$WHEELS"/liger_kernel-*.whl 2>/dev/null)" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEELS"/liger_kernel-*.whl || exit 1
fi
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# GPU_BENCH_ARGS: extra bench/gpu.py arguments (bench/device_compare.sh call1: fewer repeats)
timeout 540 $PY bench/gpu.py --json "$OUT/gpu.json" ${GPU_BENCH_ARGS:-} | tee "$OUT/gpu.md"
exit "${PIPESTATUS[0]}"
