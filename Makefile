# Two commands set up and use a fresh machine (Python 3.11, no GPU):
#   make demo   runs the main job on the embedded default
#   make test   runs every test, notebooks included (CI runs this)
# Tiers of make test: test-fast (the library's unit tests, under 2 min), test-slow, test-research, test-notebooks.
# Both create .venv on first use with scripts/install.py: the CPU build of torch (PyTorch's CPU index first, else
# whatever pip is configured with), then the package. On a GPU box: make install TORCH=cuda (kept for later commands).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
TORCH  ?= $(shell cat $(VENV)/.torch 2>/dev/null || echo cpu)
STAMP  := $(VENV)/.installed-$(TORCH)

.PHONY: demo test test-fast test-slow test-research test-notebooks figures readme-tables bench install clean

$(STAMP): pyproject.toml constraints.txt scripts/install.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python scripts/install.py --torch $(TORCH)
	rm -f $(VENV)/.installed-*
	echo $(TORCH) > $(VENV)/.torch
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m recast demo

test: $(STAMP)
	$(BIN)/python -m pytest --nbmake tests notebooks

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -m "not slow and not research and not gpu" -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest tests -m "slow and not research" -q

test-research: $(STAMP)
	$(BIN)/python -m pytest tests -m research -q

test-notebooks: $(STAMP)
	$(BIN)/python -m pytest --nbmake notebooks -q

# the committed figures/ and the tables their notebooks write, from their recipes (hours: scripts/figures.py --list)
figures: $(STAMP)
	$(BIN)/python scripts/figures.py $(FIGURES)

# the README's generated tables: the results from research/tables, the test counts from pytest's collection
readme-tables: $(STAMP)
	$(BIN)/python scripts/readme_tables.py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_solver.py

clean:
	rm -rf $(VENV) runs notebooks/runs *.egg-info
