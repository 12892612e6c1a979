# fairseq_outlayers -- the commands a new user needs.
#   make demo     install everything, prepare Multi30k de-en, train every output layer, print the comparison
#   make test     install everything, run the default test suite (what CI runs)
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
DEMO_UPDATES ?= 1000
DEMO_OUT ?= work/demo

.PHONY: install demo test test-slow clean-demo

install:
	VENV=$(VENV) PYTHON=$(PYTHON) bash scripts/install.sh

demo: install
	VENV_BIN=$(VENV)/bin bash scripts/prepare-multi30k.sh --src de --tgt en
	$(PY) -m fairseq_outlayers.cli.compare --data-bin work/multi30k/data-bin/de-en --raw-dir work/multi30k/raw \
	  --lowercase --rows 'configs/demo/*.args' --max-update $(DEMO_UPDATES) --out $(DEMO_OUT) \
	  --title "make demo: Multi30k de-en, one row per output layer"

test: install
	$(PY) -m pytest -q tests

test-slow: install
	$(PY) -m pytest -q tests --run-slow
