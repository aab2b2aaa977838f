# tilex developer tasks: make test | demo | golden | clean
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q
STAMP  := $(VENV)/.tilex-installed
PYTEST_ARGS ?=

.PHONY: test demo golden clean cuda

# Create the virtualenv once (plain python3 -m venv, no sudo needed).
$(PY):
	$(PYTHON) -m venv $(VENV)

# Install tilex editable with test extras; redone when pyproject.toml changes. torch (for tilex.torch's
# tests) is installed first as torch==2.13.0, the CPU build CI and dev machines hold on disk; any other
# specifier would download a multi-GB CUDA build. An installed torch (the GPU machine's) is kept.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -c 'import torch' 2>/dev/null || $(PIP) install 'torch==2.13.0'
	$(PIP) install -e '.[test]'
	touch $@

# Run the test suite (GPU tests skip themselves where there is no GPU), one pytest worker a core (pytest-xdist;
# PYTEST_ARGS='-n 0' runs it in one process).
test: $(STAMP)
	$(PY) -m pytest -q -n auto $(PYTEST_ARGS)

# If nvidia-smi lists a GPU and CuPy isn't importable, install the cuda extra.
cuda: $(STAMP)
	@if nvidia-smi -L 2>/dev/null | grep -q '^GPU' && ! $(PY) -c 'import cupy' >/dev/null 2>&1; then \
	  echo 'GPU found: installing the cuda extra (cupy-cuda13x)'; \
	  $(PIP) install -e '.[test,cuda]'; \
	fi

# Translate and run the RMSNorm example (NumPy interpreter when there is no GPU).
demo: cuda
	mkdir -p out
	$(VENV)/bin/tilex translate examples/rmsnorm.tile -o out/rmsnorm.cu
	$(VENV)/bin/tilex run examples/rmsnorm.tile --shape M=256,N=1000 --backend auto

# Rewrite golden files from the current compiler output.
golden: $(STAMP)
	$(PY) -m pytest tests -q --update-golden

# Remove the virtualenv, build outputs and caches.
clean:
	rm -rf $(VENV) out build dist *.egg-info .pytest_cache
	find . -path ./.git -prune -o -name __pycache__ -type d -exec rm -rf {} +
