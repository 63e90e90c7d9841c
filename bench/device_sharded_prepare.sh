#!/usr/bin/env bash
# The half of bench/device_sharded.sh that runs HERE, on a machine that reaches PyPI: fills
# .whl/ (git-ignored through .git/info/exclude) with what the H200 image lacks, ~25 MB:
#   * deepspeed (PyPI has only its source archive; installed there without building any op) and
#     its needs the image lacks: hjson, pydantic with pydantic-core, annotated-types,
#     typing-inspection, typing-extensions;
#   * transformers and accelerate at the versions numloss is tested with (the image has
#     transformers 5.17, accelerate 1.15) and transformers' regex floor;
#   * .whl/smollm2-config: SmolLM2-135M-Instruct's config and tokenizer (no weights: the
#     pretrained file is 98 MB, more than the 64 MiB that travels to the device in one call).
# Then, on the device, in the same checkout with .whl carried:  bash bench/device_sharded.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXCLUDE=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
mkdir -p .whl
# one version of each; pydantic 2.14.4 pins pydantic-core 2.50.5
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.7.0 typing-inspection==0.4.5 \
    typing-extensions==4.16.0 regex==2026.11.19 transformers==5.24.0 accelerate==1.16.0
$PY -m pip download -q --no-deps --no-binary=:all: -d .whl deepspeed==0.19.8
SMOLLM2=${NUMLOSS_CACHE:-$HOME/.cache/numloss}/models/smollm2-135m-instruct
if [ ! -f "$SMOLLM2/config.json" ]; then
    PYTHONPATH=src $PY -m numloss models prepare smollm2
fi
mkdir -p .whl/smollm2-config
for f in config.json generation_config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
    if [ -f "$SMOLLM2/$f" ]; then cp "$SMOLLM2/$f" .whl/smollm2-config/; fi
done
ls .whl .whl/smollm2-config
du -sh .whl
