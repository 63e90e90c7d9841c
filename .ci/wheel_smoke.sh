#!/usr/bin/env bash
# What a user installs, checked as a user runs it: build the wheel, then
#   1. a clean venv with the bare wheel (torch only): the core's tests, the losses and the patch;
#   2. a clean venv with the wheel's [all] extra, run from an empty folder (no checkout on the
#      path): import, `numloss --help`, a 3-step tiny train and an eval of 2 items, with the
#      configs and the demo's recorded tables found inside the installed package.
# torch==2.13.0 goes in first in each venv: an unpinned torch pulls a multi-GB CUDA build.
# Usage: .ci/wheel_smoke.sh [core] [all]   (default: both parts)
set -euo pipefail
PARTS=" ${*:-core all} "
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/numloss-wheel-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$SECONDS
step() { echo "== wheel smoke ($((SECONDS - start)) s): $*"; }

step "build the wheel"
"$PYTHON" -m pip wheel -q --no-deps --wheel-dir "$WORK/dist" "$ROOT"
WHEEL=$(ls "$WORK"/dist/numloss-*.whl)
listing=$("$PYTHON" -m zipfile -l "$WHEEL")
for file in numloss/configs/tiny.yaml numloss/configs/compare.yaml numloss/configs/compare-demo.yaml \
            numloss/configs/compare-demo-smollm2.yaml numloss/configs/compare-smollm2-words-centered.yaml \
            numloss/configs/accelerate/ds_zero3.json numloss/recorded/grid-centered.json; do
    grep -q " *$file " <<<"$listing" || { echo "wheel smoke: $file is not in $(basename "$WHEEL")"; exit 1; }
done

if [[ $PARTS == *" core "* ]]; then
step "1. bare core: pip install $(basename "$WHEEL")"
"$PYTHON" -m venv "$WORK/core"
"$WORK/core/bin/pip" install -q torch==2.13.0
"$WORK/core/bin/pip" install -q "$WHEEL" "pytest>=8"
mkdir -p "$WORK/run-core" && cd "$WORK/run-core"
"$WORK/core/bin/python" - <<'EOF'
import importlib.util
import sys

import torch

import numloss
from numloss import DigitVocab, build_loss

assert numloss.__file__.startswith(sys.prefix), f"numloss comes from {numloss.__file__}, not the venv"
extras = [m for m in ("transformers", "accelerate", "tokenizers", "peft", "datasets", "yaml", "trl") if importlib.util.find_spec(m)]
assert not extras, f"the bare wheel installed {extras}"
vocab = DigitVocab(digit_ids=range(10), decimal_point_id=10)
labels = torch.tensor([[-100, 1, 2, 10, 5, 11]])
out = build_loss("del", vocab, alpha=0.3)(torch.randn(1, 6, 12, requires_grad=True), labels)
out.loss.backward()
assert int(out.num_digits) == 3, out  # 1, 2 and 5: the point is no digit
print(f"bare core: build_loss('del') ok, loss {float(out.loss):.4f}; torch {torch.__version__}")
EOF
# the core's tests against the installed wheel; none may be skipped (`hf` marks the few that need [hf])
"$WORK/core/bin/python" -m pytest -q -p no:cacheprovider -m "not hf" -rs \
    "$ROOT/tests/test_losses.py" "$ROOT/tests/test_fused.py" "$ROOT/tests/test_patch_core.py" | tee "$WORK/core.log"
if grep -qE "[0-9]+ skipped" "$WORK/core.log"; then echo "wheel smoke: the bare-core tests skipped some"; exit 1; fi
fi

if [[ $PARTS == *" all "* ]]; then
step "2. pip install '$(basename "$WHEEL")[all]'"
"$PYTHON" -m venv "$WORK/all"
"$WORK/all/bin/pip" install -q torch==2.13.0
"$WORK/all/bin/pip" install -q "$WHEEL[all]"
mkdir -p "$WORK/run-all" && cd "$WORK/run-all"
PATH="$WORK/all/bin:$PATH"
python - <<'EOF'
import sys

import numloss
import numloss.compare
import numloss.evaluate
import numloss.hf
import numloss.trl
from numloss.package_data import config_path

assert numloss.__file__.startswith(sys.prefix), f"numloss comes from {numloss.__file__}, not the venv"
for name in ("tiny.yaml", "compare.yaml", "compare-demo.yaml", "compare-demo-smollm2.yaml"):
    path = config_path(name)
    assert str(path).startswith(sys.prefix) and path.is_file(), f"{name}: {path} is not the installed package's"
print("import ok:", numloss.__version__, numloss.__file__)
EOF
numloss --help >/dev/null
numloss --version

step "a 3-step tiny train (the package's configs/tiny.yaml)"
TINY=$(python -c "from numloss.package_data import config_path; print(config_path('tiny.yaml'))")
numloss train "$TINY" --train.max_steps 3 --train.save_steps 0 --train.logging_steps 1 \
    --train.output_dir runs/smoke --data.num_examples 64 --threads 2
test -f runs/smoke/final/config.json || { echo "wheel smoke: no runs/smoke/final/"; exit 1; }

step "an eval of 2 items of the trained model"
numloss eval runs/smoke/final --benchmarks gsm8k --data-dir "$ROOT/tests/fixtures/benchmarks" --limit 2 \
    --max-new-tokens 16 --no-digit-stats --quiet --threads 2 --out outputs/eval-smoke
grep -q "gsm8k" outputs/eval-smoke/report.md || { echo "wheel smoke: the eval report has no gsm8k row"; exit 1; }

step "the demo's recorded grid from the package (no results/ here)"
python - <<'EOF'
import json

from numloss.package_data import RECORDED_GRID_TEXT, packaged

lines = json.loads(packaged(RECORDED_GRID_TEXT).read_text(encoding="utf-8"))["lines"]
print("\n".join(lines))
assert "runs recorded" in lines[1] and any(line.lstrip().startswith("del-a0.3 - mle") for line in lines)
assert any(line.startswith("Recorded trace of digit_logit_mean") for line in lines)
EOF
fi

step "passed"
