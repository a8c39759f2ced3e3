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
ARGS ?=
EXPERIMENT = experiments/$(OP)/$(SPEC)

.DEFAULT_GOAL := help
.PHONY: help install test-debs test tune stop experiment trial gpu-check bench clean cuda-env rocm-env

# Docker environments. The image installs the suite with `make install VENV=/opt/venv` (the install
# CI runs) into a venv outside the repository, which is mounted at CONTAINER_REPO, where the image's
# editable install points, so edits on the host are live inside. The container user gets the host
# user's uid/gid so that files written to the mount stay the host user's (root maps to 1000).
DOCKER ?= docker
CUDA_IMAGE ?= opevo-suite:cuda
ROCM_IMAGE ?= opevo-suite:rocm
WEB_PORT ?= 8080
WEB_ADDR ?= 127.0.0.1
CONTAINER_REPO ?= /workspace/opevo-suite
HOST_UID := $(shell id -u)
HOST_GID := $(shell id -g)
DOCKER_UID ?= $(if $(filter 0,$(HOST_UID)),1000,$(HOST_UID))
DOCKER_GID ?= $(if $(filter 0,$(HOST_UID)),1000,$(HOST_GID))
DOCKER_TTY ?= -it
DOCKER_BUILD_ARGS ?=
DOCKER_RUN_ARGS ?=
DOCKER_BUILD = $(DOCKER) build --build-arg REPO_DIR=$(CONTAINER_REPO) \
	--build-arg USER_UID=$(DOCKER_UID) --build-arg USER_GID=$(DOCKER_GID) $(DOCKER_BUILD_ARGS)
DOCKER_RUN = $(DOCKER) run --rm --init $(DOCKER_TTY) -v "$(CURDIR)":$(CONTAINER_REPO) \
	-p $(WEB_ADDR):$(WEB_PORT):8080 $(DOCKER_RUN_ARGS)

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP)  ## create .venv and install the suite with pinned dependencies

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=23"
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

# Debian packages the tests drive: chromium (tests/test_webui.py looks at the NNI web UI in it; playwright
# never downloads a browser of its own) and openssh-server (tests/test_remote.py runs NNI's remote training
# service against an sshd on 127.0.0.1). apt-get installs what is missing, as root or through passwordless sudo.
TEST_DEBS := /usr/bin/chromium:chromium /usr/sbin/sshd:openssh-server
test-debs:  ## install Debian's chromium and openssh-server for the tests, where missing
	@missing=""; for pair in $(TEST_DEBS); do test -x $${pair%%:*} || missing="$$missing $${pair##*:}"; done; \
	test -z "$$missing" || { \
	  command -v apt-get >/dev/null || { echo "make test: the tests need$$missing (Debian packages) and this machine has no apt-get; install them there" >&2; exit 1; }; \
	  if [ "$$(id -u)" -eq 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; \
	  else echo "make test: the tests need$$missing; not root and sudo asks for a password, so run 'sudo apt-get install$$missing' once" >&2; exit 1; fi; \
	  echo "installing$$missing for the tests (apt-get)"; \
	  $$sudo apt-get update -qq && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; }

test: install test-debs  ## run the test suite (CPU only); installs chromium and openssh-server for it if missing
	$(BIN)/python -m pytest tests

tune: install  ## tune OP/SPEC with TUNER (default mm N512K1024M1024, opevo) on the best target; web UI on PORT; RETUNE=1 to tune a recorded workload again
	test -f $(EXPERIMENT)/config_$(TUNER).yml || $(BIN)/python -m experiments.write $(OP) $(SPEC)
	$(BIN)/python -m experiments.tune $(EXPERIMENT)/config_$(TUNER).yml --port $(PORT) $(if $(RETUNE),--retune)

stop:  ## stop the experiment whose web UI is on PORT (and its web UI), e.g. the one `make tune` left running
	$(BIN)/nnictl stop --port $(PORT)

experiment: install  ## write the experiment folder of OP/SPEC (search space + one config per tuner)
	$(BIN)/python -m experiments.write $(OP) $(SPEC)

trial: install  ## measure the hand-picked config of OP/SPEC once, e.g. make trial OP=conv SPEC=N1C3HW32F8K3ST1PD1
	$(BIN)/python -m trial $(OP) $(SPEC)

gpu-check: install  ## on a GPU machine: the study's hand-picked configs vs cuBLAS/cuDNN, and a 64-trial OpEvo experiment through nnictl
	$(BIN)/python -m benchmarks.gpucheck

bench: install  ## the benchmark protocol (frozen tuners, study + held-out workloads, 5 seeds); ARGS="--quick" for one short GPU session, ARGS="--publish" to write docs/results.md
	$(BIN)/python -m benchmarks.protocol $(ARGS)

cuda-env:  ## build the CUDA image and open a shell in it: all GPUs, this repo mounted, web UI on WEB_PORT
	$(DOCKER_BUILD) -f Dockerfile.cuda -t $(CUDA_IMAGE) .
	$(DOCKER_RUN) --gpus all $(CUDA_IMAGE)

rocm-env:  ## the same for AMD GPUs (the image builds TVM with ROCm from source: long the first time)
	$(DOCKER_BUILD) -f Dockerfile.rocm -t $(ROCM_IMAGE) .
	$(DOCKER_RUN) --device /dev/kfd --device /dev/dri --group-add video $(ROCM_IMAGE)

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .hypothesis
