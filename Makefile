# `make demo` and `make test` each set everything up on a fresh machine.
# Each target installs the extra it needs (demo: NumPy and tqdm; docs: MkDocs;
# dev: everything), once per change of pyproject.toml. VENV=/tmp/venv puts the
# virtual environment elsewhere.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The Material theme's notice about its end of life, printed on every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

.PHONY: demo test lint docs bench mutants tsan clean core dist

$(PY):
	$(PYTHON) -m venv $(VENV)

# The editable install also builds the compiled core (src/exactbatch/_core*.c and its
# private headers) next to the sources; a failed compile still installs (the pure
# NumPy path runs then).
CORE_SOURCES := $(wildcard src/exactbatch/_core*.c src/exactbatch/_core*.h)
$(VENV)/.installed-%: pyproject.toml $(CORE_SOURCES) | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[$*]'
	touch $@

# Rebuild only the compiled core in place (after editing its C sources).
core: $(VENV)/.installed-dev
	$(PY) setup.py --quiet build_ext --inplace

# An sdist and a wheel (with the compiled core) under build/dist/.
dist: $(VENV)/.installed-dev
	$(PY) setup.py --quiet sdist --dist-dir build/dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --no-index --disable-pip-version-check --wheel-dir build/dist .

demo: $(VENV)/.installed-demo
	$(PY) examples/demo.py

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check src tests bench examples docs
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy

docs: $(VENV)/.installed-docs
	$(MKDOCS)

# The suite in parallel (pytest-xdist): one worker per core, at most 4 (each imports
# torch, JAX and PyMC). --dist load hands the tests out in the order collected, so
# the JAX modules still come last in every worker (tests/conftest.py says why).
# A plain `pytest` runs serially.
test: lint
	$(MKDOCS)
	$(PY) -m pytest -n auto --maxprocesses=4 --dist load

bench: $(VENV)/.installed-dev
	$(PY) bench/bench_core.py

# Mutation testing (not part of `make test`; about an hour and a half on 2 cores,
# half an hour of it the compiled core's): the kill rate per target and the surviving
# mutants. `make mutants TARGETS="order core"` runs some targets;
# `$(PY) tests/mutants.py --summary --diff` shows the last results.
mutants: $(VENV)/.installed-dev
	$(PY) tests/mutants.py $(TARGETS)

# The compiled core built with -fsanitize=thread (in build/tsan/) and its thread tests run
# under ThreadSanitizer (not part of `make test`; a few minutes). Needs gcc's TSan
# runtime: `apt-get install libtsan2` on Debian or Ubuntu (tests/tsan.sh says so).
tsan: $(VENV)/.installed-dev
	PY=$(PY) tests/tsan.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build site src/*.egg-info
