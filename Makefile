# `make demo` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench mutants clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples

test: lint
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/bench_core.py

# Mutation testing (not part of `make test`; about an hour on 2 cores): the kill
# rate per target and the surviving mutants. `make mutants TARGETS="order ndf"`
# runs some targets; `$(PY) tests/mutants.py --summary --diff` shows the last results.
mutants: $(STAMP)
	$(PY) tests/mutants.py $(TARGETS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build src/*.egg-info
