# fairseq_outlayers -- the commands a new user needs.
#   make demo     install everything, prepare Multi30k de-en, train every output layer, print the comparison
#   make test     install everything, run the default test suite (what CI runs)
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
DEMO_UPDATES ?= 200
DEMO_OUT ?= work/demo

.PHONY: install demo test test-slow clean-demo

install:
	VENV=$(VENV) PYTHON=$(PYTHON) bash scripts/install.sh

demo: install
	VENV_BIN=$(VENV)/bin DEMO_OUT=$(DEMO_OUT) bash scripts/demo.sh $(DEMO_UPDATES)

test: install
	$(PY) -m pytest -q tests

test-slow: install
	$(PY) -m pytest -q tests --run-slow
