# The two commands: `make book` builds the website, `make test` checks everything CI checks.
SHELL := /bin/bash
.DEFAULT_GOAL := book

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NB     := $(sort $(wildcard book/*.ipynb))
# nbval starts the slowest chapters first (by the times stored in them), so that both workers end together
NB_SLOWEST_FIRST = $(shell python3 tools/heavy_first.py $(NB))
# the tests run on WORKERS processes (pytest-xdist): a test file, or a notebook's cells, stay on one of them
WORKERS ?= 2
NBVAL  := $(PY) -m pytest --nbval --nbval-current-env --nbval-cell-timeout=600 \
          --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider -n $(WORKERS) --dist loadscope \
          --no-loadscope-reorder

# A second nbval run under another CPU kernel set and one thread: stored outputs must not depend on float rounding.
PORTABLE := ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2 OMP_NUM_THREADS=1

.PHONY: book test venv assets lint unit nbval nbval-portable site browser execute colab-cells clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

# the website's JavaScript, pinned in package-lock.json and served from _static/vendor
node_modules/.package-lock.json: package-lock.json
	npm ci --no-audit --no-fund

assets: node_modules/.package-lock.json $(STAMP)
	$(PY) tools/site_assets.py

## make book: build the website into _build/html from the outputs stored in the notebooks
book: $(STAMP) assets
	$(VENV)/bin/jupyter-book build .
	@echo "Open $(CURDIR)/_build/html/index.html"

## make test: lint, unit tests, nbval over every chapter (natively, then under another kernel set, each chapter
## alone in a folder against the built wheel), strict site build, browser tests (stops at the first failure)
test: lint unit nbval nbval-portable site

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check src

# the chart tests evaluate Vega expressions with the site's own packages, so they need node_modules
unit: $(STAMP) node_modules/.package-lock.json
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile tests --ignore=tests/site

nbval: $(STAMP)
	$(NBVAL) $(NB_SLOWEST_FIRST)

# ... and as Colab meets a chapter: each notebook alone in an empty folder, against the package installed
# from a built wheel (not the source tree), so a chapter that reads a file beside it fails here; its kernel
# imports only what `pip install aiayn[book]` installs (--reader-install: tools/reader_install.py)
ALONE := _build/alone
nbval-portable: $(STAMP)
	rm -rf $(ALONE) build && mkdir -p $(ALONE)
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir $(ALONE)/wheel .
	rm -rf build  # setuptools' staging folder: never reused by a later wheel
	$(PY) -m pip install --quiet --no-deps --target $(ALONE)/site $(ALONE)/wheel/aiayn-*.whl
	for nb in $(NB); do name=$$(basename $$nb .ipynb); mkdir $(ALONE)/$$name && cp $$nb $(ALONE)/$$name/; done
	PYTHONPATH=$(CURDIR)/$(ALONE)/site $(PY) -c "import aiayn, sys; \
	  sys.exit(0 if '$(ALONE)/site/' in aiayn.__file__ else f'aiayn comes from {aiayn.__file__}, not the wheel')"
	PYTHONPATH=$(CURDIR)/$(ALONE)/site $(PORTABLE) $(NBVAL) --reader-install \
	  $(foreach nb,$(NB_SLOWEST_FIRST),$(ALONE)/$(basename $(notdir $(nb)))/$(notdir $(nb)))

site: $(STAMP) assets
	rm -rf _build/html _build/.doctrees _build/screenshots
	$(VENV)/bin/jupyter-book build -W -n --keep-going .
	$(PY) -m pytest -q tests/site

## make browser: the browser tests alone, against the site `make book` built
browser: $(STAMP)
	$(PY) -m pytest -q tests/site

## make execute: re-run every chapter in place, storing outputs and widget state
execute: $(STAMP)
	$(PY) tools/execute.py $(if $(NOTEBOOKS),$(NOTEBOOKS),$(NB))

## make colab-cells: rewrite each chapter's first cell from the repository URL in _config.yml
colab-cells: $(STAMP)
	$(PY) tools/colab_cells.py $(NB)

clean:
	rm -rf _build

## make release RUN=runs/multi30k: weights, SHA256SUMS and a model card in runs/release, for a GitHub release
.PHONY: release
release: $(STAMP)
	$(PY) -m aiayn.published release $(RUN) --out $(or $(OUT),runs/release)
