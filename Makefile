# The two commands: `make book` builds the website, `make test` checks everything CI checks.
SHELL := /bin/bash
.DEFAULT_GOAL := book

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NB     := $(sort $(wildcard book/*.ipynb))
NBVAL  := $(PY) -m pytest --nbval --nbval-current-env --nbval-cell-timeout=600 \
          --nbval-sanitize-with nbval_sanitize.cfg -p no:cacheprovider

.PHONY: book test venv assets lint unit nbval site browser execute colab-cells clean

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

## make test: lint, unit tests, nbval over every chapter, strict site build, browser tests (stops at the first failure)
test: lint unit nbval site

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check src

# the chart tests evaluate Vega expressions with the site's own packages, so they need node_modules
unit: $(STAMP) node_modules/.package-lock.json
	$(PY) -m pytest -q tests --ignore=tests/site

nbval: $(STAMP)
	$(NBVAL) $(NB)

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
