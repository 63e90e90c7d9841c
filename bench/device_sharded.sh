#!/usr/bin/env bash
# One prepared command for one H200: fused vs unfused DEL under FSDP1 full_shard and DeepSpeed
# ZeRO-3 (accelerate, world size 1), SmolLM2-135M in bf16, 20 steps; loss curves must agree to
# 1e-3 (relative, every step); peak GPU memory of each run. Exit status 1 if they do not.
#
#   here:      bash bench/device_sharded_prepare.sh        # fills .whl/ (deepspeed & co, config)
#   device:    bash bench/device_sharded.sh                # with .whl carried; ~5 min
#              (device tool: run(command="bash bench/device_sharded.sh", carry=[".whl"], timeout_s=600))
#
# Results: $OUT (default runs/device_sharded): one JSON and one log per run, sharded.md (the
# table for docs/benchmarks.md); the runs' checkpoints and final models go to /tmp, not $OUT. Weights: NUMLOSS_SMOLLM2_DIR, a prepared SmolLM2 folder
# (`numloss models prepare smollm2`), when one is on the machine; otherwise a model of
# SmolLM2-135M's exact shape (config and tokenizer from .whl/smollm2-config) with seeded random
# weights, because the pretrained file does not fit in what travels. The run says which.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/device_sharded}
WHEELS=${NUMLOSS_WHEELS:-.whl}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

# 1. what the image lacks, into /tmp/site (ahead of the image's packages on PYTHONPATH)
if [ -d "$WHEELS" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl || exit 1
    if [ -n "$(ls "$WHEELS"/deepspeed-*.tar.gz 2>/dev/null)" ]; then
        # source archive: no op is compiled now (DS_BUILD_OPS=0); ZeRO-3 with torch's AdamW needs none
        PYTHONPATH=/tmp/site DS_BUILD_OPS=0 $PY -m pip install -q --no-index --no-deps --no-build-isolation \
            --no-cache-dir --target /tmp/site "$WHEELS"/deepspeed-*.tar.gz || exit 1
    fi
fi
export PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
$PY -c "import torch, transformers, accelerate, deepspeed; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'deepspeed', deepspeed.__version__, torch.cuda.get_device_name())" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# 2. the model
if [ -n "${NUMLOSS_SMOLLM2_DIR:-}" ]; then
    MODEL=$NUMLOSS_SMOLLM2_DIR; echo "weights: pretrained SmolLM2-135M-Instruct from $MODEL"
else
    MODEL=/tmp/smollm2-135m-seeded
    [ -f "$MODEL/config.json" ] || $PY bench/sharded.py init-model --config-dir "$WHEELS/smollm2-config" --out "$MODEL" || exit 1
    echo "weights: SmolLM2-135M shape, seeded random initialisation (pretrained weights not on this machine)"
fi

# 3. four runs, each its own accelerate launch (world size 1)
port=29600
for mode in fsdp1 zero3; do
    case $mode in
        fsdp1) config=configs/accelerate/fsdp.yaml ;;
        zero3) config=configs/accelerate/deepspeed_zero3.yaml ;;
    esac
    for fused in false true; do
        port=$((port + 1))
        echo "== $mode fused=$fused"
        # 4 x 120 s and the set-up fit in one 600 s device call, so the report always runs
        # (bench/device_compare.sh call2 sets SHARDED_RUN_TIMEOUT to fit its share of the plan)
        timeout "${SHARDED_RUN_TIMEOUT:-120}" $PY -m accelerate.commands.launch --config_file $config --num_processes 1 --main_process_port $port \
            bench/sharded.py run --mode $mode --fused $fused --model "$MODEL" --out "$OUT" \
            > "$OUT/$mode-$fused.log" 2>&1 || { echo "$mode fused=$fused FAILED:"; tail -40 "$OUT/$mode-$fused.log"; }
        grep "^run " "$OUT/$mode-$fused.log" || true
    done
done

# 4. the table, and the check
$PY bench/sharded.py report "$OUT" | tee "$OUT/sharded.md"
exit "${PIPESTATUS[0]}"
