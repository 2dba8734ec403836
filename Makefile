# Two commands set up and use a fresh machine (Python 3.11, no GPU):
#   make demo   runs the main job on the embedded default
#   make test   runs every test, notebooks included
# Both create .venv on first use; the constraints file keeps torch on its CPU build.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m recast demo

test: $(STAMP)
	$(BIN)/python -m pytest --nbmake tests notebooks

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_solver.py

clean:
	rm -rf $(VENV) runs notebooks/runs *.egg-info
