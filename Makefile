# OpEvo Suite. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
OP ?= mm
SPEC ?= N512K1024M1024
TUNER ?= opevo
PORT ?= 8080
RETUNE ?=
EXPERIMENT = experiments/$(OP)/$(SPEC)

.DEFAULT_GOAL := help
.PHONY: help install test tune experiment trial clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP)  ## create .venv and install the suite with pinned dependencies

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=23"
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

test: install  ## run the test suite (CPU only)
	$(BIN)/python -m pytest tests

tune: install  ## tune OP/SPEC with TUNER (default mm N512K1024M1024, opevo) on the best target; web UI on PORT; RETUNE=1 to tune a recorded workload again
	test -f $(EXPERIMENT)/config_$(TUNER).yml || $(BIN)/python -m trial.space $(OP) $(SPEC)
	$(BIN)/python -m trial.tune $(EXPERIMENT)/config_$(TUNER).yml --port $(PORT) $(if $(RETUNE),--retune)

experiment: install  ## write the experiment folder of OP/SPEC (search space + one config per tuner)
	$(BIN)/python -m trial.space $(OP) $(SPEC)

trial: install  ## measure the hand-picked config of OP/SPEC once, e.g. make trial OP=conv SPEC=N1C3HW32F8K3ST1PD1
	$(BIN)/python -m trial $(OP) $(SPEC)

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .hypothesis
