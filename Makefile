VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint bench soak clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/memledger serve

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check ledger consolidation worker tests
	$(VENV)/bin/ruff format --check ledger consolidation worker tests
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m pytest -q -s -m bench tests/bench -p no:cacheprovider

soak: $(STAMP)
	$(PY) -m pytest -q -m soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
