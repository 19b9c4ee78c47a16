# cvsm: the two commands of the README are `make serve` and `make test`; everything else is here
# for them. All set-up (a virtualenv in .venv, client build steps) happens on demand.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8080
# pytest-xdist processes for the server's tests (each starts its own embedded PostgreSQL); many
# tests wait on real processes, so two halve the run even on two cores. 0 runs them in-process.
# Whole files go to the workers in collection order, the slowest first (server/tests/conftest.py,
# SLOW_FILES), so that the run ends on short files on both workers.
TEST_WORKERS ?= 2

# `make conformance LANG=python` runs one language. LANG is also the locale variable, so only a
# value given on the make command line selects a language, and it is kept out of the commands'
# environment (where `LANG=python` would be an invalid locale for PostgreSQL's initdb).
ifeq ($(origin LANG),command line)
LANG_ARGS := --lang $(LANG)
unexport LANG
endif

.PHONY: serve test server-test sdk-test clients-test conformance bench venv clean i18n

$(STAMP): pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]' -e 'clients/python[dev]'
	touch $@

venv: $(STAMP)

## make serve: install and start the server on the embedded PostgreSQL (data in ~/.local/share/cvsm)
serve: $(STAMP)
	$(VENV)/bin/cvsm-server serve --host $(HOST) --port $(PORT)

## make test: the server's tests, and beside them every client's own tests then the conformance
## suite (about 25-30 minutes on 2 cores: the halves mostly wait on processes, so they overlap;
## their output interleaves, each part ends with its own summary)
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 server-test sdk-test

# The SDKs' generated constants agree with conformance/rules.json, every client's own tests, then the
# conformance suite (what `make test` runs beside the server's).
sdk-test: $(STAMP)
	$(PY) -m conformance.gen_constants --check
	$(PY) -m conformance unit-tests $(LANG_ARGS)
	$(PY) -m conformance run $(LANG_ARGS)

server-test: $(STAMP)
	$(PY) -m pytest server/tests -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
	$(PY) -m pytest conformance/tests -q -p no:cacheprovider

clients-test: $(STAMP)
	$(PY) -m conformance.gen_constants --check
	$(PY) -m conformance unit-tests $(LANG_ARGS)

conformance: $(STAMP)
	$(PY) -m conformance run $(LANG_ARGS)

## make i18n: extract the pages', flashes' and mails' texts and update the catalogs
## (server/cvsm_server/locale/{en,id}/LC_MESSAGES/messages.po); then translate the new English
## entries (an empty msgstr fails server/tests/test_i18n.py)
i18n: $(STAMP)
	$(PY) -m cvsm_server.core.i18n_tool update

## make bench: every benchmark in bench/, each printing ratios measured in one run
bench: $(STAMP)
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) conformance/reports
