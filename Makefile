# kdkit's developer commands. Everything runs from the locked virtual environment in .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: help venv test lint typecheck unit demo engine bench lock-deps clean

help:  ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

$(STAMP): requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements/dev.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP)  ## Create .venv from kdkit's hashed dev lock.

lint: $(STAMP)  ## ruff over the package, tests and benchmarks.
	$(BIN)/ruff check kdkit tests bench

typecheck: $(STAMP)  ## mypy, strict, on kdkit/.
	$(BIN)/mypy

# Test workers: pytest-xdist's `auto` (one per CPU); WORKERS=0 runs the whole suite in one process.
WORKERS ?= auto

unit: $(STAMP)  ## pytest: all but the Docker tests on WORKERS workers (a module each), then the Docker tests.
ifeq ($(WORKERS),0)
	$(BIN)/pytest
else
	$(BIN)/pytest -n $(WORKERS) --dist loadfile -m "not docker"; first=$$?; \
	  $(BIN)/pytest -p no:xdist -m docker; second=$$?; \
	  [ $$first -eq 0 ] && [ $$second -eq 0 ]
endif

test: lint typecheck unit  ## The test command: ruff, mypy --strict, pytest.

demo: $(STAMP)  ## The main job on the embedded example, locally on CPU (no GPU, no registry).
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/demo.sh

engine:  ## Install and start a local Docker engine and build the test base image (root).
	bash scripts/engine.sh

bench: $(STAMP)  ## Run every benchmark in bench/ (figures land in bench/results/).
	@for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lock-deps:  ## Re-lock kdkit's own dependencies (requirements/*.txt) with pip-tools.
	cd requirements && for f in runtime dev; do \
	  ../$(BIN)/pip-compile -q --generate-hashes --allow-unsafe --strip-extras \
	    --no-emit-index-url --no-emit-find-links $$f.in -o $$f.txt; done

clean:  ## Remove the virtual environment and caches.
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
