# fairseq_outlayers -- the commands a new user needs.
#   make demo     install everything, prepare Multi30k de-en, train every output layer, print the comparison
#   make test     install everything, run the default test suite (what CI runs), on every core
#   make test-fast  the tests that start no command (maths, readers, option checks, registries): under 90 s
#   make results  the docs/results.md comparison: every row of configs/demo and configs/continuous, 800 updates,
#                 seeds 1 and 2 (hours on a CPU; finished runs in work/results are reused)
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# torch's index for `make install` (the CPU build: TORCH_INDEX=https://download.pytorch.org/whl/cpu); empty: PyPI
TORCH_INDEX ?=
TORCH_EXTRA_INDEX ?=
DEMO_UPDATES ?= 200
DEMO_OUT ?= work/demo
# runs at once (empty: one per CPU core, each with cores/N threads; one per GPU on CUDA)
DEMO_JOBS ?=
RESULTS_UPDATES ?= 800
RESULTS_SEEDS ?= 1 2
RESULTS_OUT ?= work/results

.PHONY: install demo results test test-fast test-slow

install:
	VENV=$(VENV) PYTHON=$(PYTHON) TORCH_INDEX=$(TORCH_INDEX) TORCH_EXTRA_INDEX=$(TORCH_EXTRA_INDEX) bash scripts/install.sh

demo: install
	VENV_BIN=$(VENV)/bin DEMO_OUT=$(DEMO_OUT) DEMO_JOBS=$(DEMO_JOBS) bash scripts/demo.sh $(DEMO_UPDATES)

results: install
	VENV_BIN=$(VENV)/bin DEMO_JOBS=$(DEMO_JOBS) bash scripts/demo.sh --updates $(RESULTS_UPDATES) --seeds "$(RESULTS_SEEDS)" \
	  --rows "configs/demo/*.args configs/continuous/*.args" --out $(RESULTS_OUT) \
	  --title "Multi30k de-en: every output layer, $(RESULTS_UPDATES) updates, seeds $(RESULTS_SEEDS)"

# every core (pytest-xdist), tests handed out one at a time as workers free up
XDIST = -n auto --dist worksteal

test: install
	$(PY) -m pytest -q $(XDIST) tests

test-fast: install
	$(PY) -m pytest -q $(XDIST) tests --fast

test-slow: install
	$(PY) -m pytest -q $(XDIST) tests --run-slow
